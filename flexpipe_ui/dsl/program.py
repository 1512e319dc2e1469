"""A DSL ``Program``: placement + rules (+ extra operations) → a ``Schedule`` for any (ranks, microbatches).

    Program(placement=vshape(), rules=Rules(backward="split", priority=("I", "F", "W"), in_flight="2*p"))
        .schedule(ranks=8, microbatches=32, costs=None)

``schedule`` checks the rule set against the shape and costs first (``RulesError`` with the numbers
when it cannot finish), then runs the actor list scheduler. ``source()`` is the program as DSL text
(stored in a plan's ``meta["program"]``); ``repr`` is the same text.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..costmodel import fits, stage_memory
from ..ir import Plan
from ..kinds import get_kind
from ..partition import balanced_partition
from ..problem import StageCosts, even_partition, uniform_costs
from ..pysource import problem_source
from .placement import Placement, as_placement, looped
from .rules import Rules, RulesError
from .scheduler import list_schedule, memory_need, stage_kinds

__all__ = ["Program", "program_from_source", "resolve_partition", "FromProgram"]


@dataclass(frozen=True, kw_only=True)
class Program:
    """A schedule written in the DSL."""

    placement: Placement = field(default_factory=lambda: looped(1))
    """How virtual stages map onto ranks: ``looped(v)``, ``vshape()``, ``wave(k)``, ``explicit([...])``."""
    rules: Rules = field(default_factory=Rules)
    """How each rank picks its next action (with per-rank overrides)."""
    extra: Mapping[str, object] = field(default_factory=dict)
    """Extra operations per stage: kind name → ``"all"`` or a tuple of stage indices, e.g.
    ``{"R": "all"}`` for recomputation (the kind must be registered, see ``flexpipe_ui.ops``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "placement", as_placement(self.placement))
        if not isinstance(self.rules, Rules):
            raise RulesError(f"rules must be a Rules(...), got {self.rules!r}")
        ex = {}
        for name, where in dict(self.extra).items():
            get_kind(name)
            if where != "all":
                try:
                    where = tuple(int(s) for s in where)
                except TypeError:
                    raise RulesError(f"extra[{name!r}] must be 'all' or a tuple of stage indices, "
                                     f"got {where!r}") from None
            ex[name] = where
        object.__setattr__(self, "extra", ex)

    def with_(self, **changes) -> "Program":
        return replace(self, **changes)

    def source(self) -> str:
        parts = [f"placement={self.placement!r}", f"rules={self.rules.source()}"]
        if self.extra:
            parts.append(f"extra={dict(self.extra)!r}")
        return "Program(" + ", ".join(parts) + ")"

    __repr__ = source

    # -- checks ---------------------------------------------------------------------------------
    def resolve(self, ranks: int, microbatches: int, costs: StageCosts | None = None):
        """Check everything that can be checked before scheduling; return (placement, rules, limits, costs)."""
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise RulesError(f"microbatches must be an integer >= 1, got {microbatches!r}")
        place = self.placement(ranks)
        S = len(place)
        if costs is None:
            costs = uniform_costs(S, ranks)
        elif costs.num_stages != S:
            raise RulesError(f"costs are for {costs.num_stages} stages but {self.placement!r} on "
                             f"{ranks} ranks has {S} stages (partition the model into {S} stages)")
        self.rules.check()
        bad = sorted(r for r in self.rules.overrides if r >= ranks)
        if bad:
            raise RulesError(f"rules override ranks {bad}, but there are only {ranks} ranks (0..{ranks - 1})")
        for name, where in self.extra.items():
            if where != "all":
                out = [s for s in where if not 0 <= s < S]
                if out:
                    raise RulesError(f"extra[{name!r}] names stages {out}, but there are {S} stages (0..{S - 1})")
        rank_rules = [self.rules.for_rank(r) for r in range(ranks)]
        limits = []
        kps = eff = None
        for r, rr in enumerate(rank_rules):
            if rr is not self.rules:
                rr.check(f"rank {r} override")
            v = sum(1 for x in place if x == r)
            lims = []
            for name in ("in_flight", "warmup"):
                lim = rr.limit(name, p=ranks, r=r, v=v, m=microbatches)
                if lim is not None and lim < v:
                    val = getattr(rr, name)
                    src = f" (= {val!r} with p={ranks}, r={r}, v={v}, m={microbatches})" \
                        if isinstance(val, str) else ""
                    raise RulesError(f"{name} limit {lim}{src} on rank {r} is below the {v} stage(s) a "
                                     f"microbatch occupies on that rank, so no microbatch could ever "
                                     f"finish; use {name} >= {v}")
                if lim is not None and rr.forwards_first and lim < v * microbatches:
                    raise RulesError(f"forwards_first on rank {r} runs all {microbatches} microbatches' "
                                     f"forwards on its {v} stage(s) before any backward, so it holds "
                                     f"{v * microbatches} activations, but its {name} limit is {lim}; "
                                     f"drop forwards_first or the limit (or use fewer microbatches)")
                lims.append(lim)
            limits.append(tuple(lims))
            if rr.memory_cap is not None:
                if kps is None:
                    kps = stage_kinds(place, rank_rules, self.extra)
                    eff = stage_memory(kps, costs)   # once, not once per rank
                static, keep, top = memory_need(place, kps, costs, r, eff)
                need = static + keep + top
                if rr.forwards_first:
                    all_fwd = static + microbatches * keep + top
                    if not fits(all_fwd, rr.memory_cap):
                        raise RulesError(f"forwards_first on rank {r} holds all {microbatches} "
                                         f"microbatches' activations before any backward: {all_fwd:g} > "
                                         f"memory cap {rr.memory_cap:g}; drop forwards_first, raise the "
                                         f"cap or add recomputation (extra={{'R': 'all'}})")
                if not fits(need, rr.memory_cap):
                    raise RulesError(f"memory cap {rr.memory_cap:g} on rank {r} is below what one "
                                     f"microbatch needs there: static {static:g} + activations "
                                     f"{need - static:g} = {need:g}; raise the cap to >= {need:g}, add "
                                     f"recomputation (extra={{'R': 'all'}}) or use more ranks")
        return place, rank_rules, limits, costs

    def schedule(self, *, ranks: int, microbatches: int, costs: StageCosts | None = None):
        """The ``Schedule`` this program generates (uniform costs if ``costs`` is None)."""
        place, rank_rules, limits, costs = self.resolve(ranks, microbatches, costs)
        return list_schedule(place, ranks, microbatches, costs, rank_rules, self.extra, limits)

    def plan(self, *, ranks: int | None = None, microbatches: int | None = None, problem=None,
             partition="even"):
        """A ``Plan``: the schedule for the problem's (or the given) shape, on an ``"even"``,
        ``"balanced"`` or explicit layer partition; its trace replays it (``plan.to_python()``)."""
        ranks, microbatches = _shape(problem, ranks, microbatches)
        place = self.placement(ranks)
        part = resolve_partition(problem, place, partition)
        costs = problem.stage_costs(part) if problem is not None else None
        sched = self.schedule(ranks=ranks, microbatches=microbatches, costs=costs)
        src = self.source()
        meta = {"name": "dsl", "program": src}
        if problem is not None and not isinstance(partition, str):
            partition = tuple(tuple(int(x) for x in p) for p in partition)
        return Plan(sched, part, meta, (FromProgram(src, ranks, microbatches, problem, partition),))


