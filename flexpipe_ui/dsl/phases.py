"""Phase-written hand orders: a per-rank order builder with microbatch counters and a W queue.

Fixed schedules from the papers (Megatron's interleaved 1F1B, ZB-H1/H2, ZB-V, DualPipe-V) are
easiest to read as phases ("warm-up: 2(p-r)-1 forwards of chunk 0; steady: F I W ...").
``RankOrder`` lets a phase function say ``o.F(s)``, ``o.I(s)``, ``o.W(s)``, ``o.B(s)`` and picks the
next microbatch of that (stage, kind) itself; ``I`` queues its W, ``W(s)``/``W_any()`` pop the
oldest queued one. Counters may run past the last microbatch (a phase written for at least n
microbatches, as torch pads): those actions are counted but not listed. ``phased(...)`` turns the rows into a ``Schedule``.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Sequence

from ..ir import Action, Schedule
from ..kinds import get_kind
from ..watch import tick

__all__ = ["RankOrder", "phased"]


class RankOrder:
    """One rank's action list under construction (a mutable builder; the result is a tuple)."""

    __slots__ = ("m", "row", "_next", "_wq", "_kinds")

    def __init__(self, microbatches: int):
        self.m = microbatches
        self.row: list[Action] = []
        self._next: dict[tuple[int, str], int] = {}
        self._wq: deque[tuple[int, int]] = deque()
        self._kinds = {k: get_kind(k) for k in ("F", "I", "W", "B")}

    def count(self, stage: int, kind: str) -> int:
        """How many ``kind`` actions of ``stage`` were issued, padding included (I counts B too)."""
        return self._next.get((stage, kind), 0)

    def _issue(self, stage: int, kind: str, key: str) -> int:
        # counters run past the last microbatch (padded phases); only real microbatches are listed
        mb = self._next.get((stage, key), 0)
        self._next[(stage, key)] = mb + 1
        if mb < self.m:
            self.row.append(Action(stage, self._kinds[kind], mb))
        return mb

    def F(self, stage: int) -> "RankOrder":
        self._issue(stage, "F", "F")
        return self

    def B(self, stage: int) -> "RankOrder":
        """Fused backward of the next microbatch (shares I's counter, queues no W)."""
        self._issue(stage, "B", "I")
        return self

    def I(self, stage: int) -> "RankOrder":
        """Input-gradient backward of the next microbatch; its W joins the queue."""
        self._wq.append((stage, self._issue(stage, "I", "I")))
        return self

    def W(self, stage: int) -> "RankOrder":
        """The oldest queued W of ``stage`` (nothing if none is queued)."""
        for i, (s, mb) in enumerate(self._wq):
            if s == stage:
                del self._wq[i]
                if mb < self.m:
                    self.row.append(Action(s, self._kinds["W"], mb))
                break
        return self

    def W_any(self) -> "RankOrder":
        """The oldest queued W of any stage (nothing if none is queued)."""
        if self._wq:
            s, mb = self._wq.popleft()
            if mb < self.m:
                self.row.append(Action(s, self._kinds["W"], mb))
        return self

    def W_all(self) -> "RankOrder":
        while self._wq:
            self.W_any()
        return self

    def pending_w_of(self, stage: int) -> int:
        return sum(1 for s, _ in self._wq if s == stage)


def phased(ranks: int, microbatches: int, placement: Sequence[int],
           per_rank: Callable[[int, RankOrder], None]) -> Schedule:
    """Build a schedule by calling ``per_rank(r, order)`` for every rank."""
    rows = []
    for r in range(ranks):
        tick()  # a caller may stop a long generation between ranks (``flexpipe_ui.watch``)
        o = RankOrder(microbatches)
        per_rank(r, o)
        rows.append(tuple(o.row))
    return Schedule(ranks, microbatches, tuple(placement), tuple(rows))
