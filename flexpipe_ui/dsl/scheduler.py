"""The actor-aware list scheduler: every rank is an actor that, when idle, runs its best ready action.

Phases of one call (``list_schedule``), each a named function below:

1. ``stage_kinds``: per-stage kind sets from the rules and extra ops;
2. ``actor_plan._prepare``: group-level dependencies (a group is one (stage, kind), every
   microbatch of it) from the kind specs via ``graph.compile_schedule`` on a one-microbatch
   skeleton (so the rules exist once, in ``kinds``/``graph``); durations, message latencies and
   memory effects from ``costmodel`` (the one cost model); each group's priority from its rank's
   rules;
3. ``_run``: an event-driven loop over lanes (a rank's compute stream, or a copy stream): the lane
   with the earliest possible start (``_push``/``_candidates``) picks (``_choose``), among its
   actions ready by then, the best by its rank's rules, and runs it (``_start``), which updates the
   rank's counters and memory and readies the action's users;
4. ``_orders``: each rank's list is its actions in start order.

A caller may watch a long run (``flexpipe_ui.watch``): every ``_TICK`` actions the loop reports
``_lower_bound`` (each lane's free time plus its remaining work), and the watcher may end it.

Timing here only decides the order: the caller times the resulting ``Schedule`` with
``sim.simulate`` (the one simulator), which reproduces these times.

Under a memory cap every kind's memory effect (with the ``adjust`` of co-present kinds) is
counted: a microbatch enters a rank only if its holdings plus the largest single allocation that
can follow fit, and an allocating non-entry action (R, LOAD, a recomputed forward's transient) is
not ready while it would overshoot, so the rank's frees run first. On a rank with a copy stream the
order cannot make a copy wait for a compute free, so the result is simulated and an overshoot
raises ``RulesMemoryError``.

Within one (stage, kind) microbatches run in order (every published schedule does), so a lane
chooses among at most (its stages × kinds) candidate heads, which keeps a decision cheap.
"""
from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..costmodel import fits, memory_effects
from ..ir import Action, Schedule
from ..problem import StageCosts
from ..validate import valid_by_construction
from ..watch import active as active_watcher, tick
from .actor_plan import _Plan, _prepare, memory_need, stage_kinds
from .rules import Rules, RulesError

__all__ = ["list_schedule", "stage_kinds", "memory_effects", "memory_need", "RulesDeadlock",
           "RulesMemoryError"]


class RulesMemoryError(RulesError):
    """The rules' memory cap cannot be kept (copy streams whose timing the order cannot fix)."""


class RulesDeadlock(RulesError):
    """The rules left every rank waiting (only possible with unusual user kinds or overrides)."""


@dataclass(eq=False, slots=True)
class _State:
    """What changes as the actors run."""

    unmet: list          # per (group, microbatch): dependencies not yet scheduled
    jit_left: list       # per (group, microbatch): just-in-time feeders not yet scheduled
    ready: list          # per (group, microbatch): when its dependencies are met
    head: list           # per group: next microbatch
    free: list           # per lane: when it is free
    version: list        # per lane: invalidates its older heap entries
    cached: list         # per lane: its candidates at its last push
    cached_g: list       # per lane: the best of them
    fwd_left: list       # per rank
    inflight: list
    warm: list
    mem: list
    reserved: list
    pending: list        # per rank: heap of (time, memory freed) on another stream
    ran: list            # per rank: (start, lane, group * M + microbatch) of what ran
    last_stage: list     # per lane: the stage it ran last (-1: none yet; ``switch`` cost)
    forced: dict = field(default_factory=dict)   # lane → the only group it may run next (eager W)
    heap: list = field(default_factory=list)


def _initial_state(P: _Plan) -> _State:
    n, M, R = len(P.stage), P.M, P.ranks
    fwd_left = [0] * R
    for g in range(n):
        if P.is_fwd[g]:
            fwd_left[P.rank[g]] += M
    return _State(
        unmet=[len(P.deps[g]) for g in range(n) for _ in range(M)],
        jit_left=[len(P.jit_feeders[g]) for g in range(n) for _ in range(M)],
        ready=[0.0] * (n * M), head=[0] * n, free=[0.0] * P.n_lanes, version=[0] * P.n_lanes,
        cached=[None] * P.n_lanes, cached_g=[-1] * P.n_lanes, fwd_left=fwd_left,
        inflight=[0] * R, warm=[0] * R, mem=P.static[:], reserved=[0.0] * R,
        pending=[[] for _ in range(R)], ran=[[] for _ in range(R)],
        last_stage=[-1] * P.n_lanes)