def _shape(problem, ranks, microbatches) -> tuple[int, int]:
    if ranks is None:
        if problem is None:
            raise RulesError("give ranks= (or a problem)")
        ranks = problem.ranks
    if microbatches is None:
        if problem is None:
            raise RulesError("give microbatches= (or a problem)")
        microbatches = problem.microbatches
    return ranks, microbatches


def resolve_partition(problem, placement, partition="even"):
    """Layer partition for a placement: None without a problem; ``"even"`` (by layer count, earlier
    stages take the extra), ``"balanced"`` (``flexpipe_ui.partition.balanced_partition``) or an
    explicit tuple of per-stage layer tuples."""
    S = len(placement)
    if problem is None:
        if partition not in ("even", None):
            raise RulesError(f"partition {partition!r} needs a problem (layer costs); without one the "
                             "plan has no partition")
        return None
    if partition in ("even", None):
        return even_partition(problem.num_layers, S)
    if partition == "balanced":
        return balanced_partition(problem, S, placement=tuple(placement))
    if isinstance(partition, str):
        raise RulesError(f"partition must be 'even', 'balanced' or a tuple of layer tuples, got {partition!r}")
    part = tuple(tuple(int(x) for x in p) for p in partition)
    if len(part) != S:
        raise RulesError(f"the partition has {len(part)} stages but the placement has {S}")
    return part


