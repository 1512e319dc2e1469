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

What no drop frees, the activation a deferred W holds after its I (zero-bubble schedules), is
lowered by moving that W next to its I. The choice is recorded as one edit step
(``memory_ops.AddMemoryOps``), so the plan replays and prints as Python like any edited plan, and
the Gantt shows ``R``/``OFF``/``LOAD`` as their own, draggable bars.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costmodel import copy_time, fits, fits_mask
from .ir import Plan
from .memory_ops import AddMemoryOps, add_memory_ops
from .problem import Problem

__all__ = ["AddMemoryOps", "FitResult", "fit_memory", "add_memory_ops", "full_recompute",
           "best_named_full_recompute", "memory_summary"]


@dataclass(frozen=True)
class FitResult:
    """A plan that fits (or None), what it recomputes and offloads, and its simulation."""

    plan: Plan | None
    recompute: tuple[tuple[int, int], ...]
    offload: tuple[tuple[int, int], ...]
    makespan: float
    peaks: tuple[float, ...]
    rounds: int
    w_early: tuple[tuple[int, int], ...] = ()
    """Pairs whose deferred ``W`` was moved to just after its ``I``."""

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


def _deferred_w(tl, costs, taken: set) -> np.ndarray:
    """One row per split backward whose ``W`` runs later than its ``I`` (all ranks), in
    ``_candidates``'s columns so ``_picks``'s greedy chooses among them: rank, I end, W start,
    what the W holds until it runs (``act_w``, else ``act``), 0 (no forward re-run), stage,
    microbatch."""
    ends, starts, rank = {}, {}, {}
    for a, r, b, e in zip(tl.actions, tl.rank, tl.start, tl.end):
        pair = (a.stage, a.microbatch)
        if a.kind.role == "backward_input":
            ends[pair] = float(e)
            rank[pair] = int(r)
        elif a.kind.role == "backward_weight":
            starts[pair] = float(b)
    held = np.asarray(costs.act if costs.act_w is None else costs.act_w, float)
    rows = [(rank[p], ends[p], starts[p], float(held[p[0]]), 0.0, p[0], p[1])
            for p in ends if p in starts and p not in taken and starts[p] > ends[p] + 1e-9
            and held[p[0]] > 0]
    return np.array(rows, float).reshape(-1, 7)


def _copies(tl) -> dict:
    """Per rank, (start, end) of the copies already on its copy lane (one pass over the timeline)."""
    out: dict = {}
    for x, r, a, b in zip(tl.actions, tl.rank, tl.start, tl.end):
        if x.kind.stream != "compute":
            out.setdefault(int(r), []).append((float(a), float(b)))
    return out


def _busy(spans: list, lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans)


def _room(h, t: float, bw: float, copies: list, last_stage: int) -> bool:
    """Whether the held activation ``h`` (a ``_picks`` row) can be offloaded so it is off the
    device at ``t``: both copies fit between its forward and its backward on a copy lane busy
    ``copies`` (which the copies then join)."""
    st, fend, bstart = int(h[4]), h[0], h[1] + h[3]
    if st == last_stage:
        return False
    c = copy_time(h[2], bw, 0.0)
    if fend + c <= t < bstart - c and _busy(copies, fend, bstart) + 2 * c <= 0.9 * (bstart - fend):
        copies += [(fend, fend + c), (bstart - c, bstart)]
        return True
    return False


def _picks(curves, costs, cap: float, rank: int, rows: np.ndarray, allow_offload: bool, last_stage: int,
           copies: list, offload_first: bool = False):
    """(pair, "R" or "OFF") choices on ``rank``: at every instant its memory is over ``cap``, in
    time order, drop activations held across it (the longest-held first) until the drops chosen
    so far cover the overshoot there. A drop is an offload when copies are allowed, the copy lane
    has room for both copies between the forward and the backward (``copies``: its busy spans,
    which the chosen offloads join), and the activation is off the device at that instant (after
    its ``OFF`` ends, before its ``LOAD`` must start); else a recompute. ``offload_first``: every
    drop that can be an offload is taken before any recompute, and recomputes go by the least
    forward time per unit of memory freed."""
    times, vals = curves[rank]
    H = rows[rows[:, 0] == rank][:, 1:]
    if not len(H):
        return []
    chosen = np.zeros(len(H), bool)
    kinds = {}
    bw = costs.copy_bandwidth if allow_offload else None
    for i in np.flatnonzero(~fits_mask(vals, cap)):
        t = times[i]
        across = (H[:, 0] <= t) & (H[:, 1] > t)
        need = vals[i] - cap - H[across & chosen, 2].sum()
        if need <= 0:
            continue
        cand = np.flatnonzero(across & ~chosen)
        cand = cand[np.argsort(-(H[cand, 1] - H[cand, 0]), kind="stable")]   # longest held first
        if bw and offload_first:
            # every drop whose copies the lane has room for first (a hidden copy costs no
            # compute), then recomputes, the least forward time per unit freed first
            for j in cand:
                if need > 0 and _room(H[j], t, bw, copies, last_stage):
                    chosen[j] = True
                    need -= H[j, 2]
                    kinds[j] = "OFF"
            cand = cand[~chosen[cand]]
            cand = cand[np.argsort(H[cand, 3] / H[cand, 2], kind="stable")]
        for j in cand:
            if need <= 0:
                break
            chosen[j] = True
            need -= H[j, 2]
            kinds[j] = "OFF" if bw and not offload_first and _room(H[j], t, bw, copies, last_stage) else "R"
    return [((int(H[j, 4]), int(H[j, 5])), kinds[j]) for j in np.flatnonzero(chosen)]


