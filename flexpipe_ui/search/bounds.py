"""Cheap lower bounds on a candidate's makespan and memory, computed without building a schedule.

Time (every bound is a true lower bound under DESIGN.md's timing model, so pruning by it never
drops a candidate that could beat the incumbent):

- ``work``: a rank runs one action at a time, so it needs Σ over its stages of m·(F + I + W), plus
  the time before its first input can arrive (the forward of microbatch 0 through the stages before
  its first stage, with ``comm`` on each rank crossing) and after its last stage's last backward
  can no longer be followed by anything (nothing: W may end the step);
- ``chain``: one microbatch's forward down all stages, backward-for-inputs back up and the first
  stage's W, with ``comm`` on every rank crossing;
- ``release``: each rank as one machine whose jobs have release dates: stage s's forwards (all
  microbatches) cannot start before microbatch 0's input arrives (``work``'s arrival), and its
  backwards (I, W, B) not before microbatch 0 has gone forward through every stage and its
  input-gradient back down to s + 1. Any schedule on the rank is at least the preemptive
  single-machine optimum ``max over τ of τ + Σ work released at or after τ``. This is what binds
  when microbatches are few: a rank runs out of forwards before the first backward comes back,
  so ``release >= work``.

Plan-independent (no placement or partition given; ``plan_bound`` is their maximum): Σ work /
ranks (``ideal_makespan``), indivisible layers (``packing_makespan``), indivisible layers plus the
pipeline fill — rank k, ordered by lowest layer, cannot start before microbatch 0 crossed k
ranks — (``fill_packing_makespan``), and one microbatch's chain (``chain_makespan``). With equal
layers and no comm the fill bound is what the best plan achieves; it is what says that with as
many microbatches as ranks no plan comes near Σ work / ranks.

Memory-throughput (``memory_time_bound``, for schedules that fit a cap): each activation is held
for at least its stage's forward-backward round trip and a rank holds at most cap − static at once,
so Σ act · round trip · m / (cap − static) bounds the makespan (Little's law).

Memory: a rank holds its static memory always and at least one microbatch's activation of its
largest stage while it runs that stage, even with recompute.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..costmodel import (backward_time, first_backward, hold_area, hops_latency, layer_chain,
                         layer_work, least_hold, least_message, plain_times, return_latency,
                         stage_work)
from ..problem import Problem, StageCosts

__all__ = ["Bounds", "time_bounds", "rank_ends", "memory_time_bound", "ideal_makespan",
           "packing_makespan", "fill_offsets", "fill_packing_makespan", "chain_makespan", "plan_bound",
           "stage_costs_cached"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """Lower bounds of one (placement, partition)."""

    work: float
    """max over ranks of its compute plus the earliest its first input can arrive."""
    chain: float
    """One microbatch's critical path through all stages and back."""
    release: float
    """max over ranks of the single-machine bound with forward and backward release dates."""
    memory: float
    """max over ranks of static memory + its largest stage's activation (one microbatch)."""

    @property
    def time(self) -> float:
        return max(self.work, self.chain, self.release)


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
    busy, head, arrive, cross = _work_terms(costs, place, ranks, microbatches, extra_work)
    work = float((busy + head).max()) if S else 0.0
    hops = int(cross.sum())
    if not S:
        chain = 0.0
    elif plain_times(costs):
        chain = float(costs.f.sum() + costs.b.sum() + costs.w[0] + 2 * hops_latency(costs, cross)[-1])
    else:  # the least backward per stage (fused or split), messages by size
        chain = float(costs.f.sum() + backward_time(costs)[1:].sum() + first_backward(costs)
                      + 2 * hops_latency(costs, cross)[-1])
    static = np.bincount(place, weights=costs.mem, minlength=ranks)
    big = np.zeros(ranks)
    np.maximum.at(big, place, least_hold(costs))
    release = _release_bound(costs, place, ranks, microbatches, arrive, cross, extra_work) if S else 0.0
    return Bounds(work=work, chain=chain, release=release, memory=float((static + big).max()))


