"""The actor-aware list scheduler: every rank is an actor that, when idle, runs its best ready action.

Phases of one call: (1) per-stage kind sets from the rules and extra ops; (2) group-level
dependencies from the kind specs via ``graph.compile_schedule`` on a one-microbatch skeleton (so the
rules exist once, in ``kinds``/``graph``); (3) durations from ``sim.duration_table``; (4) an
event-driven loop over lanes (a rank's compute stream, or a copy stream): the lane with the earliest
possible start picks, among its actions ready by then, the best by its rank's rules; (5) each rank's
list is its actions in start order. Timing here only decides the order: the caller times the
resulting ``Schedule`` with ``sim.simulate`` (the one simulator), which reproduces these times.

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

import heapq
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..graph import compile_schedule
from ..ir import Action, Schedule
from ..kinds import get_kind
from ..problem import StageCosts
from ..sim import duration_table
from ..validate import valid_by_construction
from .rules import Rules, RulesError

__all__ = ["list_schedule", "stage_kinds", "memory_effects", "memory_need", "RulesDeadlock",
           "RulesMemoryError"]

_W_FILL = 10 ** 6


class RulesMemoryError(RulesError):
    """The rules' memory cap cannot be kept (copy streams whose timing the order cannot fix)."""


class RulesDeadlock(RulesError):
    """The rules left every rank waiting (only possible with unusual user kinds or overrides)."""


def stage_kinds(placement: Sequence[int], rank_rules: Sequence[Rules],
                extra: Mapping[str, object]) -> list[tuple[str, ...]]:
    """Kind names run on each stage: F, then B or I+W by its rank's rules, then extra ops."""
    S = len(placement)
    out = []
    for s in range(S):
        ks = ["F"] + (["B"] if rank_rules[placement[s]].backward == "fused" else ["I", "W"])
        for name, where in extra.items():
            if where == "all" or s in where:
                ks.append(name)
        out.append(tuple(ks))
    return out


def memory_effects(kinds_per_stage: Sequence[Sequence[str]]) -> list[dict[str, tuple[float, float]]]:
    """Per stage, kind name → (mem_start, mem_end) in units of the stage's activation, with the
    ``adjust`` of the other kinds on that stage applied (recompute makes F free at its end)."""
    out = []
    for ks in kinds_per_stage:
        eff = {k: [get_kind(k).mem_start, get_kind(k).mem_end] for k in ks}
        for k in ks:
            for target, (ds, de) in get_kind(k).adjust.items():
                if target in eff:
                    eff[target][0] += ds
                    eff[target][1] += de
        out.append({k: (a, b) for k, (a, b) in eff.items()})
    return out


def _group_memory(eff: Mapping[str, tuple[float, float]], name: str, act: float) -> tuple[float, float, float]:
    """(net change, allocation beyond the microbatch's reservation while it runs, what a forward
    keeps after it ends) of one kind on a stage with activation ``act``."""
    ms, me = eff[name]
    run = act * max(ms, ms + me, 0.0)
    if get_kind(name).is_forward:
        keep = act * max(ms + me, 0.0)
        return act * (ms + me), run - keep, keep
    return act * (ms + me), run, 0.0


def memory_need(placement: Sequence[int], kinds_per_stage: Sequence[Sequence[str]], costs: StageCosts,
                rank: int) -> tuple[float, float, float]:
    """(static memory, activations one microbatch keeps after its forwards, the largest allocation
    one action adds beyond that) on ``rank``: the list scheduler admits a microbatch when
    static + holdings of the admitted ones + the second + the third fit the cap."""
    eff = memory_effects(kinds_per_stage)
    static = hold = top = 0.0
    for s, r in enumerate(placement):
        if r != rank:
            continue
        static += float(costs.mem[s])
        for k in kinds_per_stage[s]:
            _, add, keep = _group_memory(eff[s], k, float(costs.act[s]))
            hold += keep
            top = max(top, add)
    return static, hold, top


