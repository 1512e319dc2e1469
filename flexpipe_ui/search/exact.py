"""Exact polish: the best order of a plan's own actions, by constraint programming (optional).

The list scheduler is greedy; with few microbatches its choices leave idle time that a better order
would fill. For a fixed structure — the plan's placement, partition and set of actions — the
best order is a small job-shop problem, and OR-Tools' CP-SAT solver (``pip install ortools``; the
``exact`` extra) solves it, or improves it within a time limit and proves how far from optimal
the result can be. ``available()`` says whether it is installed; nothing else here needs it.

The model is the cost model's (``costmodel``), nothing looser: one interval per action with its
duration (overheads and ``comm_cpu`` occupancy included); the actions of one lane (a rank's compute
stream, or a copy stream) never overlap; every dependency edge of ``graph.compile_schedule`` (so
user kinds' specs too) with its latency when it crosses ranks (``comm``, plus message size over
``bandwidth``); microbatches of one (stage, kind) in order (every published schedule and ours keep
it; it removes symmetric solutions); under a memory cap, each (stage, microbatch)'s activation is
held from its F's start to the end of the actions that free it (W or B; with ``act_w`` partly I),
and a rank's held activations plus its static memory stay within the cap (plans with other
memory-changing kinds are left as they are). Times and memory
are scaled to integers; the solver's order is then timed by ``sim.simulate`` (the one simulator),
and returned only if it is faster there and fits the cap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..costmodel import action_durations, fits, stage_memory
from ..graph import compile_schedule
from ..ir import Plan
from ..problem import Problem
from ..sim import simulate

__all__ = ["available", "ExactResult", "polish", "EXACT_MAX_ACTIONS"]

EXACT_MAX_ACTIONS = 4000
"""Plans with more actions are not modelled (the solver would not improve them in seconds)."""

_TIME_UNITS = 200_000   # the hint's makespan in integer time units (resolution 5e-6 of it)
_MEM_UNITS = 1_000_000  # a rank's activation room (cap - static) in integer memory units


def available() -> bool:
    """True when OR-Tools' CP-SAT is importable."""
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class ExactResult:
    """What one polish did."""

    plan: Plan | None
    """The re-ordered plan when it simulates faster and fits, else None."""
    makespan: float
    """Its simulated makespan (the input's when ``plan`` is None)."""
    bound: float
    """The solver's proven lower bound for this structure (the plan's actions on its placement
    and partition), in the problem's time unit; equal to ``makespan`` when proved optimal."""
    status: str
    """CP-SAT's status (OPTIMAL, FEASIBLE, ...) or why the plan was not modelled."""
    seconds: float

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"