def _work_terms(costs: StageCosts, place: np.ndarray, ranks: int, microbatches: int,
                extra_work: np.ndarray | None = None):
    """(busy, head, arrive, cross) of ``Bounds.work``: per rank its compute and the earliest its
    first input can arrive; per stage microbatch 0's arrival and whether it crosses ranks."""
    per_mb = stage_work(costs)[2]
    if extra_work is not None:
        per_mb = per_mb + extra_work
    busy = np.bincount(place, weights=per_mb * microbatches, minlength=ranks)
    cross = np.r_[0, (place[1:] != place[:-1]).astype(int)]
    # arrival of microbatch 0's input at stage s: forwards of stages < s plus crossings up to s
    arrive = np.r_[0.0, np.cumsum(costs.f)[:-1]] + hops_latency(costs, cross)
    head = np.full(ranks, np.inf)
    np.minimum.at(head, place, arrive)
    head[~np.isfinite(head)] = 0.0
    return busy, head, arrive, cross


def rank_ends(costs: StageCosts, placement: Sequence[int], ranks: int, microbatches: int) -> np.ndarray:
    """Per rank, the earliest it can finish: its compute after its first input arrives (the
    terms of ``Bounds.work``, whose maximum it is)."""
    busy, head, _, _ = _work_terms(costs, np.asarray(placement), ranks, microbatches)
    return busy + head


def _release_bound(costs: StageCosts, place: np.ndarray, ranks: int, microbatches: int,
                   arrive: np.ndarray, cross: np.ndarray, extra_work: np.ndarray | None) -> float:
    """``Bounds.release``: per rank, max over its jobs j of release_j + Σ of its jobs released
    no earlier than j (jobs sorted by release within the rank, suffix sums)."""
    S = len(place)
    # microbatch 0 reaches the end of the forward at ``top``; its input gradient then needs the
    # I (or B) of every later stage and a transfer on every crossing back down to s
    up = np.r_[cross[1:], 0.0]  # crossing from s to s + 1
    fwd, bwd, _ = stage_work(costs)
    top = float(costs.f.sum() + hops_latency(costs, cross)[-1])
    back = np.r_[np.cumsum(backward_time(costs)[::-1])[::-1][1:], 0.0] + return_latency(costs, up)
    fwork = fwd * microbatches
    if extra_work is not None:
        fwork = fwork + np.asarray(extra_work, float) * microbatches  # recompute: released with F
    rel = np.r_[arrive, top + back]
    size = np.r_[fwork, bwd * microbatches]
    rank = np.r_[place, place]
    order = np.lexsort((rel, rank))
    rel, size, rank = rel[order], size[order], rank[order]
    suffix = np.cumsum(size[::-1])[::-1]
    # suffix within the rank: subtract what later ranks hold
    after = np.zeros(ranks + 1)
    after[:ranks] = np.cumsum(np.bincount(rank, weights=size, minlength=ranks)[::-1])[::-1] - \
        np.bincount(rank, weights=size, minlength=ranks)
    return float((rel + suffix - after[rank]).max())


def ideal_makespan(problem: Problem) -> float:
    """Σ work / ranks: every rank busy all the time (the benchmark's reference)."""
    total = sum(layer_work(problem.layers)) * problem.microbatches
    return total / problem.ranks


def packing_makespan(problem: Problem) -> float:
    """A tighter plan-independent bound: layers are indivisible, so some rank carries at least
    the busiest possible bin of layer work, times the microbatches.

    Bin-packing pigeonhole: among the ``k·p + 1`` heaviest layers some rank holds ``k + 1``, so a
    rank carries at least the sum of the ``k + 1`` lightest of them; also Σ work / p.
    """
    work = sorted(layer_work(problem.layers).tolist(), reverse=True)
    p, L = problem.ranks, len(work)
    best = sum(work) / p
    k = 0
    while k * p + 1 <= L:
        top = work[:k * p + 1]
        best = max(best, sum(top[-(k + 1):]))
        k += 1
    return best * problem.microbatches


def fill_offsets(problem: Problem) -> np.ndarray:
    """Earliest start of the k-th rank (ranks ordered by their lowest layer), for any plan.

    The k-th rank's lowest layer is layer k or later, so its first input needs the forward of
    microbatch 0 through layers 0..k-1 at least; that path touches the k ranks before it, so it
    crosses ranks at least k times (``comm`` each). Entries past the layer count are inf (such
    ranks hold nothing).
    """
    f = np.array([l.f for l in problem.layers], float)
    k = np.arange(problem.ranks)
    pre = np.r_[0.0, np.cumsum(f)]
    out = np.full(problem.ranks, np.inf)
    ok = k < len(f)
    out[ok] = pre[k[ok]] + least_message(problem) * k[ok]
    return out


