"""Score one candidate plan with the simulator (the search's only cost model).

A candidate that cannot be built or does not validate scores infinity and keeps its reason; one
whose simulated per-rank peak exceeds the memory cap is *infeasible* (kept for the error message
and for memory-aware re-partitioning, never returned).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..costmodel import fits
from ..ir import Plan
from ..problem import Problem
from ..sim import SimResult, simulate
from ..timeline import Timeline, memory_events

__all__ = ["Scored", "evaluate", "abandoned", "stage_inflight", "fits_memory"]

def fits_memory(peak: float, limit: float | None) -> bool:
    """``costmodel.fits`` (kept under this name for the search's callers)."""
    return fits(peak, limit)


@dataclass(frozen=True, eq=False)
class Scored:
    """A candidate after simulation (or after it failed, or was abandoned: ``error`` says)."""

    description: str
    plan: Plan | None
    result: SimResult | None
    makespan: float
    peak: float
    fits: bool
    bound: float = 0.0
    error: str = ""
    knobs: dict = field(default_factory=dict)
    sizes: tuple[int, ...] = ()
    """Layers per stage of its split (kept when the plan is dropped, ``slim``)."""
    peaks: tuple[float, ...] = ()
    """Simulated peak memory per rank."""
    inflight: tuple[float, ...] = ()
    """Over the memory cap: ``stage_inflight`` of its simulation (what the memory repair re-splits
    with), kept when the plan is dropped."""

    @property
    def ok(self) -> bool:
        return not self.error and math.isfinite(self.makespan) and self.fits

    @property
    def built(self) -> bool:
        """Built and simulated (over the memory cap or not), not failed or abandoned."""
        return not self.error

    @property
    def score(self) -> float:
        """Makespan if usable, else infinity (failed and over-memory candidates)."""
        return self.makespan if self.ok else math.inf

    def slim(self) -> "Scored":
        """The same score without the plan and its simulation (a search keeps those only for the
        few it may still return or build on)."""
        return replace(self, plan=None, result=None)


def evaluate(build: Callable[[], Plan], problem: Problem, *, description: str, bound: float = 0.0,
             knobs: dict | None = None, sims: dict | None = None) -> Scored:
    """Build and simulate; never raises for a bad candidate (its ``error`` says why).

    ``sims`` (one dict per search and problem) maps a schedule and partition already simulated to
    its result: different programs often generate the same order (a memory cap that binds makes
    priorities moot), and the simulator is deterministic, so a repeat is not simulated again."""
    knobs = dict(knobs or {})
    try:
        plan = build()
        if sims is None:
            res = simulate(plan, problem)
        else:
            key = _schedule_key(plan)
            res = sims.get(key)
            if res is None:
                res = sims[key] = simulate(plan, problem)
    except (ValueError, KeyError, IndexError) as e:  # ScheduleError, DSL rule errors, PartitionError
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return Scored(description, None, None, math.inf, math.inf, False, bound, msg, knobs)
    peak = res.metrics.max_peak_memory
    fit = fits_memory(peak, problem.memory_limit)
    return Scored(description, plan, res, res.metrics.makespan, peak, fit, bound, "", knobs,
                  tuple(len(p) for p in plan.partition or ()), tuple(res.metrics.peak_memory),
                  () if fit else tuple(stage_inflight(res).tolist()))


def abandoned(description: str, bound: float, lower: float, knobs: dict | None = None) -> Scored:
    """A candidate whose generation stopped once it proved it cannot be faster than ``lower``."""
    return Scored(description, None, None, math.inf, math.inf, False, bound,
                  f"abandoned: makespan >= {lower:.6g}", dict(knobs or {}))


def _schedule_key(plan: Plan) -> tuple:
    """A plan's identity for the simulation cache, from the flat arrays the simulator builds anyway
    (hashing thousands of ``Action`` objects per candidate cost more than some simulations)."""
    from ..graph import _flatten
    sched = plan.schedule
    _, klist, rank, _, kid, stage, mb = _flatten(sched)
    names = tuple(k.name for k in klist)
    body = np.stack([rank, kid, stage, mb]).tobytes() if len(rank) else b""
    return (sched.placement, plan.partition, names, body)


def stage_inflight(result: SimResult) -> np.ndarray:
    """Per stage, the most microbatches whose activation it holds at once (units of its ``act``)."""
    tl = result.timeline
    sched = tl.schedule
    S = sched.num_stages
    stage = np.array([a.stage for a in tl.actions], dtype=np.int64)
    by_stage = Timeline(S, tl.actions, stage, tl.start, tl.end, tl.source, None)
    costs = result.costs
    from dataclasses import replace
    unit = replace(costs, act=np.ones(S), act_w=None, temp=None, grad=None)
    r, _, d = memory_events(by_stage, unit, keep=False)
    out = np.zeros(S)
    if len(r):
        cum = np.cumsum(d)
        starts = np.r_[0, np.flatnonzero(np.diff(r)) + 1]
        base = np.r_[0.0, cum][starts]
        seg = cum - np.repeat(base, np.diff(np.r_[starts, len(r)]))
        out[r[starts]] = np.maximum(np.maximum.reduceat(seg, starts), 0.0)
    return np.round(out, 9)
