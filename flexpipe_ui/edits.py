"""Programmatic edits of a schedule: the edit steps of a plan's replayable trace, and undo.

An edit step is a frozen dataclass (``Move``, ``Swap``, ``Insert``, ``Remove``, ``PinBefore``);
``apply_edit(schedule, step)`` returns the edited schedule (not validated: the Designer shows the
validator's verdict on it). ``plan.edit(step)`` records the step in ``plan.trace``, whose first
element is the source step (``ir.FromText``, ``library.FromNamed``, ``dsl.program.FromProgram``,
``planfile.FromFile``), so ``replay(plan.trace)`` rebuilds the plan, ``undo(plan)`` drops the last
step and ``plan.to_python()`` prints the whole history as a script that binds ``plan``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .graph import reordered
from .ir import EditError, FromText, ParseError, Plan, Schedule, edit_plan, parse_action, replay, source_of

__all__ = ["Move", "Swap", "Insert", "Remove", "PinBefore", "EDIT_STEPS", "EditError", "apply_edit", "edit_plan",
           "replay", "undo", "FromText", "source_of"]


def _row(s: Schedule, rank: int) -> list:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < s.ranks:
        raise EditError(f"rank {rank!r} out of range: the schedule has {s.ranks} ranks (0..{s.ranks - 1})")
    return list(s.order[rank])


def _index(row: list, rank: int, i: int, what: str, *, end: bool = False) -> int:
    hi = len(row) if end else len(row) - 1
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= hi:
        raise EditError(f"{what} {i!r} out of range: rank {rank} has {len(row)} actions "
                        f"(positions 0..{hi})")
    return i


def _parse(text: str, where: str):
    try:
        return parse_action(text, where)
    except ParseError as e:
        raise EditError(str(e)) from None


def _with_row(s: Schedule, rank: int, row: list) -> Schedule:
    order = list(s.order)
    order[rank] = tuple(row)
    return s.with_order(order)


def _reordered(s: Schedule, rank: int, row: list) -> Schedule:
    """``_with_row`` for a row that is a permutation of the old one: the new schedule keeps what
    was derived of the old one that a reorder cannot change (``graph.reordered``)."""
    return reordered(s, _with_row(s, rank, row), rank)


@dataclass(frozen=True)
class Move:
    """Move rank ``rank``'s action at position ``src`` so that it ends up at position ``dst``."""

    rank: int
    src: int
    dst: int

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.src, "src")
        _index(row, self.rank, self.dst, "dst")
        row.insert(self.dst, row.pop(self.src))
        return _reordered(s, self.rank, row)


@dataclass(frozen=True)
class Swap:
    """Swap positions ``i`` and ``j`` of rank ``rank``."""

    rank: int
    i: int
    j: int

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.i, "i")
        _index(row, self.rank, self.j, "j")
        row[self.i], row[self.j] = row[self.j], row[self.i]
        return _reordered(s, self.rank, row)


@dataclass(frozen=True)
class Insert:
    """Insert ``action`` (text such as ``"0R3"``) at position ``index`` of rank ``rank``."""

    rank: int
    index: int
    action: str

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.index, "index", end=True)
        row.insert(self.index, _parse(self.action, "Insert"))
        return _with_row(s, self.rank, row)


@dataclass(frozen=True)
class Remove:
    """Remove the action at position ``index`` of rank ``rank``."""

    rank: int
    index: int

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.index, "index")
        del row[self.index]
        return _with_row(s, self.rank, row)


@dataclass(frozen=True)
class PinBefore:
    """Move ``action`` to just before ``before`` (both text, on the same rank)."""

    action: str
    before: str

    def apply(self, s: Schedule) -> Schedule:
        a, b = str(_parse(self.action, "PinBefore")), str(_parse(self.before, "PinBefore"))
        where = {str(x): (r, i) for r, i, x in s.actions()}
        for name in (a, b):
            if name not in where:
                raise EditError(f"PinBefore: {name} is not in the schedule")
        (ra, ia), (rb, ib) = where[a], where[b]
        if ra != rb:
            raise EditError(f"PinBefore: {a} is on rank {ra} but {b} is on rank {rb}; an action can "
                            "only be pinned before another on the same rank")
        if a == b:
            raise EditError(f"PinBefore: cannot pin {a} before itself")
        row = list(s.order[ra])
        act = row.pop(ia)
        row.insert(ib - 1 if ia < ib else ib, act)
        return _reordered(s, ra, row)


EDIT_STEPS = (Move, Swap, Insert, Remove, PinBefore)


def apply_edit(schedule: Schedule, edit) -> Schedule:
    """The schedule with one edit applied (not validated)."""
    if not isinstance(edit, EDIT_STEPS):
        raise EditError(f"not an edit step: {edit!r} (use Move, Swap, Insert, Remove or PinBefore)")
    return edit.apply(schedule)


# -- the trace (recorded by ``Plan.edit``; the machinery lives in ``ir``) -------------------------
def undo(plan: Plan) -> Plan:
    """The plan before its last edit (the plan itself when it has none)."""
    if len(plan.trace) <= 1:
        return plan
    return replay(plan.trace[:-1])