def polish(plan: Plan, problem: Problem, *, time_limit: float = 2.0, seed: int = 0,
           workers: int = 8, deterministic_time: float | None = None,
           interleave: bool = False) -> ExactResult:
    """Re-order ``plan``'s actions optimally (or better, within ``time_limit`` seconds).

    The input's order is the solver's starting hint, so the answer is never worse. ``workers``
    CP-SAT search threads (a portfolio: 8 finds optima several times faster than 1 even on two
    cores) race against the wall clock, so runs can differ; ``interleave=True`` with a
    ``deterministic_time`` budget is reproducible but about four times slower.
    """
    import time
    t0 = time.perf_counter()
    base = simulate(plan, problem)
    if not available():
        return ExactResult(None, base.makespan, 0.0, "ortools not installed", 0.0)
    sched = plan.schedule
    n = sched.num_actions
    if n > EXACT_MAX_ACTIONS:
        return ExactResult(None, base.makespan, 0.0, f"too large ({n} actions > {EXACT_MAX_ACTIONS})", 0.0)
    g = compile_schedule(sched)
    user = sorted(k.name for k in g.kinds if not k.builtin)
    limit = problem.memory_limit
    if limit is not None and user:
        return ExactResult(None, base.makespan, 0.0, f"memory model covers F/I/W/B only, plan has {user}", 0.0)
    if g.missing:
        return ExactResult(None, base.makespan, 0.0, "plan has missing dependencies", 0.0)
    costs = base.costs
    dur, lat = action_durations(g, costs, ordered=False)
    # durations, latency and memory demands rounded down: every real schedule maps onto a feasible
    # integer one, so the solver's bound is a true lower bound; its order is re-timed exactly below
    scale = _TIME_UNITS / max(base.makespan, 1e-300)
    idur = np.maximum(np.floor(dur * scale), 0).astype(np.int64)
    icomm = np.maximum(np.floor(lat * scale), 0).astype(np.int64)  # per dependency edge
    chains = _mb_chains(g)
    hint = _integer_asap(g, idur, icomm, chains)  # the plan's own order, in the model's integers
    deadline = t0 + max(0.05, float(time_limit))
    bound, status, mem_ranks = 0.0, "", set()
    best_plan, best_span = None, base.makespan
    for _ in range(3):  # memory constraints are added lazily, for the ranks that overflowed
        left = deadline - time.perf_counter()
        if left <= 0.02:
            break
        solved = _solve(g, idur, icomm, chains, hint, costs, limit, mem_ranks, left, seed, workers,
                        deterministic_time, interleave)
        status = solved[0]
        if solved[1] is None:
            break
        starts, lb = solved[1], solved[2]
        bound = max(bound, lb / scale)
        new = _reordered(plan, g, starts)
        res = simulate(new, problem)
        over = {r for r, pk in enumerate(res.metrics.peak_memory) if not fits(pk, limit)}
        if not over:
            if res.makespan < best_span * (1 - 1e-9):
                best_plan, best_span = new, res.makespan
            break
        mem_ranks |= over
    bound = min(bound, best_span)
    return ExactResult(best_plan, best_span, bound, status or "not solved", time.perf_counter() - t0)


def _mb_chains(g) -> list[tuple[int, int]]:
    """Microbatch order within each (stage, kind), if the plan keeps it (then it is a valid cut)."""
    by_sk: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i in range(g.n):
        by_sk.setdefault((int(g.stage[i]), int(g.kind[i])), []).append((int(g.mb[i]), i))
    chains = []
    for lst in by_sk.values():
        lst.sort()
        chains += [(a, b) for (_, a), (_, b) in zip(lst, lst[1:])]
    if all(g.pos[a] < g.pos[b] for a, b in chains if g.lane[a] == g.lane[b]):
        return chains
    return []