def program_from_source(text: str) -> "Program":
    """Build a ``Program`` from its DSL source (``Program(placement=..., rules=Rules(...))``) without ``eval``.

    Why an AST walk and not ``eval`` with empty builtins: ``eval`` is not a sandbox (attribute access
    such as ``().__class__.__base__.__subclasses__()`` reaches ``os`` from any literal), and program
    text arrives from the command line, from plan files' ``meta`` and from notebooks shared with
    others, so it must be data, not code. The DSL's source form (``Program.source()``) only ever
    contains calls of the DSL's own constructors with literal arguments, so the grammar accepted
    here is exactly that: calls of ``Program``, ``Rules``, ``looped``, ``vshape``, ``wave``,
    ``explicit`` (and the ``.on(...)``/``.with_(...)`` methods of their results), with numbers,
    strings (the formulas ``"p - r"`` stay strings, evaluated later by ``eval_formula``'s own AST
    walk), True/False/None, tuples, lists and dicts of those, and unary minus on numbers. Anything
    else is refused with its line, column and node type before anything runs.
    """
    from ..limits import MAX_DSL_CHARS
    if not isinstance(text, str):
        raise RulesError(f"a DSL program must be text, got {type(text).__name__}")
    if len(text) > MAX_DSL_CHARS:
        raise RulesError(f"DSL program of {len(text)} characters is beyond the limit of {MAX_DSL_CHARS} "
                         "(flexpipe_ui.limits.MAX_DSL_CHARS)")
    try:
        tree = ast.parse(text.strip(), "<program>", mode="eval")
    except SyntaxError as e:
        raise RulesError(f"DSL program: syntax error at line {e.lineno}, column {e.offset}: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise RulesError("DSL program is nested too deeply or is not text") from None
    try:
        prog = _build(tree.body, 0)
    except RulesError:
        raise
    except (ValueError, TypeError) as e:
        raise RulesError(f"DSL program: {e}") from None
    if not isinstance(prog, Program):
        raise RulesError(f"DSL source {_short(text)} does not describe a Program (it is a "
                         f"{type(prog).__name__}); write Program(placement=..., rules=Rules(...))")
    return prog


def _dsl_names() -> dict:
    from . import placement as pl
    return {"Program": Program, "Rules": Rules, "looped": pl.looped, "vshape": pl.vshape,
            "wave": pl.wave, "explicit": pl.explicit}


_METHODS = ("on", "with_")
"""Methods the DSL allows on a built value (``Rules(...).on(1, in_flight=2)``, ``.with_(...)``)."""


def _short(text: str) -> str:
    return repr(text) if len(text) < 80 else repr(text[:80]) + "..."


def _refuse(node: ast.AST, what: str) -> RulesError:
    try:
        src = ast.unparse(node)
    except Exception:  # noqa: BLE001 - only for the message
        src = type(node).__name__
    return RulesError(f"DSL program, line {getattr(node, 'lineno', '?')}, column "
                      f"{getattr(node, 'col_offset', -1) + 1}: {what}: {_short(src)} ({type(node).__name__}); "
                      "a program is calls of Program, Rules, looped, vshape, wave, explicit with literal "
                      "arguments")


def _build(node: ast.AST, depth: int):
    """Evaluate one allowed node (see ``program_from_source``); refuse every other kind."""
    from ..limits import MAX_DSL_DEPTH
    if depth > MAX_DSL_DEPTH:
        raise _refuse(node, f"nested deeper than {MAX_DSL_DEPTH} levels (flexpipe_ui.limits.MAX_DSL_DEPTH)")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bool, int, float, str)) or node.value is None:
            if isinstance(node.value, int) and abs(node.value) > 2 ** 53:
                raise _refuse(node, "integer too large")
            return node.value
        raise _refuse(node, "only numbers, strings, True, False and None are allowed")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_build(e, depth + 1) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _refuse(node, "'**' in a dict is not allowed")
        return {_build(k, depth + 1): _build(v, depth + 1) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call):
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise _refuse(node, "'*' and '**' arguments are not allowed")
        f = node.func
        if isinstance(f, ast.Name):
            names = _dsl_names()
            if f.id not in names:
                raise _refuse(f, f"unknown name {f.id!r}")
            fn = names[f.id]
        elif isinstance(f, ast.Attribute) and f.attr in _METHODS and isinstance(f.value, ast.Call):
            obj = _build(f.value, depth + 1)
            if not isinstance(obj, (Program, Rules)) or not hasattr(obj, f.attr):
                raise _refuse(f, f".{f.attr}() is not a method of {type(obj).__name__}; allowed: "
                                 "Rules(...).on(rank, ...), Rules(...).with_(...), Program(...).with_(...)")
            fn = getattr(obj, f.attr)
        else:
            raise _refuse(f, "only calls of the DSL's own names are allowed")
        args = [_build(a, depth + 1) for a in node.args]
        kwargs = {k.arg: _build(k.value, depth + 1) for k in node.keywords}
        return fn(*args, **kwargs)
    raise _refuse(node, "not allowed in a DSL program")


@dataclass(frozen=True)
class FromProgram:
    """Trace source step ``Program(...).plan(...)``: a DSL program, kept as its source text."""

    program: str
    ranks: int | None = None
    microbatches: int | None = None
    problem: Any = None
    partition: Any = "even"

    def build(self) -> Plan:
        return program_from_source(self.program).plan(ranks=self.ranks, microbatches=self.microbatches,
                                                      problem=self.problem, partition=self.partition)

    def python(self) -> tuple[list[str], str]:
        imps = ["from flexpipe_ui.dsl import *"]
        if self.problem is not None:
            imps.append("from flexpipe_ui.problem import Problem")
        return imps, (f"{self.program}.plan(ranks={self.ranks!r}, microbatches={self.microbatches!r}, "
                      f"problem={problem_source(self.problem)}, partition={self.partition!r})")