@dataclass(frozen=True, slots=True)
class _Groups:
    """One group per (stage, kind): every microbatch of it."""

    stage: list
    kind: list
    rank: list
    lane: list
    deps: list      # per group: list of (group, weight) it waits for
    users: list     # per group: list of (group, comm weight) waiting on it
    n_lanes: int


def _groups(placement, kinds_per_stage, ranks, comm) -> _Groups:
    # a one-microbatch skeleton: graph.compile_schedule derives the edges from the kind specs
    rows = [[] for _ in range(ranks)]
    gid = []
    for s, ks in enumerate(kinds_per_stage):
        for k in ks:
            rows[placement[s]].append(Action(s, get_kind(k), 0))
    skel = Schedule(ranks, 1, tuple(placement), tuple(tuple(r) for r in rows))
    g = compile_schedule(skel)
    n = g.n
    stage = g.stage.tolist()
    kinds = [g.kinds[k] for k in g.kind.tolist()]
    rank = g.rank.tolist()
    lane = g.lane.tolist()
    deps = [[] for _ in range(n)]
    users = [[] for _ in range(n)]
    for a, b in zip(g.src.tolist(), g.dst.tolist()):
        w = comm if rank[a] != rank[b] else 0.0
        deps[b].append((a, w))
        users[a].append((b, w))
    return _Groups(stage, kinds, rank, lane, deps, users, g.n_lanes)