def _solve(g, idur, icomm, chains, hint, costs, limit, mem_ranks, seconds, seed, workers,
           deterministic_time, interleave):
    """(status, integer starts or None, proven integer lower bound) of one CP-SAT run."""
    from ortools.sat.python import cp_model
    n = g.n
    horizon = int(max(int((hint + idur).max()) if n else 0, 1))
    m = cp_model.CpModel()
    start = [m.NewIntVar(0, horizon, "") for _ in range(n)]
    end = [start[i] + int(idur[i]) for i in range(n)]
    lanes: dict[int, list] = {}
    for i in range(n):
        lanes.setdefault(int(g.lane[i]), []).append(m.NewFixedSizeIntervalVar(start[i], int(idur[i]), ""))
    for group in lanes.values():
        m.AddNoOverlap(group)
    for a, b, lag in zip(g.src.tolist(), g.dst.tolist(), icomm.tolist()):
        m.Add(start[b] >= end[a] + lag)
    for a, b in chains:
        m.Add(start[b] >= end[a])
    if limit is not None and mem_ranks:
        _memory(m, g, start, end, costs, limit, horizon, mem_ranks)
    span = m.NewIntVar(0, horizon, "makespan")
    m.AddMaxEquality(span, end)
    m.Minimize(span)
    for i in range(n):
        m.AddHint(start[i], int(hint[i]))
    m.AddHint(span, horizon)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.02, float(seconds))
    prm.num_workers = max(1, int(workers))
    prm.random_seed = int(seed)
    if deterministic_time is not None:
        prm.max_deterministic_time = float(deterministic_time)
    if interleave:
        prm.interleave_search = True
    st = solver.Solve(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return solver.StatusName(st), None, 0.0
    return (solver.StatusName(st), np.array([solver.Value(x) for x in start], dtype=np.int64),
            float(solver.BestObjectiveBound()))


def _integer_asap(g, idur: np.ndarray, icomm: np.ndarray, chains) -> np.ndarray:
    """Earliest integer starts of the plan's order (lane order + dependencies + chains)."""
    n = g.n
    succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    indeg = np.zeros(n, dtype=np.int64)

    def edge(a: int, b: int, lag: int) -> None:
        succ[a].append((b, lag))
        indeg[b] += 1

    for a, b, lag in zip(g.src.tolist(), g.dst.tolist(), icomm.tolist()):
        edge(a, b, lag)
    for a, b in chains:
        edge(a, b, 0)
    order = np.lexsort((g.lane_pos, g.lane))
    for a, b in zip(order[:-1].tolist(), order[1:].tolist()):
        if g.lane[a] == g.lane[b]:
            edge(a, b, 0)
    t = np.zeros(n, dtype=np.int64)
    stack = [i for i in range(n) if indeg[i] == 0]
    while stack:
        a = stack.pop()
        e = t[a] + idur[a]
        for b, lag in succ[a]:
            if e + lag > t[b]:
                t[b] = e + lag
            indeg[b] -= 1
            if indeg[b] == 0:
                stack.append(b)
    return t


def _memory(m, g, start, end, costs, limit: float, horizon: int, ranks_to_cap) -> None:
    """On ``ranks_to_cap``: static + Σ held activations <= limit; each (stage, microbatch) holds
    what its F allocates from F's start until the end of each action that frees part of it
    (``costmodel.stage_memory``: W or B; with ``act_w`` also I). Demands are rounded down (a
    relaxation, so the bound stays valid); the order found is re-checked by the simulator."""
    kname = [k.name for k in g.kinds]
    holder: dict[tuple[int, int], dict[str, int]] = {}
    for i in range(g.n):
        holder.setdefault((int(g.stage[i]), int(g.mb[i])), {})[kname[int(g.kind[i])]] = i
    ranks = int(g.rank.max()) + 1 if g.n else 0
    static = np.zeros(ranks)
    place = g.schedule.placement
    for s, r in enumerate(place):
        static[r] += costs.mem[s]
    kps = [[] for _ in place]
    for (s, _), acts in holder.items():
        for k in acts:
            if k not in kps[s]:
                kps[s].append(k)
    effects = stage_memory(kps, costs, relaxed=True)
    per_rank: dict[int, tuple[list, list]] = {}
    for (s, mb), acts in holder.items():
        f = acts.get("F")
        r = place[s]
        if f is None or r not in ranks_to_cap or limit - static[r] <= 0:
            continue
        room = limit - static[r]
        for k, i in acts.items():
            freed = -effects[s][k][1]
            if k == "F" or freed <= 0:
                continue
            size = m.NewIntVar(0, horizon, "")
            m.Add(size == end[i] - start[f])
            iv = m.NewIntervalVar(start[f], size, end[i], "")
            per_rank.setdefault(r, ([], []))
            per_rank[r][0].append(iv)
            per_rank[r][1].append(int(math.floor(freed / room * _MEM_UNITS)))
    for r, (ivs, dem) in per_rank.items():
        m.AddCumulative(ivs, dem, _MEM_UNITS)


def _reordered(plan: Plan, g, starts: np.ndarray) -> Plan:
    """The plan with each lane's actions in the solver's start order (ties: the old order)."""
    sched = plan.schedule
    order = []
    for r in range(sched.ranks):
        idx = np.flatnonzero(g.rank == r)
        idx = idx[np.lexsort((g.pos[idx], starts[idx]))]
        order.append(tuple(g.actions[i] for i in idx))
    from ..dsl.hand import hand_plan
    from ..ir import Schedule
    new = Schedule(sched.ranks, sched.microbatches, tuple(sched.placement), tuple(order))
    meta = {**dict(plan.meta), "exact": True}
    return hand_plan(new.to_text(), placement=tuple(sched.placement), microbatches=sched.microbatches,
                     partition=plan.partition, meta=meta)
