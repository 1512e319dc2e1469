"""The simulator — the only one (DESIGN.md, contract 4).

Each lane (a rank's compute stream, or another stream such as a copy engine) runs its actions in
list order, one at a time; an action starts at max(end of the lane's previous action, time its
dependencies are met). How long an action takes and what a dependency between ranks adds
(``comm``, and with the optional terms message size / bandwidth) come from ``costmodel``, as do
the memory rules (through ``timeline.compute_metrics``) and the data-parallel all-reduce lane.

How it is fast: the start times are the least fixpoint of those max-plus equations. Within a lane,
given ready times r_k and durations d_k, the ends are a max-plus prefix scan,
``end_k = D_k + max_{j<=k}(r_j - D_{j-1})`` with D the cumulative durations (one
``np.maximum.accumulate``); cross-lane dependencies are a gather. ``_solve_sweeps`` solves it lane
by lane (Gauss-Seidel): each dirty lane is re-scanned from its first position whose inputs changed,
and a lane whose ends change marks the lanes it feeds dirty from the first position they read;
sweeps alternate rank order up and down, so a chain of forwards down the ranks and of backwards
up them each settle in one sweep. Starting from zero every iterate is a lower bound that rises to
the fixpoint. On an acyclic schedule each end is a fixed float function of its predecessors'
ends, so the fixpoint is unique, bit for bit, whatever the order of solving: ``_solve_rounds``
(the plain iteration, every lane each round; kept as the reference the tests compare with) gives
identical timelines, in (cross-lane hops on the critical path + 1) rounds of the whole schedule,
where the sweeps need about the number of direction changes of that path (4 instead of 135
rounds for ZB-H1 at 64 ranks x 256 microbatches). With positive durations a deadlock has no
fixpoint, so it is caught by a cap and explained by the validator.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costmodel import action_durations, allreduce_lane, duration_table
from .graph import compile_schedule
from .ir import Plan, Schedule
from .kinds import Kind
from .problem import Problem, StageCosts, even_partition, uniform_costs
from .timeline import Metrics, Timeline, compute_metrics
from .watch import active as active_watcher, tick

__all__ = ["simulate", "SimResult", "costs_for", "duration_table"]


@dataclass(frozen=True, eq=False)
class SimResult:
    """A simulated timeline, its metrics and the costs it was simulated with."""

    timeline: Timeline
    metrics: Metrics
    costs: StageCosts
    rounds: int = 0

    @property
    def makespan(self) -> float:
        return self.metrics.makespan

    def __repr__(self) -> str:
        m = self.metrics
        return (f"SimResult(makespan={m.makespan:.4g}, bubble={m.bubble:.1%}, "
                f"peak_memory={[round(x, 3) for x in m.peak_memory]})")


def costs_for(plan: Plan | Schedule, problem: Problem | None = None) -> StageCosts:
    """Stage costs of a plan: from the problem and the plan's partition (even if none), else uniform."""
    sched = plan.schedule if isinstance(plan, Plan) else plan
    if problem is None:
        return uniform_costs(sched.num_stages, sched.ranks)
    part = plan.partition if isinstance(plan, Plan) else None
    if part is None:
        part = even_partition(problem.num_layers, sched.num_stages)
    elif sum(len(p) for p in part) != problem.num_layers:
        from .problem import ProblemError
        raise ProblemError(f"the plan's partition covers {sum(len(p) for p in part)} layers but the "
                           f"problem has {problem.num_layers}")
    return problem.stage_costs(part, sched.placement)