def list_schedule(placement: Sequence[int], ranks: int, microbatches: int, costs: StageCosts,
                  rank_rules: Sequence[Rules], extra: Mapping[str, object] = {},
                  limits: Sequence[tuple[int | None, int | None]] | None = None) -> Schedule:
    """Generate the per-rank orders (see the module docstring for the phases)."""
    M, S = microbatches, len(placement)
    kps = stage_kinds(placement, rank_rules, extra)
    G = _groups(placement, kps, ranks, float(costs.comm))
    n = len(G.stage)
    g_rank, g_lane, g_users, g_stage = G.rank, G.lane, G.users, G.stage  # hot-loop locals
    dur = duration_table(tuple(dict.fromkeys(G.kind)), costs)
    kid = {k.name: i for i, k in enumerate(dict.fromkeys(G.kind))}
    gdur = [float(dur[kid[G.kind[g].name], g_stage[g]]) for g in range(n)]
    act = [float(a) for a in costs.act]
    local = [[s for s in range(S) if placement[s] == r] for r in range(ranks)]
    v_of = [len(x) for x in local]
    if limits is None:
        limits = [(None, None)] * ranks
    lim_if = [x[0] for x in limits]
    lim_wu = [x[1] for x in limits]

    # memory effect of each group (units of its stage's act), adjusts of co-present kinds applied
    names = [G.kind[g].name for g in range(n)]
    at = {(g_stage[g], names[g]): g for g in range(n)}
    eff = memory_effects(kps)
    effects = [_group_memory(eff[g_stage[g]], names[g], act[g_stage[g]]) for g in range(n)]
    net = [e[0] for e in effects]
    # ``alloc``: what a group adds above the rank's memory while it runs (a forward: beyond what
    # its microbatch reserved at admission, e.g. a recomputed stage's transient; R or LOAD: the
    # activation they re-create); under a cap such a group runs only if that fits
    alloc = [e[1] for e in effects]
    peak_f = [0.0] * S
    for g in range(n):
        if G.kind[g].is_forward:
            peak_f[g_stage[g]] = effects[g][2]
    static = [float(sum(costs.mem[s] for s in local[r])) for r in range(ranks)]
    caps = [rank_rules[r].memory_cap for r in range(ranks)]
    hold = [sum(peak_f[s] for s in local[r]) for r in range(ranks)]
    # an entering microbatch must leave room for its holdings plus the largest single allocation
    # that can follow, so the admitted microbatches can always progress one action at a time
    need = [hold[r] + max([alloc[g] for g in range(n) if g_rank[g] == r] + [0.0]) for r in range(ranks)]

    # per-group scheduling attributes
    entry_stage = [min(x) if x else -1 for x in local]
    is_fwd = [G.kind[g].is_forward for g in range(n)]
    is_entry = [is_fwd[g] and g_stage[g] == entry_stage[g_rank[g]] for g in range(n)]
    releases = [G.kind[g].computes_weight_grad for g in range(n)]
    releases_wu = [G.kind[g].computes_input_grad for g in range(n)]
    is_bwd = [G.kind[g].is_backward for g in range(n)]
    # just-in-time kinds (R, reload): a kind that must precede another on the same stage runs only
    # once that other action waits for nothing else, so a recompute lands right before its backward
    jit_targets: list[list[int]] = [[] for _ in range(n)]
    jit_feeders: list[list[int]] = [[] for _ in range(n)]
    for g in range(n):
        for name in G.kind[g].before:
            t = at.get((g_stage[g], name))
            if t is not None:
                jit_targets[g].append(t)
                jit_feeders[t].append(g)
                is_bwd[g] = True  # belongs to the backward phase (forwards_first holds it back)
    eager_w = {}
    keybase, kmul = [0] * n, [1] * n
    fill = [False] * n
    S2 = 2 * S + 1
    for g in range(n):
        rr = rank_rules[g_rank[g]]
        k = G.kind[g]
        pr = rr.priority
        tr = (pr.index(k.name) + 1) if k.name in pr else 0
        if k.name == "W" and rr.w_policy == "fill":
            tr = _W_FILL
            fill[g] = True
        s = g_stage[g]
        d = s if k.is_forward else 2 * S - 1 - s
        if rr.traversal == "depth":
            keybase[g], kmul[g] = (tr * S2 + (S2 - 1 - d)) * (M + 1), 1
        elif rr.traversal == "breadth":
            keybase[g], kmul[g] = (tr * S2 + d) * (M + 1), 1
        else:
            keybase[g], kmul[g] = tr * (M + 1) * S2 + (S2 - 1 - d), S2
        if k.name == "I" and rr.w_policy == "eager":
            w = at.get((s, "W"))
            if w is not None:
                eager_w[g] = w
    fwd_left = [0] * ranks
    for g in range(n):
        if is_fwd[g]:
            fwd_left[g_rank[g]] += M
    ffirst = [rank_rules[r].forwards_first for r in range(ranks)]

    lane_groups = [[] for _ in range(G.n_lanes)]
    for g in range(n):
        lane_groups[g_lane[g]].append(g)
    lanes_of_rank = [[] for _ in range(ranks)]
    for L in range(G.n_lanes):
        if lane_groups[L]:
            lanes_of_rank[g_rank[lane_groups[L][0]]].append(L)
    multi_lane = [len(x) > 1 for x in lanes_of_rank]
    compute_lane = {L: G.kind[lane_groups[L][0]].occupies_compute for L in range(G.n_lanes) if lane_groups[L]}

    # state
    unmet = [len(G.deps[g]) for g in range(n) for _ in range(M)]
    jit_left = [len(jit_feeders[g]) for g in range(n) for _ in range(M)]
    ready = [0.0] * (n * M)
    head = [0] * n
    free = [0.0] * G.n_lanes
    inflight = [0] * ranks
    warm = [0] * ranks
    mem = static[:]
    reserved = [0.0] * ranks
    pending: list[list[tuple[float, float]]] = [[] for _ in range(ranks)]
    forced: dict[int, int] = {}
    out: list[list[tuple[float, int, int]]] = [[] for _ in range(ranks)]
    version = [0] * G.n_lanes
    heap: list[tuple[float, int, int]] = []

    def admissible(g: int) -> bool:
        r = g_rank[g]
        if is_entry[g]:
            lim = lim_if[r]
            if lim is not None and inflight[r] + v_of[r] > lim:
                return False
            lim = lim_wu[r]
            if lim is not None and warm[r] + v_of[r] > lim:
                return False
            cap = caps[r]
            if cap is not None and mem[r] + reserved[r] + need[r] > cap + 1e-9:
                return False
            return True
        if ffirst[r] and is_bwd[g] and fwd_left[r]:
            return False
        if mem_gate[g] and mem[r] + reserved[r] + alloc[g] > caps[r] + 1e-9:
            return False  # would overshoot the cap: the rank's frees (W, B) run first
        return True

    def candidates(L: int):
        """(earliest start, [(start, key, group)] of the lane's admissible ready heads, the
        group with the smallest (key, group) among those starting earliest); None, [], -1 if none."""
        T0 = free[L]
        f = forced.get(L)
        groups = (f,) if f is not None else lane_groups[L]
        best_t = None
        best_k = best_g = -1
        cand = []
        for g in groups:
            m = head[g]
            if m >= M:
                continue
            i = g * M + m
            if unmet[i] or (gate[g] and not admissible(g)):
                continue
            t = ready[i]
            if jit_targets[g]:
                blocked = False
                for tg in jit_targets[g]:
                    j = tg * M + m
                    if unmet[j] > jit_left[j]:
                        blocked = True
                        break
                    if ready[j] > t:
                        t = ready[j]
                if blocked:
                    continue
            if t < T0:
                t = T0
            key = keybase[g] + m * kmul[g]
            cand.append((t, key, g))
            if best_t is None or t < best_t or (t == best_t and (key < best_k or (key == best_k and g < best_g))):
                best_t, best_k, best_g = t, key, g
        return best_t, cand, best_g

    mem_gate = [caps[g_rank[g]] is not None and alloc[g] > 0 for g in range(n)]
    gate = [is_entry[g] or (ffirst[g_rank[g]] and is_bwd[g]) or mem_gate[g] for g in range(n)]
    cached: list = [None] * G.n_lanes
    cached_g: list = [-1] * G.n_lanes
    lane_rank = [g_rank[x[0]] if x else -1 for x in lane_groups]

    def push(L: int) -> None:
        version[L] += 1
        t, cand, g = candidates(L)
        cached[L] = cand  # valid until the lane's version changes
        cached_g[L] = g
        r = lane_rank[L]
        if t is None and pending[r]:
            t = max(free[L], pending[r][0][0])  # a copy-stream free may unblock an entry
        if t is not None:
            heapq.heappush(heap, (t, L, version[L]))

    for L in range(G.n_lanes):
        if lane_groups[L]:
            push(L)
    done, total = 0, n * M
    while heap:
        t, L, ver = heapq.heappop(heap)
        if ver != version[L]:
            continue
        r = lane_rank[L]
        cand = cached[L]
        pend = pending[r]
        if pend and pend[0][0] <= t:
            while pend and pend[0][0] <= t:
                mem[r] += heapq.heappop(pend)[1]
            bt, cand, _ = candidates(L)
            if bt is None or bt > t:
                push(L)
                continue
            g = min((c[1], c[2]) for c in cand if c[0] <= t)[1]
        elif not cand:
            continue
        else:
            g = cached_g[L]  # the heap time is the earliest start: the best of those starting then
        if fill[g]:
            # a bubble-filling W must not delay work already announced (its inputs are scheduled)
            horizon = t + gdur[g]
            others = [c for c in cand if not fill[c[2]] and c[0] < horizon]
            if others:
                now = [c for c in others if c[0] <= t]
                if not now:
                    version[L] += 1
                    heapq.heappush(heap, (min(c[0] for c in others), L, version[L]))
                    continue
                g = min((c[1], c[2]) for c in now)[1]
        m = head[g]
        head[g] = m + 1
        end = t + gdur[g]
        free[L] = end
        out[r].append((t, L, g * M + m))
        done += 1
        dirty = {L}
        # rank state: forwards left, in-flight slots, memory
        if is_fwd[g]:
            fwd_left[r] -= 1
            if fwd_left[r] == 0 and ffirst[r]:
                dirty.update(lanes_of_rank[r])
            if is_entry[g]:
                inflight[r] += v_of[r]
                warm[r] += v_of[r]
                reserved[r] += hold[r] - peak_f[g_stage[g]]
            else:
                reserved[r] -= peak_f[g_stage[g]]
        if releases[g]:
            inflight[r] -= 1
            dirty.update(lanes_of_rank[r])
        if releases_wu[g]:
            warm[r] -= 1
            dirty.update(lanes_of_rank[r])
        d = net[g]
        if d:
            if d < 0 and (not compute_lane[L] or multi_lane[r]):
                # freed at its end: another stream of the rank may start meanwhile
                heapq.heappush(pending[r], (end, d))
            else:
                mem[r] += d
            if d < 0 or caps[r] is not None:
                dirty.update(lanes_of_rank[r])
        if L in forced:
            del forced[L]
        w = eager_w.get(g)
        if w is not None:
            forced[L] = w
        if jit_targets[g]:
            for tg in jit_targets[g]:
                jit_left[tg * M + m] -= 1
        for h, wt in g_users[g]:
            j = h * M + m
            tt = end + wt
            if tt > ready[j]:
                ready[j] = tt
            unmet[j] -= 1
            if not unmet[j]:
                dirty.add(g_lane[h])
            elif jit_feeders[h] and unmet[j] == jit_left[j]:
                for f in jit_feeders[h]:
                    dirty.add(g_lane[f])
        for x in dirty:
            push(x)
    if done < total:
        raise _deadlock(G, head, M, unmet, limits, inflight, warm, caps, mem, reserved, lane_groups,
                        admissible)
    order, starts = [], []
    for r in range(ranks):
        row = out[r]
        if len(lanes_of_rank[r]) > 1:
            row.sort(key=lambda x: (x[0], x[1]))
        seq = []
        for _, _, i in row:
            g, m = divmod(i, M)
            seq.append(Action(G.stage[g], G.kind[g], m))
        order.append(tuple(seq))
        starts.append(tuple(x[0] for x in row))
    sched = Schedule(ranks, M, tuple(placement), tuple(order))
    sched.derived("list_starts", lambda s: tuple(starts))  # the actors' start times (tests compare with sim)
    # every action ran after its dependencies, in lane order: the actors' times are a feasible
    # execution, so no order or deadlock problem exists (validate and sim skip their scans)
    valid_by_construction(sched)
    if any(multi_lane[r] and caps[r] is not None for r in range(ranks)):
        _check_streams(sched, costs, caps)
    return sched