def fill_packing_makespan(problem: Problem) -> float:
    """A plan-independent bound that adds the pipeline fill to the packing bound.

    Any plan puts each layer on one rank; rank k (ordered by lowest layer) can start no earlier
    than ``fill_offsets()[k]``, so its work must fit in ``T - offset``. Two relaxations of that
    packing, both valid for every plan:

    - **average**: ``(Σ work + Σ offsets) / ranks`` (over the first p' ranks, for the p' that
      gives the least: a plan may leave late ranks empty);
    - **units**: with a unit ``g``, a layer of work ``u`` counts as ``floor(u / g)`` whole units and
      rank k holds at most ``floor((T - offset_k) / g)`` of them (splitting layers into units only
      makes packing easier). The least such T, over units ``g`` = each distinct layer work / 1, 2, 3.

    Exact for identical layers: 32 equal layers on 8 ranks, m = 8, F = I = W = 1/4, comm 0 gives
    24 + 7 / 4 (every rank holds 4 layers, the last starts at 7 / 4); no plan does better, and
    ``auto`` reaches it (tests/test_plan_bound.py).
    """
    u = layer_work(problem.layers) * problem.microbatches
    off = fill_offsets(problem)
    fin = off[np.isfinite(off)]
    if not len(u) or u.sum() <= 0:
        return 0.0
    # average with offsets, over the best number of non-empty ranks
    best = min((u.sum() + fin[:q].sum()) / q for q in range(1, len(fin) + 1))
    sizes, counts = np.unique(np.round(u[u > 0], 12), return_counts=True)
    # the sizes that carry the most work first
    for s in sizes[np.argsort(-counts * sizes, kind="stable")][:8]:
        for d in (1, 2, 3):
            g = s / d
            need = np.floor(u / g + 1e-9).sum()
            lo, hi = 0.0, float(fin.max() + need * g + g)
            for _ in range(80):  # the least T with enough whole units (a step function of T)
                mid = 0.5 * (lo + hi)
                if np.maximum(np.floor((mid - fin) / g + 1e-9), 0.0).sum() >= need:
                    hi = mid
                else:
                    lo = mid
            best = max(best, hi)
    return float(best)


def chain_makespan(problem: Problem) -> float:
    """One microbatch's forward through every layer, its input-gradient back and layer 0's W:
    a bound for any plan (comm left out: a plan's crossings are not known here)."""
    return layer_chain(problem.layers)


def plan_bound(problem: Problem) -> float:
    """The best plan-independent makespan bound: Σ work / ranks, packing, fill + packing, chain."""
    return max(ideal_makespan(problem), packing_makespan(problem), fill_packing_makespan(problem),
               chain_makespan(problem))


def memory_time_bound(costs: StageCosts, placement: Sequence[int], ranks: int, microbatches: int,
                      memory_limit: float | None, recomputed: Sequence[int] | str = ()) -> float:
    """A lower bound on the makespan of any schedule that fits ``memory_limit`` (Little's law).

    Stage s's activation of one microbatch is held from its F's start to its W's (or B's) end,
    at least the round trip F(s..S-1), I(S-1..s+1), I(s)+W(s), plus ``comm`` on every rank
    crossing both ways. A rank never holds more than ``memory_limit - static`` of activations, so
    its makespan is at least Σ over its stages of m · act · round trip / (limit - static).
    ``recomputed`` stages (``"all"`` or indices) count nothing: what they hold depends on the
    recompute kind. 0 without a limit.
    """
    if memory_limit is None:
        return 0.0
    place = np.asarray(placement)
    S = len(place)
    if S == 0:
        return 0.0
    cross = np.r_[(place[1:] != place[:-1]).astype(float), 0.0]  # crossing from s to s + 1
    area = hold_area(costs, cross) * microbatches
    if isinstance(recomputed, str):
        if recomputed == "all":
            return 0.0
    elif len(recomputed):
        area = area.copy()
        area[np.asarray(list(recomputed), dtype=int)] = 0.0
    held = np.bincount(place, weights=area, minlength=ranks)
    room = memory_limit - np.bincount(place, weights=costs.mem, minlength=ranks)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(held > 0, np.where(room > 0, held / np.maximum(room, 1e-300), np.inf), 0.0)
    return float(t.max())