def simulate(plan: Plan | Schedule, costs: StageCosts | Problem | None = None, *,
             comm: float | None = None, metrics: bool = True, check_after: int | None = None,
             warm: SimResult | None = None) -> SimResult:
    """Simulate a schedule or plan under DESIGN.md's timing and memory rules.

    ``costs`` is a ``StageCosts``, a ``Problem`` (summed over the plan's partition) or None for the
    uniform reference costs (F = I = W = 1 per rank's share). ``comm`` overrides the latency.
    Raises ``ScheduleError`` (naming the actions) for an invalid schedule. On a schedule not yet
    validated, the sweeps converging prove it deadlock-free (``validate.proven_by_simulation``);
    past ``check_after`` sweeps (default ``8 × lanes + 64``) the validator's deadlock search runs
    (an editor that knows how many sweeps the plan before an edit took passes about twice that).
    ``warm``: the result of a schedule this one was edited from; its end times (matched by action
    identity) start the sweeps instead of zero, so an edit re-solves only what it moved. The
    result is the same, bit for bit: the fixpoint of an acyclic schedule is unique.
    """
    from .validate import ScheduleError, deadlock_problem, proven_by_simulation, static_problems, validated

    sched = plan.schedule if isinstance(plan, Plan) else plan
    if isinstance(costs, Problem) or costs is None:
        costs = costs_for(plan, costs)
    if comm is not None:
        costs = costs.with_comm(comm)
    if costs.num_stages != sched.num_stages:
        raise ValueError(f"costs are for {costs.num_stages} stages but the schedule has {sched.num_stages}")
    trusted = validated(sched)
    if not trusted:
        probs = static_problems(sched)
        if probs:
            proven_by_simulation(sched, probs)
            raise ScheduleError("invalid schedule", probs, sched)
    tick()      # a long simulation can be stopped between its steps (``watch``)
    g = compile_schedule(sched)
    dur, lat = action_durations(g, costs)
    lanes = _lanes(g)
    tick()

    def deadlock() -> None:
        d = deadlock_problem(g)
        if d is not None:
            proven_by_simulation(sched, [d])
            raise ScheduleError("invalid schedule", [d], sched)

    end, ready, rounds = _solve_sweeps(lanes, dur, lat, check=None if trusted else deadlock,
                                       check_after=check_after,
                                       init=None if warm is None else _warm_ends(g, warm.timeline))
    if not (g.n == 0 or dur.min() > 0) and not trusted and _zero_cycle(g, lanes, dur, lat):
        # a cycle of zero-duration actions over zero-latency edges can reach a fixpoint: the
        # validator's Kahn pass names it
        deadlock()
    if not trusted:
        proven_by_simulation(sched)   # converged (or the Kahn pass above passed): no deadlock
    # start = max(ready, previous end on the lane), from the same converged ends that later
    # actions read: a free at t and an allocation by the action that starts at t then share the
    # exact same float, so memory peaks are not inflated by one-ulp gaps (end - start may differ
    # from the duration by an ulp; with dyadic costs everything is exact)
    prev_end = np.zeros(g.n)
    order = lanes.order
    prev_end[order] = np.where(lanes.first, 0.0, end[np.r_[order[:1], order[:-1]]]) if g.n else 0.0
    start = np.maximum(ready, prev_end)
    end = np.maximum(end, start)
    tl = Timeline(sched.ranks, g.actions, g.rank, start, end, "simulated", sched)
    _add_allreduce(tl, g, costs)
    tick()
    m = compute_metrics(tl, costs) if metrics else None
    return SimResult(tl, m, costs, rounds)


def _warm_ends(g, old: Timeline) -> np.ndarray:
    """End times of ``old`` for the actions of ``g`` that are the very same objects (an edit's
    schedule shares its action objects with the schedule it came from), zero for the others."""
    n, m = g.n, len(old.actions)
    new_ids = np.fromiter(map(id, g.actions), np.int64, n)
    old_ids = np.fromiter(map(id, old.actions), np.int64, m)
    init = np.zeros(n)
    if not (n and m):
        return init
    if n == m:                        # an edit's reorder: most actions keep their place
        same = new_ids == old_ids
        init[same] = np.asarray(old.end, dtype=float)[same]
        if same.all():
            return init
    o = np.argsort(old_ids)
    at = np.minimum(np.searchsorted(old_ids[o], new_ids), m - 1)
    hit = old_ids[o][at] == new_ids
    init[hit] = np.asarray(old.end, dtype=float)[o[at[hit]]]
    return init