def _check_streams(sched: Schedule, costs: StageCosts, caps) -> None:
    """On a rank with a copy stream the order cannot make one stream wait for the other's free, so
    the simulator may start an allocation earlier than the actors did: simulate and refuse."""
    from ..sim import simulate
    peaks = simulate(sched, costs).metrics.peak_memory
    over = [(r, pk, caps[r]) for r, pk in enumerate(peaks) if caps[r] is not None and pk > caps[r] * (1 + 1e-9)]
    if over:
        r, pk, cap = over[0]
        raise RulesMemoryError(
            f"with copy-stream kinds the schedule simulates to a peak of {pk:g} on rank {r}, above its "
            f"memory cap {cap:g} (a copy cannot be ordered to wait for the compute stream's frees); "
            f"raise the cap, offload fewer stages or use recomputation (extra={{'R': 'all'}})")


def _deadlock(G, head, M, unmet, limits, inflight, warm, caps, mem, reserved, lane_groups, admissible):
    lines = []
    for L, groups in enumerate(lane_groups):
        for g in groups:
            m = head[g]
            if m >= M:
                continue
            a = f"{G.stage[g]}{G.kind[g].name}{m}"
            r = G.rank[g]
            if unmet[g * M + m]:
                lines.append(f"rank {r}: {a} waits for its dependencies")
            elif not admissible(g):
                lines.append(f"rank {r}: {a} is blocked (in flight {inflight[r]}, limit {limits[r][0]}; "
                             f"warm-up {warm[r]}, limit {limits[r][1]}; "
                             f"memory {mem[r]:g} + reserved {reserved[r]:g}, cap {caps[r]})")
    shown = "; ".join(lines[:8]) + (f" and {len(lines) - 8} more" if len(lines) > 8 else "")
    return RulesDeadlock(f"the rules cannot finish: every rank is waiting ({shown}); raise the "
                         "in-flight limit or memory cap, or check the user kinds' dependencies")
