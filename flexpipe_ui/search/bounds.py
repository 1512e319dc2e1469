"""Cheap lower bounds on a candidate's makespan and memory, computed without building a schedule.

Time (every bound is a true lower bound under DESIGN.md's timing model, so pruning by it never
drops a candidate that could beat the incumbent):

- ``work``: a rank runs one action at a time, so it needs Σ over its stages of m·(F + I + W), plus
  the time before its first input can arrive (the forward of microbatch 0 through the stages before
  its first stage, with ``comm`` on each rank crossing) and after its last stage's last backward
  can no longer be followed by anything (nothing: W may end the step);
- ``chain``: one microbatch's forward down all stages, backward-for-inputs back up and the first
  stage's W, with ``comm`` on every rank crossing.

Memory: a rank holds its static memory always and at least one microbatch's activation of its
largest stage while it runs that stage, even with recompute.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..problem import Problem, StageCosts

__all__ = ["Bounds", "time_bounds", "memory_floor", "ideal_makespan", "packing_makespan",
           "stage_costs_cached"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """Lower bounds of one (placement, partition)."""

    work: float
    """max over ranks of its compute plus the earliest its first input can arrive."""
    chain: float
    """One microbatch's critical path through all stages and back."""
    memory: float
    """max over ranks of static memory + its largest stage's activation (one microbatch)."""

    @property
    def time(self) -> float:
        return max(self.work, self.chain)


def stage_costs_cached(problem: Problem, partition, cache: dict) -> StageCosts:
    key = tuple(len(p) for p in partition)
    sc = cache.get(key)
    if sc is None:
        sc = cache[key] = problem.stage_costs(partition)
    return sc


def time_bounds(costs: StageCosts, placement: Sequence[int], ranks: int, microbatches: int,
                extra_work: np.ndarray | None = None) -> Bounds:
    """Bounds for stage costs on a placement; ``extra_work`` adds per-stage time per microbatch
    (e.g. recompute re-running F)."""
    place = np.asarray(placement)
    S = len(place)
    per_mb = costs.f + costs.b + costs.w
    if extra_work is not None:
        per_mb = per_mb + extra_work
    busy = np.bincount(place, weights=per_mb * microbatches, minlength=ranks)
    cross = np.r_[0, (place[1:] != place[:-1]).astype(int)]
    # arrival of microbatch 0's input at stage s: forwards of stages < s plus crossings up to s
    arrive = np.r_[0.0, np.cumsum(costs.f)[:-1]] + costs.comm * np.cumsum(cross)
    head = np.full(ranks, np.inf)
    np.minimum.at(head, place, arrive)
    head[~np.isfinite(head)] = 0.0
    work = float((busy + head).max()) if S else 0.0
    hops = int(cross.sum())
    chain = float(costs.f.sum() + costs.b.sum() + costs.w[0] + 2 * costs.comm * hops) if S else 0.0
    static = np.bincount(place, weights=costs.mem, minlength=ranks)
    big = np.zeros(ranks)
    np.maximum.at(big, place, costs.act)
    return Bounds(work=work, chain=chain, memory=float((static + big).max()))


def memory_floor(costs: StageCosts, placement: Sequence[int], ranks: int) -> float:
    return time_bounds(costs, placement, ranks, 1).memory


def ideal_makespan(problem: Problem) -> float:
    """Σ work / ranks: every rank busy all the time (the benchmark's reference)."""
    total = sum(l.f + l.b + l.w for l in problem.layers) * problem.microbatches
    return total / problem.ranks


def packing_makespan(problem: Problem) -> float:
    """A tighter plan-independent bound: layers are indivisible, so some rank carries at least
    the busiest possible bin of layer work, times the microbatches.

    Bin-packing pigeonhole: among the ``k·p + 1`` heaviest layers some rank holds ``k + 1``, so a
    rank carries at least the sum of the ``k + 1`` lightest of them; also Σ work / p.
    """
    work = sorted((l.f + l.b + l.w for l in problem.layers), reverse=True)
    p, L = problem.ranks, len(work)
    best = sum(work) / p
    k = 0
    while k * p + 1 <= L:
        top = work[:k * p + 1]
        best = max(best, sum(top[-(k + 1):]))
        k += 1
    return best * problem.microbatches
