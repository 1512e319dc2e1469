"""``Timeline`` (when each action ran, simulated or measured) and the metrics read from it.

The simulator returns a Timeline; the runtime turns measured CUDA-event/perf-counter times into the
same type, so the Gantt draws both the same way and the metrics are computed by one function.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .costmodel import action_memory, grad_events, rank_static, send_events
from .graph import action_arrays
from .ir import Action, Schedule
from .problem import StageCosts

__all__ = ["Timeline", "Metrics", "compute_metrics", "memory_events", "memory_at", "memory_curve"]


@dataclass(frozen=True, eq=False)
class Timeline:
    """Start/end/rank of every action. Arrays are aligned with ``actions``."""

    ranks: int
    actions: tuple[Action, ...]
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    source: str = "simulated"          # or "measured"
    schedule: Schedule | None = None
    meta: dict = field(default_factory=dict)
    peak_memory_measured: tuple[float, ...] | None = None
    """Measured runs only: each rank's peak memory in the step as the process measured it (MiB;
    CUDA's max allocated on a GPU; on CPU the resident set's high-water mark less the resident set
    before the rank built its layers: ``kernel_runtime.run.procmem``). The executor's own count of
    tracked bytes is ``meta["peak_memory_tracked"]``."""

    @classmethod
    def from_records(cls, ranks: int, records: Sequence[tuple[int, Action | str, float, float]],
                     source: str = "measured", schedule: Schedule | None = None) -> "Timeline":
        """Build from (rank, action, start, end) tuples, e.g. measured by the runtime."""
        from .ir import parse_action
        acts = tuple(parse_action(a) for _, a, _, _ in records)
        arr = np.array([(r, s, e) for r, _, s, e in records], dtype=float).reshape(-1, 3)
        return cls(ranks, acts, arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2], source, schedule)

    @property
    def makespan(self) -> float:
        if not len(self.end):
            return 0.0
        last = float(self.end.max())
        for _, _, _, e in self.meta.get("allreduce", ()):  # data-parallel all-reduce lane
            last = max(last, e)
        return float(last - min(0.0, float(self.start.min())))

    def shifted(self, t0: float | None = None) -> "Timeline":
        """Same timeline with time starting at 0 (or at ``t0``)."""
        t0 = float(self.start.min()) if t0 is None and len(self.start) else (t0 or 0.0)
        meta = dict(self.meta)
        if "allreduce" in meta:
            meta["allreduce"] = [(r, s, a - t0, b - t0) for r, s, a, b in meta["allreduce"]]
        return Timeline(self.ranks, self.actions, self.rank, self.start - t0, self.end - t0,
                        self.source, self.schedule, meta, self.peak_memory_measured)

    def records(self) -> list[tuple[int, str, float, float]]:
        return [(int(r), str(a), float(s), float(e))
                for r, a, s, e in zip(self.rank, self.actions, self.start, self.end)]

    def of(self, action: Action | str) -> tuple[float, float]:
        """(start, end) of one action."""
        key = str(action)
        for a, s, e in zip(self.actions, self.start, self.end):
            if str(a) == key:
                return float(s), float(e)
        raise KeyError(f"{key} is not in this timeline")


@dataclass(frozen=True)
class Metrics:
    """What a timeline costs: time, idle share and memory per rank."""

    makespan: float
    bubble: float                       # 1 - Σ busy / (ranks × makespan)
    bubble_per_rank: tuple[float, ...]
    busy: tuple[float, ...]
    peak_memory: tuple[float, ...]      # static + activation peak, per rank
    peak_activation: tuple[float, ...]
    static_memory: tuple[float, ...]

    @property
    def max_peak_memory(self) -> float:
        return max(self.peak_memory, default=0.0)

    def to_dict(self) -> dict:
        return {"makespan": self.makespan, "bubble": self.bubble,
                "bubble_per_rank": list(self.bubble_per_rank), "busy": list(self.busy),
                "peak_memory": list(self.peak_memory), "peak_activation": list(self.peak_activation),
                "static_memory": list(self.static_memory)}


_EVENTS: "weakref.WeakKeyDictionary[Timeline, tuple]" = weakref.WeakKeyDictionary()
"""The last events found per timeline, with the costs they were found for (a redraw asks the
metrics, the memory curves and the hover for the same events)."""


def memory_events(tl: Timeline, costs: StageCosts, *, keep: bool = True
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, time, delta) of every activation change, sorted by rank, time, frees first.

    The amounts are ``costmodel.action_memory``'s (kinds' memory specs, ``adjust``, ``act_w``).
    Found once per (timeline, costs): a timeline never changes. The arrays are shared: read-only.
    ``keep=False``: found afresh and not kept (the search's throw-away timelines).
    """
    if not keep:
        return _memory_events(tl, costs)
    hit = _EVENTS.get(tl)
    if hit is not None and hit[0] is costs:
        return hit[1]
    out = _memory_events(tl, costs)
    for a in out:
        a.flags.writeable = False
    _EVENTS[tl] = (costs, out)
    return out


