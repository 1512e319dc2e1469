"""Rules: the plain, composable objects that tell each rank's actor which ready action to run next.

A ``Rules`` value is a keyword-only slotted dataclass; ``with_(...)`` changes fields, ``on(rank, ...)``
adds a per-rank override, ``for_rank(r)`` resolves the overrides. ``in_flight`` may be a formula in
``p`` (ranks), ``r`` (this rank), ``v`` (stages on this rank) and ``m`` (microbatches), e.g.
``"p - r"`` (1F1B) — so a rule set prints as DSL source and is evaluated per rank.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any, Mapping

from ..kinds import get_kind

__all__ = ["Rules", "RulesError", "eval_formula", "TRAVERSALS", "BACKWARDS", "W_POLICIES"]

TRAVERSALS = ("depth", "breadth", "microbatch")
BACKWARDS = ("fused", "split")
W_POLICIES = ("priority", "eager", "fill")


class RulesError(ValueError):
    """A rule set that is malformed or cannot finish; raised before any scheduling work."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules:
    """How each rank's actor picks among its ready actions (DSL rules)."""

    priority: tuple[str, ...] = ("B", "I", "F", "W")
    """Computation-type priority, most preferred first. Kinds not listed (user ops such as ``R``)
    rank ahead of all listed ones: their own dependencies decide when they are ready."""
    traversal: str = "depth"
    """Among actions of equal type priority: ``"depth"`` = furthest along its microbatch's pass first
    (later forward stage, earlier backward stage), then older microbatch; ``"breadth"`` = least far
    along first (finish a stage for all microbatches before the next); ``"microbatch"`` = older
    microbatch first, then furthest along."""
    in_flight: int | str | None = None
    """Max activations a rank holds at once, counted in (stage, microbatch) pairs whose forward has
    started and whose activation is not yet freed by W/B. An int or a formula in p, r, v, m
    (``"p - r"`` is 1F1B's warm-up depth + 1). A microbatch enters a rank only when all of that
    rank's stages fit, so the limit never deadlocks. None: unlimited."""
    warmup: int | str | None = None
    """Max forwards a rank runs ahead of its input-gradient backwards, counted in (stage,
    microbatch) pairs from the forward's start until I/B (not W) — 1F1B's warm-up depth + 1.
    With ``in_flight`` above it, W can be deferred without delaying forwards (ZB-H1). Int,
    formula or None (unlimited)."""
    memory_cap: float | None = None
    """Per-rank cap on static + activation memory, in the costs' units; a microbatch enters a rank
    only when its activations on all the rank's stages fit, and any other allocating action (R's
    re-created activation, LOAD, a recomputed forward's transient) runs only when it fits, so the
    frees (W, B) run first. The simulated peak stays within the cap; a cap below one microbatch's
    need raises up front. None: no cap."""
    backward: str = "fused"
    """``"fused"``: one B per stage and microbatch; ``"split"``: I (input grad) then W (weight grad)."""
    w_policy: str = "priority"
    """``"priority"``: W ranked by ``priority``; ``"eager"``: each W runs right after its I;
    ``"fill"``: W only when nothing else is ready (fills bubbles, as in zero-bubble)."""
    forwards_first: bool = False
    """A rank starts no backward before it has run all its forwards (GPipe / looped BFS flush)."""
    overrides: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    """Per-rank field changes, rank → {field: value}; see ``on``."""

    # -- composition ----------------------------------------------------------------------------
    def with_(self, **changes) -> "Rules":
        """A copy with fields changed (unknown names raise)."""
        _check_names(changes)
        return replace(self, **changes)

    def on(self, rank: int, **changes) -> "Rules":
        """A copy whose rank ``rank`` uses ``changes`` on top of these rules."""
        _check_names(changes)
        if "overrides" in changes:
            raise RulesError("per-rank overrides cannot themselves hold overrides")
        ov = {int(k): dict(v) for k, v in self.overrides.items()}
        ov[int(rank)] = {**ov.get(int(rank), {}), **changes}
        return replace(self, overrides=ov)

    def for_rank(self, rank: int) -> "Rules":
        """These rules with rank ``rank``'s overrides applied (and no overrides left)."""
        ch = self.overrides.get(rank)
        return replace(self, overrides={}, **ch) if ch else (
            replace(self, overrides={}) if self.overrides else self)

    def __or__(self, other: "Rules") -> "Rules":
        """``a | b``: b's fields that differ from the defaults replace a's; overrides merge."""
        base = Rules()
        ch = {f.name: getattr(other, f.name) for f in fields(Rules)
              if f.name != "overrides" and getattr(other, f.name) != getattr(base, f.name)}
        out = replace(self, **ch)
        for r, o in other.overrides.items():
            out = out.on(r, **o)
        return out

    def source(self) -> str:
        """DSL source: only the fields that differ from the defaults."""
        base = Rules()
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(Rules)
                 if getattr(self, f.name) != getattr(base, f.name)]
        return "Rules(" + ", ".join(parts) + ")"

    __repr__ = source

    # -- checks ---------------------------------------------------------------------------------
    def check(self, where: str = "") -> None:
        """Field-level checks (names, enums, ranges); raise ``RulesError`` with the value."""
        at = f" ({where})" if where else ""
        if isinstance(self.priority, str) or not all(isinstance(k, str) for k in self.priority):
            raise RulesError(f"priority{at} must be a tuple of kind names like ('I', 'F', 'W'), "
                             f"got {self.priority!r}")
        for k in self.priority:
            get_kind(k)  # raises KindError (a ValueError) naming the known kinds
        if self.traversal not in TRAVERSALS:
            raise RulesError(f"traversal{at} must be one of {TRAVERSALS}, got {self.traversal!r}")
        if self.backward not in BACKWARDS:
            raise RulesError(f"backward{at} must be one of {BACKWARDS}, got {self.backward!r}")
        if self.w_policy not in W_POLICIES:
            raise RulesError(f"w_policy{at} must be one of {W_POLICIES}, got {self.w_policy!r}")
        for name in ("in_flight", "warmup"):
            val = getattr(self, name)
            if val is not None and not isinstance(val, str):
                if isinstance(val, bool) or not isinstance(val, int):
                    raise RulesError(f"{name}{at} must be an int, a formula string or None, got {val!r}")
            if isinstance(val, str):
                _compile(val)
        if self.memory_cap is not None:
            if isinstance(self.memory_cap, bool) or not isinstance(self.memory_cap, (int, float)) \
                    or not self.memory_cap > 0:
                raise RulesError(f"memory_cap{at} must be a number > 0 or None, got {self.memory_cap!r}")
        for r, ch in self.overrides.items():
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise RulesError(f"override key {r!r} must be a rank number >= 0")
            _check_names(ch)

    def limit(self, name: str, *, p: int, r: int, v: int, m: int) -> int | None:
        """``in_flight`` or ``warmup`` of rank r (the formula evaluated), or None for unlimited."""
        val = getattr(self, name)
        if val is None or isinstance(val, int):
            return val
        return eval_formula(val, p=p, r=r, v=v, m=m)


