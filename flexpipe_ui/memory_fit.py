"""Fit a plan under a memory cap by recomputing or offloading chosen (stage, microbatch) pairs.

A schedule that overflows its cap usually does so at one instant per rank, when the warm-up's
forwards have piled up their activations: recomputing every stage (Megatron's full recompute)
pays a forward per microbatch everywhere to lower a peak that a few microbatches make. Here the
plan's own simulation says which activations are held at each over-cap rank's peak; the ones held
longest are dropped first (``R``: the forward keeps nothing and ``R`` re-runs it just before the
backward, where the rank often waits for the gradient anyway), or moved to the host on the copy
lane (``OFF`` after the forward, ``LOAD`` before the backward) when a copy costs less than the
forward it saves. Each round re-simulates; it stops when every rank fits (the plan returned), or
when no held activation is left to drop (None). The idea of choosing per microbatch on the plan's
own memory curve is Mario's and PipeOffload's (arXiv 2503.01328); the greedy is ours.

The choice is recorded as one edit step (``AddMemoryOps``), so the plan replays and prints as
Python like any edited plan, and the Gantt shows ``R``/``OFF``/``LOAD`` as their own, draggable
bars.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costmodel import copy_time, fits, fits_mask
from .ir import Action, Plan, Schedule
from .kinds import get_kind
from .problem import Problem

__all__ = ["AddMemoryOps", "FitResult", "fit_memory", "add_memory_ops", "full_recompute",
           "best_named_full_recompute", "memory_summary"]


@dataclass(frozen=True)
class AddMemoryOps:
    """Edit step: recompute the ``recompute`` (stage, microbatch) pairs (an ``R`` just before
    each one's backward) and offload the ``offload`` pairs (``OFF`` just after the forward,
    ``LOAD`` just before the backward)."""

    recompute: tuple[tuple[int, int], ...] = ()
    offload: tuple[tuple[int, int], ...] = ()

    def apply(self, s: Schedule) -> Schedule:
        return add_memory_ops(s, self.recompute, self.offload)


def add_memory_ops(s: Schedule, recompute=(), offload=()) -> Schedule:
    """The schedule with ``R`` / ``OFF`` + ``LOAD`` inserted for the given (stage, microbatch)
    pairs; an error names a pair that has no forward, or is asked for twice."""
    from .ir import EditError
    from .ops import register_missing
    rec = {(int(a), int(b)) for a, b in recompute}
    off = {(int(a), int(b)) for a, b in offload}
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
    R = get_kind("R") if rec else None
    OFF, LOAD = (get_kind("OFF"), get_kind("LOAD")) if off else (None, None)
    order = []
    for row in s.order:
        out = []
        for a in row:
            pair = (a.stage, a.microbatch)
            if a.kind.computes_input_grad:
                if pair in rec:
                    out.append(Action(a.stage, R, a.microbatch))
                elif pair in off:
                    out.append(Action(a.stage, LOAD, a.microbatch))
            out.append(a)
            if a.kind.is_forward and pair in off:
                out.append(Action(a.stage, OFF, a.microbatch))
        order.append(out)
    return s.with_order(order)


@dataclass(frozen=True)
class FitResult:
    """A plan that fits (or None), what it recomputes and offloads, and its simulation."""

    plan: Plan | None
    recompute: tuple[tuple[int, int], ...]
    offload: tuple[tuple[int, int], ...]
    makespan: float
    peaks: tuple[float, ...]
    rounds: int

    @property
    def fits(self) -> bool:
        return self.plan is not None


def _candidates(tl, costs, taken: set) -> np.ndarray:
    """One row per forward a drop could free (all ranks): rank, F end, the time its re-made copy is
    needed (its backward's start less a forward), activation, forward time, stage, microbatch."""
    acts = tl.actions
    n = len(acts)
    if n == 0:
        return np.zeros((0, 7))
    stage = np.fromiter((a.stage for a in acts), np.int64, n)
    mb = np.fromiter((a.microbatch for a in acts), np.int64, n)
    fwd = np.fromiter((a.kind.is_forward for a in acts), bool, n)
    bwd = np.fromiter((a.kind.computes_input_grad for a in acts), bool, n)
    key = stage * (int(mb.max()) + 1) + mb
    bstart = np.full(int(key.max()) + 1, np.nan)
    bstart[key[bwd]] = tl.start[bwd]
    f_of, act_of = np.asarray(costs.f, float), np.asarray(costs.act, float)
    idx = np.flatnonzero(fwd)
    b0, st = bstart[key[idx]], stage[idx]
    rows = np.column_stack([tl.rank[idx], tl.end[idx], b0 - f_of[st], act_of[st], f_of[st], st, mb[idx]])
    ok = ~np.isnan(b0) & (rows[:, 3] > 0)
    if taken:
        ok &= ~np.array([(int(a), int(b)) in taken for a, b in rows[:, 5:7]], bool)
    return rows[ok]


def _picks(curves, costs, cap: float, rank: int, rows: np.ndarray, allow_offload: bool, last_stage: int):
    """(pair, "R" or "OFF") choices on ``rank``: at every instant its memory is over ``cap``, in
    time order, drop activations held across it (the longest-held first) until the drops chosen
    so far cover the overshoot there."""
    times, vals = curves[rank]
    H = rows[rows[:, 0] == rank][:, 1:]
    if not len(H):
        return []
    chosen = np.zeros(len(H), bool)
    for i in np.flatnonzero(~fits_mask(vals, cap)):
        t = times[i]
        across = (H[:, 0] <= t) & (H[:, 1] > t)
        need = vals[i] - cap - H[across & chosen, 2].sum()
        if need <= 0:
            continue
        cand = np.flatnonzero(across & ~chosen)
        cand = cand[np.argsort(-(H[cand, 1] - H[cand, 0]), kind="stable")]   # longest held first
        for j in cand:
            if need <= 0:
                break
            chosen[j] = True
            need -= H[j, 2]
    out = []
    for j in np.flatnonzero(chosen):
        s, m, act, f = int(H[j, 4]), int(H[j, 5]), H[j, 2], H[j, 3]
        kind = "R"
        if allow_offload and s != last_stage and costs.copy_bandwidth:
            if copy_time(act, costs.copy_bandwidth, 0.0) < f:
                kind = "OFF"
        out.append(((s, m), kind))
    return out


def _overshoot(curves, cap: float) -> float:
    """Σ over ranks of the time-integral of memory above ``cap`` (what the drops must remove)."""
    tot = 0.0
    for t, v in curves:
        if len(t) > 1:
            tot += float(np.sum(np.maximum(v[:-1] - cap, 0.0) * np.diff(t)))
        tot += max(float(v[-1]) - cap, 0.0) if len(v) else 0.0
    return tot


def fit_memory(plan: Plan, problem: Problem, cap: float | None = None, *, offload: bool | None = None,
               max_rounds: int = 48, give_up_above: float | None = None) -> FitResult:
    """``plan`` with recompute / offload on the fewest (stage, microbatch) pairs this greedy finds
    so every rank's simulated peak fits ``cap`` (default the problem's ``memory_limit``).
    ``offload`` (default: when the problem has ``copy_bandwidth``) lets it choose offload where a
    copy costs less than the forward it saves. ``FitResult.plan`` is None when dropping every
    activation held at a peak still does not fit, or (``give_up_above``, the search's incumbent)
    once a round's plan is already slower than that: drops only add work."""
    from .sim import simulate
    from .timeline import memory_at
    cap = problem.memory_limit if cap is None else cap
    if offload is None:
        offload = problem.copy_bandwidth is not None
    rec: list = []
    off: list = []
    cur = plan
    last = plan.schedule.num_stages - 1
    res = simulate(cur, problem)
    prev_over = None
    for rnd in range(max_rounds + 1):
        peaks = tuple(float(x) for x in res.metrics.peak_memory)
        if cap is None or all(fits(p, cap) for p in peaks):
            return FitResult(cur, tuple(rec), tuple(off), float(res.makespan), peaks, rnd)
        curves = memory_at(res.timeline, res.costs)[1]     # every rank's curve, one pass
        over = _overshoot(curves, cap)
        if give_up_above is not None and res.makespan >= give_up_above:
            break
        if prev_over is not None and over >= prev_over * (1 - 1e-9):
            break            # the last round's drops did not lower the overshoot: what is left is not theirs
        prev_over = over
        if rnd == max_rounds:
            break
        rows = _candidates(res.timeline, res.costs, set(rec) | set(off))
        picks = []
        for r, p in enumerate(peaks):
            if not fits(p, cap):
                picks += _picks(curves, res.costs, cap, r, rows, offload, last)
        if not picks:
            break
        rec += [p for p, k in picks if k == "R"]
        off += [p for p, k in picks if k == "OFF"]
        cur = plan.edit(AddMemoryOps(tuple(sorted(rec)), tuple(sorted(off))))
        res = simulate(cur, problem)
    return FitResult(None, tuple(rec), tuple(off), float(res.makespan),
                     tuple(float(x) for x in res.metrics.peak_memory), rnd)


def full_recompute(plan: Plan) -> Plan:
    """``plan`` with every (stage, microbatch) recomputed (Megatron's full recompute)."""
    pairs = tuple(sorted({(a.stage, a.microbatch) for _, _, a in plan.schedule.actions()
                          if a.kind.is_forward}))
    return plan.edit(AddMemoryOps(recompute=pairs))


def best_named_full_recompute(problem: Problem) -> tuple[float, str]:
    """(makespan, description) of the fastest library schedule (× chunks × split) that fits the
    cap with full recompute; (inf, "none fits") when none does."""
    import math
    from .search import space as sp
    from .sim import simulate
    best = (math.inf, "none fits")
    for c in sp.seed_candidates(problem):
        try:
            res = simulate(full_recompute(c.build()), problem)
        except Exception:            # a seed that cannot be built on this shape is not a baseline
            continue
        if fits(max(res.metrics.peak_memory), problem.memory_limit) and res.makespan < best[0]:
            best = (float(res.makespan), c.description + " + full recompute")
    return best


SUMMARY_MAX_ACTIONS = 40_000
"""Above this many actions ``memory_summary`` leaves the baseline out: it simulates every library
schedule with full recompute (1.7 s at 16 × 64, 20 s at 64 × 256 on this machine), which a
panel's "done" should not wait for."""


def memory_summary(plan: Plan, problem: Problem, makespan: float | None = None) -> str:
    """One line for a capped problem: "fits with N recomputes, M offloads, x ms" against "full
    recompute + best named: y ms" (what a user on a tight device falls back to)."""
    names = [a.kind.name for _, _, a in plan.schedule.actions()]
    if makespan is None:
        from .sim import simulate
        makespan = simulate(plan, problem).makespan
    n = plan.schedule.num_actions
    if n > SUMMARY_MAX_ACTIONS:
        tail = (f"full recompute + best named: not simulated at {n} actions "
                "(flexpipe_ui.memory_fit.best_named_full_recompute(problem) does it)")
    else:
        base, desc = best_named_full_recompute(problem)
        tail = (f"full recompute + best named: {base:.6g} ms ({desc}), {base / makespan:.3f}x"
                if base != float("inf") else "full recompute + best named: none fits")
    return (f"fits {problem.memory_limit:g} with {names.count('R')} recomputes, {names.count('OFF')} offloads, "
            f"{makespan:.6g} ms; {tail}")
