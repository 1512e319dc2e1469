"""What the list scheduler's actors know before they start (``dsl.scheduler``'s phases 1-2).

Groups — one per (stage, kind), every microbatch of it — with their dependencies from a
one-microbatch skeleton compiled by ``graph.compile_schedule`` (so the rules exist once, in
``kinds``/``graph``); durations, message latencies and memory effects from ``costmodel``; each
group's priority from its rank's rules (type rank, then position along the microbatch's pass
and the microbatch, in the order the traversal says); roles (entry forward, releases, just in
time) and lanes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..costmodel import action_durations, stage_memory, switch_charge
from ..graph import compile_schedule
from ..ir import Action, Schedule
from ..kinds import get_kind
from ..problem import StageCosts
from .rules import Rules

__all__ = ["stage_kinds", "memory_need"]

_W_FILL = 10 ** 6  # type priority of a bubble-filling W: after every listed kind


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


def _group_memory(eff: Mapping[str, tuple[float, float]], name: str) -> tuple[float, float, float]:
    """(net change, allocation beyond the microbatch's reservation while it runs, what a forward
    keeps after it ends) of one kind, from its (start, end) memory change (``costmodel.stage_memory``)."""
    ms, me = eff[name]
    run = max(ms, ms + me, 0.0)
    if get_kind(name).is_forward:
        keep = max(ms + me, 0.0)
        return ms + me, run - keep, keep
    return ms + me, run, 0.0


def memory_need(placement: Sequence[int], kinds_per_stage: Sequence[Sequence[str]], costs: StageCosts,
                rank: int, eff=None) -> tuple[float, float, float]:
    """(static memory, activations one microbatch keeps after its forwards, the largest allocation
    one action adds beyond that) on ``rank``: the list scheduler admits a microbatch when
    static + holdings of the admitted ones + the second + the third fit the cap. ``eff``: the
    ``costmodel.stage_memory`` of these kinds and costs, when the caller has it (one per call of
    every rank otherwise)."""
    if eff is None:
        eff = stage_memory(kinds_per_stage, costs)
    static = hold = top = 0.0
    for s, r in enumerate(placement):
        if r != rank:
            continue
        static += float(costs.mem[s])
        for k in kinds_per_stage[s]:
            _, add, keep = _group_memory(eff[s], k)
            hold += keep
            top = max(top, add)
    return static, hold, top


@dataclass(eq=False, slots=True)
class _Plan:
    """What one call knows before it starts: per group (one (stage, kind)), per rank, per lane."""

    M: int
    ranks: int
    limits: Sequence[tuple[int | None, int | None]]
    # per group
    stage: list
    kind: list
    rank: list
    lane: list
    deps: list = field(default_factory=list)      # (group, latency) it waits for
    users: list = field(default_factory=list)     # (group, latency) waiting on it
    dur: list = field(default_factory=list)
    after_other: list = field(default_factory=list)  # added when the lane's previous group ran another stage
    net: list = field(default_factory=list)       # memory change when it runs
    alloc: list = field(default_factory=list)     # what it adds above the rank's memory while it runs
    key: list = field(default_factory=list)       # priority (type rank, pass position); smaller first
    mb_first: list = field(default_factory=list)  # "microbatch" traversal: microbatch before position
    is_fwd: list = field(default_factory=list)
    is_entry: list = field(default_factory=list)  # forward of the rank's first stage: admits a microbatch
    is_bwd: list = field(default_factory=list)
    releases: list = field(default_factory=list)     # frees an in-flight slot (W, B)
    releases_wu: list = field(default_factory=list)  # frees a warm-up slot (I, B)
    fill: list = field(default_factory=list)
    mem_gate: list = field(default_factory=list)
    gate: list = field(default_factory=list)         # needs the admission check
    jit_targets: list = field(default_factory=list)
    jit_feeders: list = field(default_factory=list)
    eager_w: dict = field(default_factory=dict)
    peak_f: list = field(default_factory=list)       # per stage: what its forward keeps
    # per rank
    v_of: list = field(default_factory=list)
    static: list = field(default_factory=list)
    caps: list = field(default_factory=list)
    hold: list = field(default_factory=list)
    need: list = field(default_factory=list)
    ffirst: list = field(default_factory=list)
    lanes_of_rank: list = field(default_factory=list)
    multi_lane: list = field(default_factory=list)
    # per lane
    n_lanes: int = 0
    lane_groups: list = field(default_factory=list)
    lane_rank: list = field(default_factory=list)
    compute_lane: dict = field(default_factory=dict)


def _skeleton(P: _Plan, placement, kinds_per_stage, costs: StageCosts) -> None:
    """Groups, their dependencies and durations from a one-microbatch skeleton schedule."""
    rows = [[] for _ in range(P.ranks)]
    for s, ks in enumerate(kinds_per_stage):
        for k in ks:
            rows[placement[s]].append(Action(s, get_kind(k), 0))
    skel = Schedule(P.ranks, 1, tuple(placement), tuple(tuple(r) for r in rows))
    g = compile_schedule(skel)
    n = g.n
    P.stage, P.rank, P.lane = g.stage.tolist(), g.rank.tolist(), g.lane.tolist()
    P.kind = [g.kinds[k] for k in g.kind.tolist()]
    dur, lat = action_durations(g, costs, ordered=False)
    P.dur = dur.tolist()
    P.after_other = switch_charge(g, costs, dur).tolist()     # costmodel.switch_time, at dispatch
    P.deps = [[] for _ in range(n)]
    P.users = [[] for _ in range(n)]
    k = len(g.src) - g.issued        # the skeleton's list order is no order: only the kinds' edges
    for a, b, w in zip(g.src[:k].tolist(), g.dst[:k].tolist(), lat[:k].tolist()):
        P.deps[b].append((a, w))
        P.users[a].append((b, w))
    P.n_lanes = g.n_lanes


def _memory_plan(P: _Plan, local, kinds_per_stage, costs: StageCosts, rank_rules) -> None:
    """Each group's memory change, allocation and (forwards) holding; each rank's admission need."""
    n, S = len(P.stage), len(kinds_per_stage)
    eff = stage_memory(kinds_per_stage, costs)
    effects = [_group_memory(eff[P.stage[g]], P.kind[g].name) for g in range(n)]
    P.net = [e[0] for e in effects]
    # ``alloc``: what a group adds above the rank's memory while it runs (a forward: beyond what
    # its microbatch reserved at admission, e.g. a recomputed stage's transient; R or LOAD: the
    # activation they re-create); under a cap such a group runs only if that fits
    P.alloc = [e[1] for e in effects]
    P.peak_f = [0.0] * S
    for g in range(n):
        if P.kind[g].is_forward:
            P.peak_f[P.stage[g]] = effects[g][2]
    P.static = [float(sum(costs.mem[s] for s in local[r])) for r in range(P.ranks)]
    P.caps = [rank_rules[r].memory_cap for r in range(P.ranks)]
    P.hold = [sum(P.peak_f[s] for s in local[r]) for r in range(P.ranks)]
    # an entering microbatch must leave room for its holdings plus the largest single allocation
    # that can follow, so the admitted microbatches can always progress one action at a time
    P.need = [P.hold[r] + max([P.alloc[g] for g in range(n) if P.rank[g] == r] + [0.0])
              for r in range(P.ranks)]


def _priorities(P: _Plan, S: int, rank_rules) -> None:
    """Each group's priority key from its rank's rules: (type rank, pass position); the
    microbatch comes last (depth, breadth) or between the two (microbatch traversal)."""
    at = {(P.stage[g], P.kind[g].name): g for g in range(len(P.stage))}
    for g in range(len(P.stage)):
        rr, k, s = rank_rules[P.rank[g]], P.kind[g], P.stage[g]
        tr = (rr.priority.index(k.name) + 1) if k.name in rr.priority else 0
        fill = k.name == "W" and rr.w_policy == "fill"
        if fill:
            tr = _W_FILL
        d = s if k.is_forward else 2 * S - 1 - s  # position along the microbatch's pass
        far_first = 2 * S - d                      # furthest along first
        P.key.append((tr, d if rr.traversal == "breadth" else far_first))
        P.mb_first.append(rr.traversal == "microbatch")
        P.fill.append(fill)
        if k.name == "I" and rr.w_policy == "eager" and (s, "W") in at:
            P.eager_w[g] = at[(s, "W")]


def _roles(P: _Plan, local) -> None:
    """Per-group flags (entry, backward, releases) and just-in-time links (R, LOAD)."""
    n = len(P.stage)
    entry_stage = [min(x) if x else -1 for x in local]
    P.is_fwd = [P.kind[g].is_forward for g in range(n)]
    P.is_entry = [P.is_fwd[g] and P.stage[g] == entry_stage[P.rank[g]] for g in range(n)]
    P.releases = [P.kind[g].computes_weight_grad for g in range(n)]
    P.releases_wu = [P.kind[g].computes_input_grad for g in range(n)]
    P.is_bwd = [P.kind[g].is_backward for g in range(n)]
    # just-in-time kinds (R, reload): a kind that must precede another on the same stage runs only
    # once that other action waits for nothing else, so a recompute lands right before its backward
    at = {(P.stage[g], P.kind[g].name): g for g in range(n)}
    P.jit_targets = [[] for _ in range(n)]
    P.jit_feeders = [[] for _ in range(n)]
    for g in range(n):
        for name in P.kind[g].before:
            t = at.get((P.stage[g], name))
            if t is not None:
                P.jit_targets[g].append(t)
                P.jit_feeders[t].append(g)
                P.is_bwd[g] = True  # belongs to the backward phase (forwards_first holds it back)
    P.mem_gate = [P.caps[P.rank[g]] is not None and P.alloc[g] > 0 for g in range(n)]
    P.gate = [P.is_entry[g] or (P.ffirst[P.rank[g]] and P.is_bwd[g]) or P.mem_gate[g] for g in range(n)]


def _lanes(P: _Plan) -> None:
    P.lane_groups = [[] for _ in range(P.n_lanes)]
    for g in range(len(P.stage)):
        P.lane_groups[P.lane[g]].append(g)
    P.lanes_of_rank = [[] for _ in range(P.ranks)]
    for L in range(P.n_lanes):
        if P.lane_groups[L]:
            P.lanes_of_rank[P.rank[P.lane_groups[L][0]]].append(L)
    P.multi_lane = [len(x) > 1 for x in P.lanes_of_rank]
    P.compute_lane = {L: P.kind[gs[0]].occupies_compute for L, gs in enumerate(P.lane_groups) if gs}
    P.lane_rank = [P.rank[x[0]] if x else -1 for x in P.lane_groups]


def _prepare(placement, ranks, M, costs, rank_rules, kinds_per_stage, limits) -> _Plan:
    """Everything the actors read: groups, costs, memory plan, priorities, roles, lanes."""
    S = len(placement)
    P = _Plan(M=M, ranks=ranks, limits=limits, stage=[], kind=[], rank=[], lane=[])
    _skeleton(P, placement, kinds_per_stage, costs)
    local = [[s for s in range(S) if placement[s] == r] for r in range(ranks)]
    P.v_of = [len(x) for x in local]
    P.ffirst = [rank_rules[r].forwards_first for r in range(ranks)]
    _memory_plan(P, local, kinds_per_stage, costs, rank_rules)
    _priorities(P, S, rank_rules)
    _roles(P, local)
    _lanes(P)
    return P
