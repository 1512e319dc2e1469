"""Stage partitioner: contiguous layer → stage splits balanced by cost and checked against memory.

``balanced_partition(problem, num_stages)`` solves, by dynamic programming over split points,

1. the **bottleneck**: the smallest possible maximum stage work (F + I + W of a microbatch), then
2. the **spread**: among splits with that bottleneck, the smallest sum of squared stage work,

with every stage's memory estimate (static ``mem`` + ``act`` × microbatches it holds at its peak)
under its share of ``memory_limit``; a split that cannot fit is never chosen. With several stages per
rank (interleaved, V) the rank's load is the sum of its stages: the DP is re-solved with per-stage
weights that move work off overloaded ranks, then ``refine_for_ranks`` moves single boundaries
while the (memory overflow, max rank load, max stage load, spread) tuple improves.

Memory estimates need the number of microbatches a stage holds at its rank's peak; by default the
1F1B-like count ``ceil((S - s) / v)`` (stage s of S with v stages per rank: 1F1B's ``p - r``), capped
by the microbatch count. The auto-scheduler passes counts measured on a simulated schedule instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .costmodel import fits, fits_mask
from .problem import Problem
from .watch import tick

__all__ = ["PartitionError", "balanced_partition", "refine_for_ranks", "default_inflight",
           "stage_memory", "rank_memory", "rank_loads", "partition_from_sizes", "PartitionSummary",
           "summarize_partition"]

_EPS = 1e-9


class PartitionError(ValueError):
    """No contiguous split satisfies the request (too many stages, or nothing fits in memory)."""


def partition_from_sizes(sizes: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Stage layer tuples from per-stage layer counts, in model order."""
    out, start = [], 0
    for n in sizes:
        out.append(tuple(range(start, start + int(n))))
        start += int(n)
    return tuple(out)


def _bounds_to_partition(bounds: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:]))


def default_inflight(num_stages: int, ranks: int, microbatches: int) -> np.ndarray:
    """Microbatches each stage holds at its peak in a depth-first (1F1B-like) schedule."""
    v = max(1, math.ceil(num_stages / ranks))
    s = np.arange(num_stages)
    return np.minimum(np.ceil((num_stages - s) / v), microbatches).astype(float)