def _admissible(P: _Plan, st: _State, g: int) -> bool:
    """The rank's rules allow ``g`` now: in-flight and warm-up limits and the memory cap for a
    microbatch entering the rank; forwards first; an allocation that fits."""
    r = P.rank[g]
    if P.is_entry[g]:
        lim_if, lim_wu = P.limits[r]
        if lim_if is not None and st.inflight[r] + P.v_of[r] > lim_if:
            return False
        if lim_wu is not None and st.warm[r] + P.v_of[r] > lim_wu:
            return False
        return fits(st.mem[r] + st.reserved[r] + P.need[r], P.caps[r])
    if P.ffirst[r] and P.is_bwd[g] and st.fwd_left[r]:
        return False
    # would overshoot the cap: the rank's frees (W, B) run first
    return not P.mem_gate[g] or fits(st.mem[r] + st.reserved[r] + P.alloc[g], P.caps[r])


def _candidates(P: _Plan, st: _State, L: int):
    """(earliest start, [(start, key, group)] of the lane's admissible ready heads, the group with
    the smallest (key, group) among those starting earliest); None, [], -1 if none."""
    T0 = st.free[L]
    f = st.forced.get(L)
    M, head, unmet, ready = P.M, st.head, st.unmet, st.ready
    gate, jit, keys, mb_first = P.gate, P.jit_targets, P.key, P.mb_first  # hot loop: locals
    best_t, best = None, None
    cand = []
    for g in ((f,) if f is not None else P.lane_groups[L]):
        m = head[g]
        if m >= M:
            continue
        i = g * M + m
        if unmet[i] or (gate[g] and not _admissible(P, st, g)):
            continue
        t = ready[i]
        if jit[g]:
            t = _jit_ready(P, st, g, m, t)
            if t is None:
                continue
        if t < T0:
            t = T0
        tr, pos = keys[g]
        key = (tr, m, pos) if mb_first[g] else (tr, pos, m)
        cand.append((t, key, g))
        if best_t is None or t < best_t or (t == best_t and (key, g) < best):
            best_t, best = t, (key, g)
    if best is None:
        return None, cand, -1
    return best_t, cand, best[1]


def _jit_ready(P: _Plan, st: _State, g: int, m: int, t: float) -> float | None:
    """A just-in-time group runs once its targets wait for nothing but it: their ready time,
    or None while they still wait for something else."""
    M = P.M
    for tg in P.jit_targets[g]:
        j = tg * M + m
        if st.unmet[j] > st.jit_left[j]:
            return None
        if st.ready[j] > t:
            t = st.ready[j]
    return t


def _push(P: _Plan, st: _State, L: int) -> None:
    """Re-rank lane ``L``: cache its candidates and queue it at its earliest start."""
    st.version[L] += 1
    t, cand, g = _candidates(P, st, L)
    st.cached[L] = cand  # valid until the lane's version changes
    st.cached_g[L] = g
    r = P.lane_rank[L]
    if t is None and st.pending[r]:
        t = max(st.free[L], st.pending[r][0][0])  # a copy-stream free may unblock an entry
    if t is not None:
        heapq.heappush(st.heap, (t, L, st.version[L]))


def _choose(P: _Plan, st: _State, t: float, L: int) -> int | None:
    """The group lane ``L`` runs at ``t``, or None (then the lane was re-queued or has nothing)."""
    r = P.lane_rank[L]
    cand = st.cached[L]
    pend = st.pending[r]
    if pend and pend[0][0] <= t:
        while pend and pend[0][0] <= t:  # frees on another stream that ended by t
            st.mem[r] += heapq.heappop(pend)[1]
        bt, cand, _ = _candidates(P, st, L)
        if bt is None or bt > t:
            _push(P, st, L)
            return None
        g = min((c[1], c[2]) for c in cand if c[0] <= t)[1]
    elif not cand:
        return None
    else:
        g = st.cached_g[L]  # the heap time is the earliest start: the best of those starting then
    if P.fill[g]:
        # a bubble-filling W must not delay work already announced (its inputs are scheduled)
        horizon = t + P.dur[g]
        others = [c for c in cand if not P.fill[c[2]] and c[0] < horizon]
        if others:
            now = [c for c in others if c[0] <= t]
            if not now:
                st.version[L] += 1
                heapq.heappush(st.heap, (min(c[0] for c in others), L, st.version[L]))
                return None
            g = min((c[1], c[2]) for c in now)[1]
    return g


