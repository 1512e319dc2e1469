"""Hand orders in the DSL: a per-rank text grid (``r0: 0F0 0F1 0I0 0W0 ...``) turned into a ``Schedule``.

The grid is the same text ``Schedule.to_text()`` prints; the placement may be a DSL placement
(``vshape()``) or inferred from where each stage's actions appear. ``check=True`` validates, so a
deadlocking order raises ``ScheduleError`` naming the wait cycle (rank waits at X for Y ...).
"""
from __future__ import annotations

from typing import Sequence

from ..ir import FromText, Plan, Schedule
from ..validate import validate
from .placement import Placement

__all__ = ["hand", "hand_plan"]


def hand(text: str, *, placement: Placement | Sequence[int] | None = None,
         microbatches: int | None = None, check: bool = True) -> Schedule:
    """Parse a rank grid into a ``Schedule`` (validated unless ``check=False``)."""
    rows = [ln for ln in text.splitlines() if ln.split("#", 1)[0].strip()]
    place = placement(len(rows)) if isinstance(placement, Placement) else placement
    s = Schedule.from_text(text, microbatches, place)
    return validate(s) if check else s


def hand_plan(text: str, *, placement: Placement | Sequence[int] | None = None,
              microbatches: int | None = None, partition=None, meta=None, check: bool = True) -> Plan:
    """A ``Plan`` from a rank grid, with the text as its trace's source step (so edits replay and
    ``plan.to_python()`` prints it)."""
    s = hand(text, placement=placement, microbatches=microbatches, check=check)
    part = None if partition is None else tuple(tuple(int(x) for x in p) for p in partition)
    return FromText(s.to_text(), s.microbatches, tuple(s.placement), part, dict(meta or {})).build()