def _memory_events(tl: Timeline, costs: StageCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kid, klist, stage = action_arrays(tl.actions, tl.schedule)
    ms, me = action_memory(tl.actions, kid, klist, stage, costs)
    gr, gt, gd = grad_events(klist, kid, stage, tl.rank, tl.start, costs, tl.end)
    sr, st, sd = (send_events(tl.actions, klist, kid, stage, tl.rank, tl.end, costs, tl.schedule.placement)
                  if tl.schedule is not None else (gr[:0], gt[:0], gd[:0]))
    r = np.concatenate([tl.rank, tl.rank, gr, sr])
    t = np.concatenate([tl.start, tl.end, gt, st])
    d = np.concatenate([ms, me, gd, sd])
    keep = d != 0
    r, t, d = r[keep], t[keep], d[keep]
    o = np.lexsort((d, t, r))  # frees (negative) before allocations at the same instant
    return r[o], t[o], d[o]


def compute_metrics(tl: Timeline, costs: StageCosts | None = None,
                    static: Sequence[float] | None = None) -> Metrics:
    """Makespan, bubble (total and per rank) and per-rank peak memory (static + activations).

    ``static`` is the per-rank static memory; by default the sum of ``costs.mem`` of the stages on
    each rank (from the schedule's placement).
    """
    R = tl.ranks
    makespan = tl.makespan
    kid, klist, _ = action_arrays(tl.actions, tl.schedule)
    if all(k.occupies_compute for k in klist):
        stream_compute = np.ones(len(tl.actions), bool)
    else:
        stream_compute = np.array([k.occupies_compute for k in klist], bool)[kid]
    busy = np.bincount(tl.rank[stream_compute], weights=(tl.end - tl.start)[stream_compute],
                       minlength=R)[:R]
    if makespan > 0:
        per = 1.0 - busy / makespan
        total = 1.0 - busy.sum() / (R * makespan)
    else:
        per, total = np.zeros(R), 0.0
    peak_act = np.zeros(R)
    if static is None:
        static_arr = np.zeros(R)
        if costs is not None and tl.schedule is not None:
            static_arr = rank_static(costs, tl.schedule.placement, R)
    else:
        static_arr = np.asarray(static, float)
    if costs is not None and len(tl.actions):
        r, _, d = memory_events(tl, costs)
        if len(r):
            cum = np.cumsum(d)
            starts = np.r_[0, np.flatnonzero(np.diff(r)) + 1]
            base = np.r_[0.0, cum][starts]  # cumulative total before each rank's first event
            seg_cum = cum - np.repeat(base, np.diff(np.r_[starts, len(r)]))
            peaks = np.maximum.reduceat(seg_cum, starts)
            peak_act[r[starts]] = np.maximum(peaks, 0.0)
    peak = static_arr + peak_act
    return Metrics(makespan=makespan, bubble=float(total),
                   bubble_per_rank=tuple(float(x) for x in per), busy=tuple(float(x) for x in busy),
                   peak_memory=tuple(float(x) for x in peak),
                   peak_activation=tuple(float(x) for x in peak_act),
                   static_memory=tuple(float(x) for x in static_arr))


def memory_at(tl: Timeline, costs: StageCosts) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Memory of each action's rank just after the action started, and each rank's step curve."""
    static = np.zeros(tl.ranks)
    if tl.schedule is not None:
        static = rank_static(costs, tl.schedule.placement, tl.ranks)
    r_ev, t_ev, d_ev = memory_events(tl, costs)
    curves = []
    at = np.zeros(len(tl.actions))
    cut = np.searchsorted(r_ev, np.arange(tl.ranks + 1))          # events are sorted by rank
    by_rank = np.argsort(tl.rank, kind="stable")
    acut = np.searchsorted(tl.rank[by_rank], np.arange(tl.ranks + 1))
    for r in range(tl.ranks):
        times = np.r_[0.0, t_ev[cut[r]:cut[r + 1]]]
        vals = static[r] + np.r_[0.0, np.cumsum(d_ev[cut[r]:cut[r + 1]])]
        curves.append((times, vals))
        mine = by_rank[acut[r]:acut[r + 1]]
        if len(mine):
            idx = np.searchsorted(times, tl.start[mine], side="right") - 1
            at[mine] = vals[np.clip(idx, 0, len(vals) - 1)]
    return at, curves



def memory_curve(tl: Timeline, costs: StageCosts, rank: int,
                 static: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Step curve (times, memory after each change) of one rank, starting at its static memory."""
    r, t, d = memory_events(tl, costs)
    sel = r == rank
    if static is None:
        static = 0.0
        if tl.schedule is not None:
            static = float(rank_static(costs, tl.schedule.placement, max(tl.ranks, rank + 1))[rank])
    times = np.r_[0.0, t[sel]]
    vals = static + np.r_[0.0, np.cumsum(d[sel])]
    return times, vals