def _start(P: _Plan, st: _State, g: int, t: float, L: int) -> set:
    """Run group ``g``'s next microbatch on lane ``L`` at ``t``; returns the lanes to re-rank."""
    r, M = P.rank[g], P.M
    m = st.head[g]
    st.head[g] = m + 1
    end = t + P.dur[g]
    if P.after_other[g] and st.last_stage[L] not in (-1, P.stage[g]):
        end += P.after_other[g]              # costmodel.switch_time: the lane ran another stage before
    st.last_stage[L] = P.stage[g]
    st.free[L] = end
    st.ran[r].append((t, L, g * M + m, end))
    dirty = {L}
    _rank_counters(P, st, g, r, dirty)
    d = P.net[g]
    if d:
        if d < 0 and (not P.compute_lane[L] or P.multi_lane[r]):
            # freed at its end: another stream of the rank may start meanwhile
            heapq.heappush(st.pending[r], (end, d))
        else:
            st.mem[r] += d
        if d < 0 or P.caps[r] is not None:
            dirty.update(P.lanes_of_rank[r])
    if st.forced:
        st.forced.pop(L, None)
    w = P.eager_w.get(g)
    if w is not None:
        st.forced[L] = w
    for tg in P.jit_targets[g]:
        st.jit_left[tg * M + m] -= 1
    _notify_users(P, st, g, m, end, dirty)
    return dirty


def _rank_counters(P: _Plan, st: _State, g: int, r: int, dirty: set) -> None:
    """Forwards left, in-flight and warm-up slots, reserved memory after ``g`` starts on rank r."""
    if P.is_fwd[g]:
        st.fwd_left[r] -= 1
        if st.fwd_left[r] == 0 and P.ffirst[r]:
            dirty.update(P.lanes_of_rank[r])
        if P.is_entry[g]:
            st.inflight[r] += P.v_of[r]
            st.warm[r] += P.v_of[r]
            st.reserved[r] += P.hold[r] - P.peak_f[P.stage[g]]
        else:
            st.reserved[r] -= P.peak_f[P.stage[g]]
    if P.releases[g]:
        st.inflight[r] -= 1
        dirty.update(P.lanes_of_rank[r])
    if P.releases_wu[g]:
        st.warm[r] -= 1
        dirty.update(P.lanes_of_rank[r])


def _notify_users(P: _Plan, st: _State, g: int, m: int, end: float, dirty: set) -> None:
    """The actions waiting on (g, m): ready at ``end`` + latency; their lanes re-rank when free."""
    M, ready, unmet = P.M, st.ready, st.unmet
    for h, wt in P.users[g]:
        j = h * M + m
        tt = end + wt
        if tt > ready[j]:
            ready[j] = tt
        unmet[j] -= 1
        if not unmet[j]:
            dirty.add(P.lane[h])
        elif P.jit_feeders[h] and unmet[j] == st.jit_left[j]:
            for f in P.jit_feeders[h]:
                dirty.add(P.lane[f])


def _run(P: _Plan, st: _State) -> int:
    """The event loop: the lane with the earliest possible start runs its best action; returns
    how many actions ran. Every ``_TICK`` actions it tells the watcher (``flexpipe_ui.watch``, if
    one is installed) a lower bound on the makespan, so a caller can stop it."""
    for L in range(P.n_lanes):
        if P.lane_groups[L]:
            _push(P, st, L)
    done = 0
    heap, version, pop = st.heap, st.version, heapq.heappop
    watcher = active_watcher()
    while heap:
        t, L, ver = pop(heap)
        if ver != version[L]:
            continue
        g = _choose(P, st, t, L)
        if g is None:
            continue
        done += 1
        for x in _start(P, st, g, t, L):
            _push(P, st, x)
        if watcher is not None and not done % 512:
            # a stop check every 512 actions (a few ms), a lower bound every _TICK
            watcher(_lower_bound(P, st) if not done % _TICK else None)
    return done


_TICK = 2048
"""Actions between two lower bounds reported to the watcher."""


def _lower_bound(P: _Plan, st: _State) -> float:
    """No schedule these actors finish ends before this: each lane still has to run its remaining
    actions one at a time after its last one ends (switch costs only add)."""
    rem = [0.0] * P.n_lanes
    M = P.M
    for g, L in enumerate(P.lane):
        rem[L] += (M - st.head[g]) * P.dur[g]
    return max(f + r for f, r in zip(st.free, rem))


