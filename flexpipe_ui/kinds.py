"""Computation kinds: the built-in F, I, W, B and a registry for user-defined kinds.

A kind says, for one (stage, microbatch), what it depends on, what it costs and what it does to
activation memory. The validator, the simulator, the DSL and the runtime read these specs, so a
user-registered kind (recompute ``R``, offload ``O``...) is scheduled and simulated like a built-in.
Predicates live here (``is_backward``, ``frees_activation``) so nobody compares raw strings; the idea
is zero-bubble's ``FuncType`` and torch's ``_ComputationType``.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping

__all__ = [
    "Dep", "Kind", "StageCost", "F", "I", "W", "B", "register_kind", "unregister_kind",
    "get_kind", "kinds", "KindError", "scoped_kinds", "ensure_registered",
]

_NAME = re.compile(r"^[A-Z][A-Z_]*$")


class KindError(ValueError):
    """A kind name or definition is not usable."""


@dataclass(frozen=True, slots=True)
class StageCost:
    """Costs of one virtual stage for one microbatch (sums over its layers)."""

    f: float
    b: float
    w: float
    act: float
    mem: float = 0.0
    bw: float | None = None
    """Fused backward time (the problem's layer ``bw``); None: b + w."""
    copy_bandwidth: float | None = None
    """MiB per time unit of a device-host copy (the problem's ``copy_bandwidth``); None: unset."""


@dataclass(frozen=True, slots=True)
class Dep:
    """``kinds`` of stage ``stage + delta`` (same microbatch) must finish first.

    Several kinds mean "whichever of them the schedule has" (I or B of the next stage). A dependency
    on a stage outside 0..S-1 is dropped (the first F has no producer; the last stage's backward
    waits only for its own F). ``required`` dependencies must exist in a valid schedule.
    """

    kinds: frozenset[str]
    delta: int = 0
    required: bool = True


@dataclass(frozen=True, eq=False)
class Kind:
    """One computation kind.

    ``cost`` maps a stage's costs to this kind's duration. ``mem_start``/``mem_end`` change the
    stage's activation memory, in units of its ``act``, at the action's start/end. ``adjust`` changes
    other kinds' memory effects on the same (stage, microbatch) when this kind is present (recompute
    makes F release its activation at its end). ``before`` lists kinds this one must precede on the
    same (stage, microbatch) when both are present. ``stream`` other than "compute" does not occupy
    the rank's compute (a copy engine); actions of one stream still run in list order.
    """

    name: str
    role: str  # "forward" | "backward_input" | "backward_weight" | "backward" | "other"
    cost: Callable[[StageCost], float]
    after: tuple[Dep, ...] = ()
    before: frozenset[str] = frozenset()
    mem_start: float = 0.0
    mem_end: float = 0.0
    adjust: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    stream: str = "compute"
    color: str = "#7f7f7f"
    builtin: bool = False
    description: str = ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kind) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Kind({self.name})"

    def __str__(self) -> str:
        return self.name

    @property
    def is_forward(self) -> bool:
        return self.role == "forward"

    @property
    def is_backward(self) -> bool:
        """I, W and B: any part of the backward pass."""
        return self.role in ("backward_input", "backward_weight", "backward")

    @property
    def computes_input_grad(self) -> bool:
        """I and B: sends a gradient upstream."""
        return self.role in ("backward_input", "backward")

    @property
    def computes_weight_grad(self) -> bool:
        """W and B."""
        return self.role in ("backward_weight", "backward")

    @property
    def frees_activation(self) -> bool:
        return self.mem_end < 0

    @property
    def occupies_compute(self) -> bool:
        return self.stream == "compute"


_BWD_IN = frozenset({"I", "B"})

F = Kind("F", "forward", lambda c: c.f, after=(Dep(frozenset({"F"}), -1),), mem_start=1.0,
         color="#1f77b4", builtin=True, description="forward")
I = Kind("I", "backward_input", lambda c: c.b,
         after=(Dep(frozenset({"F"}), 0), Dep(_BWD_IN, +1)),
         color="#d62728", builtin=True, description="backward for inputs ('B' in zero-bubble)")
W = Kind("W", "backward_weight", lambda c: c.w, after=(Dep(frozenset({"I"}), 0),), mem_end=-1.0,
         color="#2ca02c", builtin=True, description="weight-gradient backward")
B = Kind("B", "backward", lambda c: c.b + c.w if c.bw is None else c.bw,
         after=(Dep(frozenset({"F"}), 0), Dep(_BWD_IN, +1)), mem_end=-1.0,
         color="#9467bd", builtin=True, description="fused backward (I+W)")

_BUILTIN = {k.name: k for k in (F, I, W, B)}

# One registry per interpreter; re-registering a user kind replaces it, so re-running a notebook
# cell that defines a kind is harmless.
_REGISTRY: dict[str, Kind] = dict(_BUILTIN)


def register_kind(kind: Kind) -> Kind:
    """Add (or replace) a user-defined kind; built-ins cannot be replaced."""
    if not _NAME.match(kind.name):
        raise KindError(f"kind name {kind.name!r} must be upper-case letters/underscores, e.g. 'R'")
    if kind.name in _BUILTIN:
        raise KindError(f"kind {kind.name!r} is built in and cannot be redefined")
    if kind.name.startswith(("SEND", "RECV", "REDUCE")) or kind.name == "OVERLAP_F_B":
        raise KindError(f"kind name {kind.name!r} is reserved for communication actions")
    for dep in kind.after:
        unknown = set(dep.kinds) - set(_REGISTRY) - {kind.name}
        if unknown:
            raise KindError(f"kind {kind.name!r} depends on unknown kinds {sorted(unknown)}")
    _REGISTRY[kind.name] = kind
    return kind


def unregister_kind(name: str) -> None:
    if name in _BUILTIN:
        raise KindError(f"kind {name!r} is built in")
    _REGISTRY.pop(name, None)


def get_kind(name: str) -> Kind:
    """The registered kind called ``name`` (a plan file's example kinds are registered by
    ``planfile`` when it loads them; see ``ops.register_missing``)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KindError(
            f"unknown kind {name!r}; known: {', '.join(sorted(_REGISTRY))} "
            "(register new ones with flexpipe_ui.register_kind)") from None


def kinds() -> dict[str, Kind]:
    """A copy of the registry, name → kind."""
    return dict(_REGISTRY)


def ensure_registered(used: Iterable[Kind]) -> None:
    """Register each of ``used`` whose name is not registered yet (a plan that carries its kinds,
    e.g. the search's result, stays usable after the search's own registrations are undone)."""
    todo = [k for k in {k.name: k for k in used}.values() if k.name not in _REGISTRY]
    while todo:                      # a kind after the kinds it depends on (LOAD after OFF)
        ready = [k for k in todo if all(set(d.kinds) <= set(_REGISTRY) | {k.name} for d in k.after)]
        for k in ready or todo[:1]:  # none ready: register_kind names the unknown dependency
            register_kind(k)
        todo = [k for k in todo if k.name not in _REGISTRY]


@contextmanager
def scoped_kinds() -> Iterator[None]:
    """Kinds registered or replaced inside the block are undone after it (the registry is restored)."""
    saved = dict(_REGISTRY)
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(saved)