def _check_names(changes: Mapping[str, Any]) -> None:
    names = {f.name for f in fields(Rules)}
    bad = sorted(set(changes) - names)
    if bad:
        raise RulesError(f"unknown rule fields {bad}; known: {sorted(names)}")


# -- formulas: a tiny safe arithmetic language over p, r, v, m ----------------------------------
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_FUNCS = {"min": min, "max": max}
_VARS = ("p", "r", "v", "m")


@lru_cache(maxsize=256)
def _compile(text: str):
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise RulesError(f"formula {text!r} does not parse: {e.msg}") from None

    def build(n):
        if isinstance(n, ast.Expression):
            return build(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            val = n.value
            return lambda env: val
        if isinstance(n, ast.Name) and n.id in _VARS:
            name = n.id
            return lambda env: env[name]
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            op, a, b = _BIN[type(n.op)], build(n.left), build(n.right)
            return lambda env: op(a(env), b(env))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            a = build(n.operand)
            return lambda env: -a(env)
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _FUNCS
                and n.args and not n.keywords):
            fn, args = _FUNCS[n.func.id], [build(x) for x in n.args]
            return lambda env: fn(*(x(env) for x in args))
        raise RulesError(f"formula {text!r}: only integers, p, r, v, m, + - * // %, "
                         f"min() and max() are allowed (found {ast.dump(n)[:40]})")
    return build(tree)


def eval_formula(text: str, **env: int) -> int:
    """Evaluate an in-flight formula such as ``"2*(p-1-r) + (v-1)*p + 1"``."""
    return int(_compile(text)(env))