def _zero_cycle(g, lanes, dur: np.ndarray, lat: np.ndarray) -> bool:
    """Whether the converged equations may hide a cycle: one needs every action on it of zero
    duration and every edge of zero latency (any positive term grows each sweep, so a fixpoint
    rules it out). Kahn's pass over that subgraph only (the data-fed first stage's no-op I's:
    a few hundred actions at 64 × 256, not the whole graph)."""
    zero = dur == 0
    if not zero.any():
        return False
    o = lanes.order
    nxt = ~lanes.first[1:]                          # o[k] -> o[k + 1] on one lane
    a_l, b_l = o[:-1][nxt], o[1:][nxt]
    keep_l = zero[a_l] & zero[b_l]
    keep_x = zero[g.src] & zero[g.dst] & (lat == 0)
    src = np.r_[a_l[keep_l], g.src[keep_x]].astype(np.int64)
    dst = np.r_[b_l[keep_l], g.dst[keep_x]].astype(np.int64)
    if not len(src):
        return False
    indeg: dict[int, int] = {}
    out: dict[int, list[int]] = {}
    for a, b in zip(src.tolist(), dst.tolist()):
        out.setdefault(a, []).append(b)
        indeg[b] = indeg.get(b, 0) + 1
        indeg.setdefault(a, 0)
    ready = [v for v, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for w in out.get(v, ()):
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return seen < len(indeg)


@dataclass(frozen=True, eq=False)
class _Lanes:
    """A compiled schedule arranged for the lane-by-lane solver (made once per schedule)."""

    order: np.ndarray       # action ids sorted by (lane, position in lane)
    first: np.ndarray       # per entry of ``order``: the first action of its lane
    bounds: np.ndarray      # lane L's actions are order[bounds[L]:bounds[L + 1]]
    edges: tuple            # per lane: (edge ids of its cross-lane inputs, sorted by target
                            #  position; group starts; their target positions)
    feeds: tuple            # per lane: ((consumer lane, source positions sorted, suffix-min of
                            #  the target positions they feed), ...)
    src: np.ndarray         # cross-lane edges: source action, destination action, graph edge id
    dst: np.ndarray
    eid: np.ndarray
    g: object               # the compiled schedule (``graph.Graph``)


def _lanes(g) -> _Lanes:
    return g.schedule.derived("sim_lanes", lambda s: _build_lanes(g))


def _build_lanes(g) -> _Lanes:
    n, nl = g.n, g.n_lanes
    order = np.lexsort((g.lane_pos, g.lane)) if n else np.zeros(0, np.int64)
    bounds = np.searchsorted(g.lane[order], np.arange(nl + 1)) if n else np.zeros(nl + 1, np.int64)
    first = np.zeros(n, bool)
    first[bounds[:-1][bounds[:-1] < n]] = True
    # only cross-lane edges matter: same-lane order is enforced by the scan itself
    eid = np.flatnonzero(g.lane[g.src] != g.lane[g.dst])
    src, dst = g.src[eid], g.dst[eid]
    dl, sl, tpos, spos = g.lane[dst], g.lane[src], g.lane_pos[dst], g.lane_pos[src]
    o = np.lexsort((tpos, dl))
    eb = np.searchsorted(dl[o], np.arange(nl + 1))
    edges = []
    for L in range(nl):
        e = o[eb[L]:eb[L + 1]]
        tp = tpos[e]
        grp = np.r_[0, np.flatnonzero(np.diff(tp)) + 1] if len(e) else np.zeros(0, np.int64)
        edges.append((e, grp, tp[grp]))
    # who reads whom: per (source lane, consumer lane), the source positions read and, for a change
    # from a position on, the first consumer position that reads it
    o2 = np.lexsort((spos, dl, sl))
    key = sl[o2] * nl + dl[o2]
    cut = np.r_[0, np.flatnonzero(np.diff(key)) + 1, len(o2)] if len(o2) else np.zeros(1, np.int64)
    feeds: list[list] = [[] for _ in range(nl)]
    for a, b in zip(cut[:-1].tolist(), cut[1:].tolist()):
        e = o2[a:b]
        suf = np.minimum.accumulate(tpos[e][::-1])[::-1]
        feeds[int(sl[e[0]])].append((int(dl[e[0]]), spos[e], suf))
    return _Lanes(order, first, bounds, tuple(edges), tuple(tuple(f) for f in feeds), src, dst, eid, g)


def _solve_sweeps(lanes: _Lanes, dur: np.ndarray, lat: np.ndarray, check=None, check_after: int | None = None,
                  init: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(end, ready, sweeps) at the fixpoint, lane by lane (module docstring). ``check`` is called
    once the sweeps pass ``check_after`` (default ``8 × lanes + 64``; an untrusted schedule may
    deadlock: it raises). ``init``: end times to start from instead of zero (a warm start: the
    first sweep re-scans every lane whole from them, and only lanes whose ends change wake the
    lanes they feed; any start reaches the same unique fixpoint of an acyclic schedule)."""
    n, nl = len(dur), len(lanes.bounds) - 1
    end = np.zeros(n) if init is None else np.array(init, dtype=float)
    ready = np.zeros(n)
    if not n:
        return end, ready, 0
    order, bounds = lanes.order, lanes.bounds
    w = lat[lanes.eid]
    src = lanes.src
    run = np.empty(n)                    # per entry of ``order``: the scan's running max
    dc, dprev = (x[order] for x in _lane_cumsum(lanes.g, dur))
    clean = np.iinfo(np.int64).max
    dirty = np.where(np.diff(bounds) > 0, 0, clean)   # first lane position to recompute
    up, down = list(range(nl)), list(range(nl - 1, -1, -1))
    # an untrusted schedule that has not converged after ``check_after`` sweeps gets the
    # validator's Kahn pass (it raises on a deadlock; once passed, the graph is acyclic and the
    # sweeps converge): a valid schedule that converges sooner pays no deadlock search
    sweeps, cap = 0, n + 2
    check_at = 8 * nl + 64 if check_after is None else max(1, int(check_after))
    watcher = active_watcher()  # a caller may stop a long solve between sweeps (``watch``)
    while (dirty < clean).any():
        for L in (up if sweeps % 2 == 0 else down):
            q = int(dirty[L])
            if q == clean:
                continue
            dirty[L] = clean
            a, b = int(bounds[L]), int(bounds[L + 1])
            if q >= b - a:
                continue
            ids = order[a:b]
            e, grp, tgt = lanes.edges[L]
            k = int(np.searchsorted(tgt, q))
            if k < len(tgt):
                g0 = int(grp[k])
                ee = e[g0:]
                ready[ids[tgt[k:]]] = np.maximum.reduceat(end[src[ee]] + w[ee], grp[k:] - g0)
            x = ready[ids[q:]] - dprev[a + q:b]
            if q:
                x[0] = max(x[0], run[a + q - 1])
            np.maximum.accumulate(x, out=run[a + q:b])
            new = dc[a + q:b] + run[a + q:b]
            changed = np.flatnonzero(new != end[ids[q:]])
            if not len(changed):
                continue
            c = q + int(changed[0])
            end[ids[c:]] = new[c - q:]
            for consumer, spos, suf in lanes.feeds[L]:
                j = int(np.searchsorted(spos, c))
                if j < len(spos) and suf[j] < dirty[consumer]:
                    dirty[consumer] = suf[j]
        sweeps += 1
        if watcher is not None:
            watcher(None)
        if (sweeps == check_at and check is not None) or sweeps > cap:
            if check is not None:
                check()
            if sweeps > cap:  # pragma: no cover - cannot happen on an acyclic graph
                raise AssertionError("simulator did not converge on an acyclic schedule")
    return end, ready, sweeps


def _lane_cumsum(g, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per action, the cumulative duration of its lane up to and including it, and excluding it
    (one cumsum over a lanes × steps array, so both solvers read the very same floats)."""
    width = int(g.lane_pos.max()) + 1 if g.n else 1
    flat = g.lane * width + g.lane_pos
    d2 = np.zeros(g.n_lanes * width)
    d2[flat] = dur
    dcum = np.cumsum(d2.reshape(g.n_lanes, width), axis=1).ravel()[flat]
    return dcum, dcum - dur


def _solve_rounds(g, dur: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(end, ready, rounds) by the plain iteration: every lane, every round, until nothing moves.
    The reference ``_solve_sweeps`` must equal bit for bit (tests); not used by ``simulate``."""
    n = g.n
    width = int(g.lane_pos.max()) + 1 if n else 1
    flat = g.lane * width + g.lane_pos
    dc, dprev = _lane_cumsum(g, dur)
    cross = g.lane[g.src] != g.lane[g.dst]
    src, dst = g.src[cross], g.dst[cross]
    o = np.argsort(dst, kind="stable")
    src, dst, w = src[o], dst[o], lat[cross][o]
    grp = np.r_[0, np.flatnonzero(np.diff(dst)) + 1] if len(dst) else np.zeros(0, np.int64)
    x = np.full(g.n_lanes * width, -np.inf)
    end = dc.copy()
    rounds = 0
    while True:
        rounds += 1
        ready = np.zeros(n)
        if len(dst):
            ready[dst[grp]] = np.maximum.reduceat(end[src] + w, grp)
        x[flat] = ready - dprev
        new_end = dc + np.maximum.accumulate(x.reshape(g.n_lanes, width), axis=1).ravel()[flat]
        if np.array_equal(new_end, end) or rounds > n + 2:
            return end, ready, rounds
        end = new_end


def _add_allreduce(tl: Timeline, g, costs: StageCosts) -> None:
    """With data parallelism, each stage's gradient all-reduce (``costmodel.allreduce_lane``)
    goes into ``tl.meta["allreduce"]`` as (rank, stage, start, end); the makespan includes it."""
    if costs.dp <= 1 or not g.n:
        return
    last = np.zeros(costs.num_stages)
    wg = np.array([k.computes_weight_grad for k in g.kinds], bool)[g.kind]
    np.maximum.at(last, g.stage[wg], tl.end[wg])
    lane = allreduce_lane(tl.schedule.placement, last, costs)
    if lane is not None:
        tl.meta["allreduce"] = lane