def _layer_arrays(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    work = np.array([l.f + l.b + l.w for l in problem.layers], float)
    act = np.array([l.act for l in problem.layers], float)
    mem = np.array([l.mem for l in problem.layers], float)
    return work, act, mem


def _default_placement(num_stages: int, ranks: int) -> tuple[int, ...]:
    return tuple(s % ranks for s in range(num_stages))


def _inflight_array(inflight, num_stages: int, problem: Problem) -> np.ndarray:
    if inflight is None:
        return default_inflight(num_stages, problem.ranks, problem.microbatches)
    arr = np.broadcast_to(np.asarray(inflight, float), (num_stages,)).copy()
    if (arr < 0).any():
        raise PartitionError(f"inflight counts must be >= 0, got {arr.tolist()}")
    return arr


def _band(num_stages: int, num_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every split a stage can take, as (stages × B × B) arrays with B = L - S + 1: stage s
    starts at layer i in s .. s + B - 1 (each earlier stage holds a layer) and ends at j in
    s + 1 .. s + B (each later one still gets a layer); everything else is infeasible anyway."""
    B = num_layers - num_stages + 1
    s = np.arange(num_stages)[:, None, None]
    a = np.arange(B)
    return s + a[None, :, None], s + 1 + a[None, None, :]


def _dp(cost: np.ndarray, feasible: np.ndarray, num_stages: int, cap: float | None) -> tuple[float, list[int]] | None:
    """DP over split points. ``cost[s, a, b]``: stage s takes layers s + a .. s + b (the band of
    ``_band``: i = s + a, j = s + 1 + b).

    With ``cap`` None, minimise the max stage cost; else minimise Σ cost² with every cost <= cap.
    Returns (objective, boundaries) or None when no split is feasible.
    """
    S, B, _ = cost.shape
    L1 = S + B
    L = L1 - 1
    inf = np.inf
    best = np.full(L1, inf)
    best[0] = 0.0
    choice = np.zeros((S, L1), dtype=np.int64)
    cols = np.arange(B)
    for s in range(S):
        c = np.where(feasible[s], cost[s], inf)
        if cap is None:
            cand = np.maximum(best[s:s + B, None], c)
        else:
            c = np.where(c <= cap, c * c, inf)
            cand = best[s:s + B, None] + c
        ch = np.argmin(cand, axis=0)
        choice[s, s + 1:s + 1 + B] = s + ch
        best = np.full(L1, inf)
        best[s + 1:s + 1 + B] = cand[ch, cols]
    if not math.isfinite(best[L]):
        return None
    bounds = [L]
    for s in range(S - 1, -1, -1):
        bounds.append(int(choice[s, bounds[-1]]))
    return float(best[L]), bounds[::-1]


def balanced_partition(problem: Problem, num_stages: int, *, placement: Sequence[int] | None = None,
                       inflight: float | Sequence[float] | None = None,
                       memory_limit: float | None | str = "problem",
                       refine: bool = True) -> tuple[tuple[int, ...], ...]:
    """The cost-balanced, memory-feasible contiguous split of the problem's layers into stages.

    ``placement`` (stage → rank; default looped ``s mod ranks``) groups stages by rank for memory
    and for ``refine_for_ranks``. ``inflight`` is the microbatches each stage holds at its peak
    (a number or one per stage; default ``default_inflight``). ``memory_limit`` defaults to the
    problem's; pass None to ignore memory. Raises ``PartitionError`` when nothing fits.
    """
    L = problem.num_layers
    if num_stages < 1:
        raise PartitionError(f"num_stages must be >= 1, got {num_stages}")
    if num_stages > L:
        raise PartitionError(f"cannot split {L} layers into {num_stages} stages: each stage needs at "
                             "least one layer (use fewer stages/chunks per rank)")
    placement = tuple(placement) if placement is not None else _default_placement(num_stages, problem.ranks)
    if len(placement) != num_stages:
        raise PartitionError(f"placement has {len(placement)} stages, expected {num_stages}")
    limit = problem.memory_limit if memory_limit == "problem" else memory_limit
    infl = _inflight_array(inflight, num_stages, problem)
    work, act, mem = _layer_arrays(problem)
    pw, pa, pm = (np.r_[0.0, np.cumsum(x)] for x in (work, act, mem))
    # only the band of splits a stage can take (``_band``): O(S (L - S)^2), not O(S L^2)
    i, j = _band(num_stages, L)
    base = j > i
    cost = pw[j] - pw[i]
    seg_mem = (pm[j] - pm[i]) + infl[:, None, None] * (pa[j] - pa[i])

    masks: dict = {}

    def solve(caps: np.ndarray | None, weights: np.ndarray | None = None, spread: bool = True):
        tick()  # a caller may stop a long partitioning (``flexpipe_ui.watch``)
        key = None if caps is None else caps.tobytes()
        feas = masks.get(key)
        if feas is None:
            feas = masks[key] = base if caps is None else base & fits_mask(seg_mem, caps[:, None, None])
        c = cost if weights is None else cost / weights[:, None, None]
        first = _dp(c, feas, num_stages, None)
        if first is None:
            return None
        bott, bounds = first
        if spread:
            second = _dp(c, feas, num_stages, bott * (1 + 1e-9) + _EPS)
            bounds = second[1] if second is not None else bounds
        return _bounds_to_partition(bounds)

    if limit is None:
        part = solve(None)
    else:
        part = _solve_with_rank_caps(solve, problem, placement, infl, float(limit))
        if part is None:
            res = _dp(seg_mem, base, num_stages, None)
            lo = res[0] if res is not None else float("inf")
            raise PartitionError(
                f"no split of {L} layers into {num_stages} stages fits memory_limit={limit:g}: the "
                f"smallest stage memory estimate is {lo:.4g} (static + act x up to {infl.max():g} "
                "in-flight microbatches); raise the limit, hold fewer microbatches in flight, recompute "
                "activations or use more ranks")
    assert part is not None
    if refine and len(set(placement)) < num_stages:
        caps = None if limit is None else np.full(num_stages, float(limit))
        # local search from both the per-stage optimum and the rank-reweighted split: keep the better
        starts = [part, _reweight_for_ranks(solve, caps, problem, part, placement, infl, limit)]
        ends = [refine_for_ranks(problem, x, placement, inflight=infl, memory_limit=limit) for x in starts]
        part = min(ends, key=lambda x: _split_score(problem, x, placement, infl, limit)[0])
    return part


def _split_score(problem: Problem, part, placement, infl, limit):
    work, _, _ = _layer_arrays(problem)
    st = np.array([work[list(p)].sum() for p in part])
    rl = np.bincount(np.asarray(placement), weights=st, minlength=problem.ranks)
    over = 0.0
    if limit is not None:
        over = float(np.maximum(np.array(rank_memory(problem, part, placement, infl)) - limit, 0).sum())
    return (round(over, 9), round(float(rl.max()), 9), round(float(st.max()), 9),
            round(float((st * st).sum()), 9)), rl


def _reweight_for_ranks(solve, caps, problem: Problem, part, placement, infl, limit, rounds: int = 30,
                        patience: int = 30):
    """Several stages per rank: re-solve the stage DP with per-stage weights (a stage may take
    work in proportion to its weight) that shrink on overloaded ranks and grow on idle ones, so
    e.g. a V placement gives the rank holding a heavy LM head a light first stage."""
    place = np.asarray(placement)
    best, (best_score, rl) = part, _split_score(problem, part, placement, infl, limit)
    wts = np.ones(len(placement))
    stale = 0
    for _ in range(rounds):
        if stale >= patience:
            break
        target = rl.mean()
        if target <= 0:
            break
        wts = wts * (target / np.maximum(rl[place], 1e-12)) ** 0.7
        wts = wts / wts.mean()
        cand = solve(caps, wts, spread=False)  # only the rank loads matter here
        if cand is None:
            break
        sc, rl = _split_score(problem, cand, placement, infl, limit)
        if sc < best_score:
            best, best_score, stale = cand, sc, 0
        else:
            stale += 1
    return best


def _solve_with_rank_caps(solve, problem: Problem, placement, infl, limit: float):
    """Per-stage caps start at the whole limit (each stage alone must fit) and shrink on ranks
    whose stages together overflow, in proportion to the overflow; last resort: equal shares."""
    place = np.asarray(placement)
    caps = np.full(len(placement), limit)
    for _ in range(24):
        part = solve(caps)
        if part is None:
            break
        sm = stage_memory(problem, part, infl)
        rm = np.bincount(place, weights=sm, minlength=problem.ranks)
        over = ~fits_mask(rm, limit)
        if not over.any():
            return part
        shrink = over[place]
        caps[shrink] = np.minimum(caps[shrink], sm[shrink] * limit / rm[place][shrink] - _EPS)
    per_rank = np.bincount(place, minlength=problem.ranks)
    part = solve(np.array([limit / per_rank[r] for r in placement], float))
    if part is not None and fits(max(rank_memory(problem, part, placement, infl)), limit):
        return part
    # local repair: move boundaries to remove the overflow first, from the work-balanced split
    start = solve(None)
    part = refine_for_ranks(problem, start, placement, inflight=infl, memory_limit=limit, max_moves=2000)
    if fits(max(rank_memory(problem, part, placement, infl)), limit):
        return part
    return None


def stage_memory(problem: Problem, partition, inflight=None) -> np.ndarray:
    """Per-stage memory estimate: static + act × microbatches held."""
    S = len(partition)
    infl = _inflight_array(inflight, S, problem)
    _, act, mem = _layer_arrays(problem)
    return np.array([mem[list(p)].sum() + infl[s] * act[list(p)].sum() for s, p in enumerate(partition)])


def rank_memory(problem: Problem, partition, placement, inflight=None) -> list[float]:
    """Per-rank memory estimate: the sum of its stages' ``stage_memory``."""
    sm = stage_memory(problem, partition, inflight)
    out = np.zeros(problem.ranks)
    np.add.at(out, np.asarray(placement), sm)
    return out.tolist()


def rank_loads(problem: Problem, partition, placement) -> np.ndarray:
    """Per-rank work of one microbatch (Σ F + I + W over its stages)."""
    work, _, _ = _layer_arrays(problem)
    out = np.zeros(problem.ranks)
    for s, p in enumerate(partition):
        out[placement[s]] += work[list(p)].sum()
    return out


def refine_for_ranks(problem: Problem, partition, placement, *, inflight=None,
                     memory_limit: float | None = None, max_moves: int = 200,
                     span: int = 4) -> tuple[tuple[int, ...], ...]:
    """Local search on the split: shift a run of up to ``span`` consecutive boundaries by one layer
    (which moves one layer from a stage to another ``span`` stages away, the stages between keeping
    their sizes) while (memory overflow, rank loads sorted high to low, max stage, spread) improves.

    Comparing the whole sorted load vector, not only its maximum, lets the search cross plateaus
    where several ranks tie for the maximum. Used when a rank holds several stages, where per-stage
    balance does not imply per-rank balance, and to repair a split whose ranks overflow
    ``memory_limit`` (estimate); a fitting split never moves to one that overflows.
    """
    work, act, mem = _layer_arrays(problem)
    pw, pa, pm = np.r_[0.0, np.cumsum(work)], np.r_[0.0, np.cumsum(act)], np.r_[0.0, np.cumsum(mem)]
    sizes = [len(p) for p in partition]
    bounds = np.r_[0, np.cumsum(sizes)].astype(int)
    place = np.asarray(placement)
    S = len(sizes)
    infl = _inflight_array(inflight, S, problem)

    def score(b):
        st = pw[b[1:]] - pw[b[:-1]]
        rl = np.bincount(place, weights=st, minlength=problem.ranks)
        over = 0.0
        if memory_limit is not None:
            sm = pm[b[1:]] - pm[b[:-1]] + infl * (pa[b[1:]] - pa[b[:-1]])
            rm = np.bincount(place, weights=sm, minlength=problem.ranks)
            over = float(np.maximum(rm - memory_limit, 0.0).sum())
        return (round(over, 9), tuple(np.round(np.sort(rl)[::-1], 9)), round(float(st.max()), 9),
                round(float((st * st).sum()), 9))

    cur = score(bounds)
    for _ in range(max_moves):
        tick()
        improved = False
        for k1 in range(1, S):
            for k2 in range(k1, min(S - 1, k1 + span - 1) + 1):
                for d in (-1, 1):
                    nb = bounds.copy()
                    nb[k1:k2 + 1] += d
                    if nb[k1] <= nb[k1 - 1] or nb[k2] >= nb[k2 + 1]:
                        continue
                    sc = score(nb)
                    if sc < cur:
                        bounds, cur, improved = nb, sc, True
        if not improved:
            break
    return _bounds_to_partition(bounds.tolist())


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSummary:
    """How balanced a partition is."""

    sizes: tuple[int, ...]
    """Layers per stage."""
    stage_work: tuple[float, ...]
    """F + I + W of one microbatch per stage."""
    rank_work: tuple[float, ...]
    """Per-rank sum of its stages' work."""
    imbalance: float
    """max rank work / mean rank work (1.0 is perfect)."""


def summarize_partition(problem: Problem, partition, placement=None) -> PartitionSummary:
    placement = placement or _default_placement(len(partition), problem.ranks)
    work, _, _ = _layer_arrays(problem)
    st = tuple(float(work[list(p)].sum()) for p in partition)
    rl = rank_loads(problem, partition, placement)
    mean = float(rl.mean()) if rl.mean() > 0 else 1.0
    return PartitionSummary(sizes=tuple(len(p) for p in partition), stage_work=st,
                            rank_work=tuple(float(x) for x in rl), imbalance=float(rl.max() / mean))
