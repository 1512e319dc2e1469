"""The edit step that adds recompute and offload to a schedule and moves deferred W's: one
recorded step (``AddMemoryOps``), so a plan that ``memory_fit`` fitted replays, prints as Python and
draws its ``R``/``OFF``/``LOAD`` as their own, draggable bars."""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Action, Schedule
from .kinds import get_kind

__all__ = ["AddMemoryOps", "add_memory_ops"]


@dataclass(frozen=True)
class AddMemoryOps:
    """Edit step: recompute the ``recompute`` (stage, microbatch) pairs (an ``R`` just before
    each one's backward) and offload the ``offload`` pairs (``OFF`` just after the forward,
    ``LOAD`` just before the backward, or ``k`` compute actions before it for each
    ``(stage, microbatch, k)`` in ``lead``: the copy is issued there and runs under them)."""

    recompute: tuple[tuple[int, int], ...] = ()
    offload: tuple[tuple[int, int], ...] = ()
    lead: tuple[tuple[int, int, int], ...] = ()
    w_early: tuple[tuple[int, int], ...] = ()
    """(stage, microbatch) pairs whose deferred ``W`` moves to just after its ``I``."""

    def apply(self, s: Schedule) -> Schedule:
        return add_memory_ops(s, self.recompute, self.offload, self.lead, self.w_early)


def add_memory_ops(s: Schedule, recompute=(), offload=(), lead=(), w_early=()) -> Schedule:
    """The schedule with ``R`` / ``OFF`` + ``LOAD`` inserted for the given (stage, microbatch)
    pairs (``lead``: (stage, microbatch, k) issues that ``LOAD`` k compute actions before its
    backward, never before its ``OFF``) and the ``W`` of each ``w_early`` pair moved to just after
    its ``I`` (what it holds is freed at once instead of across the bubble it filled); an error
    names a pair that has no forward, is asked for twice, has a lead but is not offloaded, or is
    in ``w_early`` without a split backward on one rank."""
    from .ir import EditError
    from .ops import register_missing
    rec = {(int(a), int(b)) for a, b in recompute}
    off = {(int(a), int(b)) for a, b in offload}
    ahead = {}
    for item in lead:
        st, m, k = (int(x) for x in item)
        if (st, m) not in off:
            raise EditError(f"AddMemoryOps: lead for stage {st} microbatch {m}, which is not offloaded")
        if k < 0:
            raise EditError(f"AddMemoryOps: lead for stage {st} microbatch {m} must be >= 0, got {k}")
        ahead[(st, m)] = k
    if rec & off:
        raise EditError(f"AddMemoryOps: {sorted(rec & off)[:3]} are both recomputed and offloaded")
    names = set()
    if rec:
        names.add("R")
    if off:
        names |= {"OFF", "LOAD"}
    register_missing(names)
    fwd = {(a.stage, a.microbatch) for _, _, a in s.actions() if a.kind.is_forward}
    have = {(a.stage, a.microbatch) for _, _, a in s.actions() if a.kind.name in ("R", "OFF")}
    for pair in sorted(rec | off):
        if pair not in fwd:
            raise EditError(f"AddMemoryOps: stage {pair[0]} microbatch {pair[1]} has no forward in the schedule")
        if pair in have:
            raise EditError(f"AddMemoryOps: stage {pair[0]} microbatch {pair[1]} is already recomputed or offloaded")
    early = {(int(a), int(b)) for a, b in w_early}
    if early:
        _check_w_early(s, early)
    R = get_kind("R") if rec else None
    OFF, LOAD = (get_kind("OFF"), get_kind("LOAD")) if off else (None, None)
    order = []
    for row in s.order:
        out = []
        ws = {(a.stage, a.microbatch): a for a in row if early and a.kind.role == "backward_weight"}
        for a in row:
            pair = (a.stage, a.microbatch)
            if pair in early and a.kind.role == "backward_weight":
                continue                                 # placed after its I below
            if a.kind.computes_input_grad:
                if pair in rec:
                    out.append(Action(a.stage, R, a.microbatch))
                elif pair in off:
                    _insert_ahead(out, Action(a.stage, LOAD, a.microbatch), ahead.get(pair, 0))
            out.append(a)
            if a.kind.is_forward and pair in off:
                out.append(Action(a.stage, OFF, a.microbatch))
            if pair in early and a.kind.role == "backward_input":
                out.append(ws[pair])
        order.append(out)
    return s.with_order(order)


def _check_w_early(s: Schedule, early: set) -> None:
    """Each ``w_early`` pair has its ``I`` and ``W`` on one rank (an ``EditError`` names one that does not)."""
    from .ir import EditError
    where: dict = {}
    for r, row in enumerate(s.order):
        for a in row:
            if a.kind.role in ("backward_input", "backward_weight"):
                where.setdefault((a.stage, a.microbatch), {})[a.kind.role] = r
    for pair in sorted(early):
        got = where.get(pair, {})
        if len(got) != 2 or got["backward_input"] != got["backward_weight"]:
            raise EditError(f"AddMemoryOps: w_early for stage {pair[0]} microbatch {pair[1]}, which has "
                            "no split backward (I and W on one rank)")


def _insert_ahead(out: list, load: Action, k: int) -> None:
    """Put ``load`` into ``out`` (the row so far) ``k`` compute actions before its end, never
    before its own ``OFF``."""
    i = len(out)
    while k > 0 and i > 0:
        prev = out[i - 1]
        if prev.stage == load.stage and prev.microbatch == load.microbatch and (
                prev.kind.name == "OFF" or prev.kind.is_forward):
            break
        i -= 1
        if prev.kind.stream == "compute":
            k -= 1
    out.insert(i, load)