def _issue_order(P: _Plan, row: list) -> list:
    """A rank's actions of several lanes merged into one list. A copy is issued where it stands
    (``graph._issue_edges``: it waits for the compute action before it), so one that started at
    ``t`` goes just after the last compute action that ended by ``t``, copies among themselves
    by start."""
    comp = sorted((x for x in row if P.compute_lane[x[1]]), key=lambda x: x[0])
    ends = [x[3] for x in comp]
    keyed = [((i, 1, x[0]), x) for i, x in enumerate(comp)]
    keyed += [((bisect.bisect_right(ends, x[0]), 0, x[0]), x) for x in row if not P.compute_lane[x[1]]]
    keyed.sort(key=lambda kx: kx[0])
    return [x for _, x in keyed]


def _orders(P: _Plan, st: _State, placement) -> Schedule:
    """Each rank's actions in start order (lanes of one rank merged by time), as a Schedule."""
    M = P.M
    order, starts = [], []
    for r in range(P.ranks):
        if not r % 16:
            tick()
        row = st.ran[r]
        if len(P.lanes_of_rank[r]) > 1:
            row = _issue_order(P, row)
        seq = []
        for _, _, i, _ in row:
            g, m = divmod(i, M)
            seq.append(Action(P.stage[g], P.kind[g], m))
        order.append(tuple(seq))
        starts.append(tuple(x[0] for x in row))
    sched = Schedule(P.ranks, M, tuple(placement), tuple(order))
    sched.derived("list_starts", lambda s: tuple(starts))  # the actors' start times (tests compare with sim)
    # every action ran after its dependencies, in lane order: the actors' times are a feasible
    # execution, so no order or deadlock problem exists (validate and sim skip their scans)
    valid_by_construction(sched)
    return sched


def list_schedule(placement: Sequence[int], ranks: int, microbatches: int, costs: StageCosts,
                  rank_rules: Sequence[Rules], extra: Mapping[str, object] = {},
                  limits: Sequence[tuple[int | None, int | None]] | None = None) -> Schedule:
    """Generate the per-rank orders (see the module docstring for the phases)."""
    kps = stage_kinds(placement, rank_rules, extra)
    P = _prepare(placement, ranks, microbatches, costs, rank_rules, kps,
                 limits if limits is not None else [(None, None)] * ranks)
    st = _initial_state(P)
    if _run(P, st) < len(P.stage) * microbatches:
        raise _deadlock(P, st)
    sched = _orders(P, st, placement)
    if any(P.multi_lane[r] and P.caps[r] is not None for r in range(ranks)):
        _check_streams(sched, costs, P.caps)
    return sched


def _check_streams(sched: Schedule, costs: StageCosts, caps) -> None:
    """On a rank with a copy stream the order cannot make one stream wait for the other's free, so
    the simulator may start an allocation earlier than the actors did: simulate and refuse."""
    from ..sim import simulate
    peaks = simulate(sched, costs).metrics.peak_memory
    over = [(r, pk, caps[r]) for r, pk in enumerate(peaks) if not fits(pk, caps[r])]
    if over:
        r, pk, cap = over[0]
        raise RulesMemoryError(
            f"with copy-stream kinds the schedule simulates to a peak of {pk:g} on rank {r}, above its "
            f"memory cap {cap:g} (a copy cannot be ordered to wait for the compute stream's frees); "
            f"raise the cap, offload fewer stages or use recomputation (extra={{'R': 'all'}})")


def _deadlock(P: _Plan, st: _State) -> RulesDeadlock:
    lines = []
    for groups in P.lane_groups:
        for g in groups:
            m = st.head[g]
            if m >= P.M:
                continue
            a = f"{P.stage[g]}{P.kind[g].name}{m}"
            r = P.rank[g]
            if st.unmet[g * P.M + m]:
                lines.append(f"rank {r}: {a} waits for its dependencies")
            elif not _admissible(P, st, g):
                lines.append(f"rank {r}: {a} is blocked (in flight {st.inflight[r]}, limit "
                             f"{P.limits[r][0]}; warm-up {st.warm[r]}, limit {P.limits[r][1]}; "
                             f"memory {st.mem[r]:g} + reserved {st.reserved[r]:g}, cap {P.caps[r]})")
    shown = "; ".join(lines[:8]) + (f" and {len(lines) - 8} more" if len(lines) > 8 else "")
    return RulesDeadlock(f"the rules cannot finish: every rank is waiting ({shown}); raise the "
                         "in-flight limit or memory cap, or check the user kinds' dependencies")