def _resident_offloads(tl, curves, cap: float, off: list) -> set:
    """The offloaded (stage, microbatch) pairs whose activation is on the device (between its
    forward's end and its ``OFF``'s end, or from its ``LOAD``'s start) at an instant its rank is
    over ``cap``."""
    want = set(off)
    spans: dict = {}
    for a, r, b, e in zip(tl.actions, tl.rank, tl.start, tl.end):
        pair = (a.stage, a.microbatch)
        if pair not in want:
            continue
        d = spans.setdefault(pair, {"rank": int(r)})
        d[a.kind.name if a.kind.name in ("OFF", "LOAD") else ("F" if a.kind.is_forward else
          ("B" if a.kind.computes_input_grad else "x"))] = (float(b), float(e))
    out = set()
    for pair, d in spans.items():
        if not {"F", "OFF", "LOAD", "B"} <= d.keys():
            continue
        times, vals = curves[d["rank"]]
        over = times[~fits_mask(vals, cap)]
        if not len(over):
            continue
        on = ((over >= d["F"][1]) & (over < d["OFF"][1])) | ((over >= d["LOAD"][0]) & (over < d["B"][0]))
        if on.any():
            out.add(pair)
    return out


def _leads(tl, costs, pairs) -> dict:
    """For each offloaded (stage, microbatch): how many compute actions before its backward its
    ``LOAD`` is issued so the copy (``copy_time``) ends by the backward's start in ``tl``."""
    sched = tl.schedule
    out = {}
    if sched is None or not pairs:
        return out
    want = set(pairs)
    base = 0
    index = {}
    for r, row in enumerate(sched.order):
        for i, a in enumerate(row):
            if a.kind.computes_input_grad and (a.stage, a.microbatch) in want:
                index[(a.stage, a.microbatch)] = (r, i, base + i)
        base += len(row)
    for (st, m), (r, i, flat) in index.items():
        row = sched.order[r]
        c = copy_time(float(costs.act[st]), costs.copy_bandwidth, 0.0)
        tb = float(tl.start[flat])
        k, j = 0, i - 1
        while j >= 0:
            a = row[j]
            if a.stage == st and a.microbatch == m and (a.kind.is_forward or a.kind.name == "OFF"):
                break
            if a.kind.stream == "compute":
                if float(tl.end[flat - (i - j)]) + c <= tb + 1e-9:
                    break
                k += 1
            j -= 1
        out[(st, m)] = k
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
    ``offload`` (default: when the problem has ``copy_bandwidth``) also tries offloading where the
    copy lane has room for both copies, each ``LOAD`` issued early enough to end by its backward,
    twice (offloading where a drop's lane has room; offloading every drop that can be before any
    recompute) and keeps the fastest of those fits and the recompute-only one. Where a peak is
    held by deferred W's (zero-bubble schedules), which no drop before the I frees, those W's move
    next to their I's (``AddMemoryOps.w_early``): after the drops, and in one more fit before
    them. ``FitResult.plan`` is None when
    dropping every activation held at a peak still does not fit, or (``give_up_above``, the
    search's incumbent) once a round's plan is already slower than that: drops only add work."""
    cap = problem.memory_limit if cap is None else cap
    if offload is None:
        offload = problem.copy_bandwidth is not None
    best = _fit(plan, problem, cap, False, max_rounds, give_up_above)
    if any(a.kind.role == "backward_weight" for row in plan.schedule.order for a in row):
        # deferred W's first: moving a W next to its I costs no compute (it may cost the bubble it filled)
        bar = give_up_above if best.plan is None else min(best.makespan, give_up_above or float("inf"))
        alt = _fit(plan, problem, cap, False, max_rounds, bar, w_first=True)
        if alt.plan is not None and (best.plan is None or alt.makespan < best.makespan):
            best = alt
    if offload and problem.copy_bandwidth:
        for first in (False, True):   # offload where the lane has room / offload before any recompute
            bar = give_up_above if best.plan is None else min(best.makespan, give_up_above or float("inf"))
            alt = _fit(plan, problem, cap, True, max_rounds, bar, offload_first=first)
            if alt.plan is not None and (best.plan is None or alt.makespan < best.makespan):
                best = alt
    return best


def _edit(plan: Plan, rec: list, off: list, lead: dict, early=()) -> Plan:
    return plan.edit(AddMemoryOps(tuple(sorted(rec)), tuple(sorted(off)),
                                  tuple(sorted((a, b, k) for (a, b), k in lead.items() if k)),
                                  tuple(sorted(early))))


def _fit(plan: Plan, problem: Problem, cap, offload: bool, max_rounds: int, give_up_above,
         offload_first: bool = False, w_first: bool = False) -> FitResult:
    """One greedy fit (``fit_memory``). Each round drops activations held at the over-cap instants
    (``_picks``); when none is left to drop, or first with ``w_first``, it moves deferred W's
    held there next to their I's (``_w_moves``)."""
    from .sim import simulate
    from .timeline import memory_at
    rec: list = []
    off: list = []
    early: list = []
    lead: dict = {}
    cur = plan
    last = plan.schedule.num_stages - 1
    res = simulate(cur, problem)
    prev_over = None
    for rnd in range(max_rounds + 1):
        peaks = tuple(float(x) for x in res.metrics.peak_memory)
        if cap is None or all(fits(p, cap) for p in peaks):
            if off:
                cur, res = _polish_leads(plan, problem, cap, rec, off, lead, cur, res, early)
            return FitResult(cur, tuple(rec), tuple(off), float(res.makespan),
                             tuple(float(x) for x in res.metrics.peak_memory), rnd, tuple(early))
        curves = memory_at(res.timeline, res.costs)[1]     # every rank's curve, one pass
        over = _overshoot(curves, cap)
        if give_up_above is not None and res.makespan >= give_up_above:
            break
        if prev_over is not None and over >= prev_over * (1 - 1e-9):
            break            # the last round's drops did not lower the overshoot: what is left is not theirs
        prev_over = over
        if rnd == max_rounds:
            break
        picks = []
        moved = _w_moves(res, curves, cap, peaks, early) if w_first else []
        if not moved:
            rows = _candidates(res.timeline, res.costs, set(rec) | set(off))
            lanes = _copies(res.timeline) if offload else {}
            for r, p in enumerate(peaks):
                if not fits(p, cap):
                    picks += _picks(curves, res.costs, cap, r, rows, offload, last, lanes.get(r, []),
                                    offload_first)
        if not picks and not moved and off:
            # what is left over the cap is offloaded activations still on the device (copying
            # out, or reloaded ahead): recompute those instead
            back = _resident_offloads(res.timeline, curves, cap, off)
            if back:
                off = [p for p in off if p not in back]
                for pair in back:
                    lead.pop(pair, None)
                picks = [(pair, "R") for pair in sorted(back)]
                prev_over = None
        if not picks and not moved and not w_first:
            moved = _w_moves(res, curves, cap, peaks, early)
        if not picks and not moved:
            break
        early += moved
        rec += [p for p, k in picks if k == "R"]
        new_off = [p for p, k in picks if k == "OFF"]
        off += new_off
        lead.update(_leads(res.timeline, res.costs, new_off))
        cur = _edit(plan, rec, off, lead, early)
        res = simulate(cur, problem)
    return FitResult(None, tuple(rec), tuple(off), float(res.makespan),
                     tuple(float(x) for x in res.metrics.peak_memory), rnd, tuple(early))


def _w_moves(res, curves, cap: float, peaks, early: list) -> list:
    """The deferred W's to move next to their I's on every over-cap rank this round: at each
    over-cap instant, those held across it (longest-held first, ``_picks``'s greedy) until what
    they hold covers the overshoot there."""
    rows = _deferred_w(res.timeline, res.costs, set(early))
    out = []
    for r, p in enumerate(peaks):
        if not fits(p, cap):
            out += [pair for pair, _ in _picks(curves, res.costs, cap, r, rows, False, -1, [])]
    return out


def _polish_leads(plan, problem, cap, rec, off, lead, cur, res, early=(), rounds: int = 6):
    """Issue each ``LOAD`` that its backward still waits for one compute action earlier, while
    that makes the plan faster and it still fits (``lead`` is updated in place)."""
    from .sim import simulate
    for _ in range(rounds):
        tl = res.timeline
        span = {(a.stage, a.kind.name, a.microbatch): (float(b), float(e))
                for a, b, e in zip(tl.actions, tl.start, tl.end)}
        trial = dict(lead)
        for st, m in off:
            ld = span.get((st, "LOAD", m))
            bw = span.get((st, "I", m)) or span.get((st, "B", m))
            if ld and bw and bw[0] <= ld[1] + 1e-9:
                trial[(st, m)] = trial.get((st, m), 0) + 1
        if trial == lead:
            break
        cand = _edit(plan, rec, off, trial, early)
        r2 = simulate(cand, problem)
        if r2.makespan >= res.makespan - 1e-9 or not all(fits(float(p), cap) for p in r2.metrics.peak_memory):
            break
        lead.clear()
        lead.update(trial)
        cur, res = cand, r2
    return cur, res


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
