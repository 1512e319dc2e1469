"""The simulator — the only one (DESIGN.md, contract 4).

Each lane (a rank's compute stream, or another stream such as a copy engine) runs its actions in
list order, one at a time; an action starts at max(end of the lane's previous action, time its
dependencies are met). How long an action takes and what a dependency between ranks adds
(``comm``, and with the optional terms message size / bandwidth) come from ``costmodel``, as do
the memory rules (through ``timeline.compute_metrics``) and the data-parallel all-reduce lane.

How it is fast: the start times are the least fixpoint of those max-plus equations. Within a lane,
given ready times r_k and durations d_k, the ends are a max-plus prefix scan,
``end_k = D_k + max_{j<=k}(r_j - D_{j-1})`` with D the cumulative durations, one
``np.maximum.accumulate`` over a (lanes × steps) array. Cross-lane dependencies are one gather. We
iterate gather → scan from all-zero ready times; every iterate is a lower bound that rises to the
fixpoint, reached after (cross-lane hops on the critical path + 1) rounds. With positive durations a
deadlock has no fixpoint, so it is caught by a round cap and explained by the validator.
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
             comm: float | None = None, metrics: bool = True) -> SimResult:
    """Simulate a schedule or plan under DESIGN.md's timing and memory rules.

    ``costs`` is a ``StageCosts``, a ``Problem`` (summed over the plan's partition) or None for the
    uniform reference costs (F = I = W = 1 per rank's share). ``comm`` overrides the latency.
    Raises ``ScheduleError`` (naming the actions) for an invalid schedule.
    """
    from .validate import ScheduleError, deadlock_problem, static_problems, validated

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
            raise ScheduleError("invalid schedule", probs, sched)
    g = compile_schedule(sched)
    n = g.n
    dur, lat = action_durations(g, costs)

    # lanes × steps layout for the prefix scan
    width = int(g.lane_pos.max()) + 1 if n else 1
    flat = g.lane * width + g.lane_pos
    d2 = np.zeros(g.n_lanes * width)
    d2[flat] = dur
    dcum = np.cumsum(d2.reshape(g.n_lanes, width), axis=1).ravel()
    dc, dprev = dcum[flat], dcum[flat] - dur
    # only cross-lane edges matter: same-lane order is enforced by the scan itself
    cross = g.lane[g.src] != g.lane[g.dst]
    src, dst = g.src[cross], g.dst[cross]
    o = np.argsort(dst, kind="stable")
    src, dst = src[o], dst[o]
    w = lat[cross][o]
    if len(dst):
        grp = np.r_[0, np.flatnonzero(np.diff(dst)) + 1]
        targets = dst[grp]
    x = np.full(g.n_lanes * width, -np.inf)
    end = dc.copy()
    cap = n + 2
    check_at = 8 * g.n_lanes + 64
    positive = bool(n == 0 or dur.min() > 0)
    rounds = 0
    while True:
        rounds += 1
        ready = np.zeros(n)
        if len(dst):
            ready[targets] = np.maximum.reduceat(end[src] + w, grp)
        x[flat] = ready - dprev
        new_end = dc + np.maximum.accumulate(x.reshape(g.n_lanes, width), axis=1).ravel()[flat]
        if np.array_equal(new_end, end):
            break
        end = new_end
        if (rounds == check_at and not trusted) or rounds > cap:
            d = deadlock_problem(g)
            if d is not None:
                raise ScheduleError("invalid schedule", [d], sched)
            if rounds > cap:  # pragma: no cover - cannot happen on an acyclic graph
                raise AssertionError("simulator did not converge on an acyclic schedule")
    if not positive and not trusted:
        # zero-duration cycles can reach a fixpoint: ask the validator's Kahn pass
        d = deadlock_problem(g)
        if d is not None:
            raise ScheduleError("invalid schedule", [d], sched)
    # start = max(ready, previous end on the lane), from the same converged ends that later
    # actions read: a free at t and an allocation by the action that starts at t then share the
    # exact same float, so memory peaks are not inflated by one-ulp gaps (end - start may differ
    # from the duration by an ulp; with dyadic costs everything is exact)
    prev_end = np.zeros(g.n_lanes * width)
    prev_end[flat] = end
    prev_end = np.concatenate([np.zeros((g.n_lanes, 1)), prev_end.reshape(g.n_lanes, width)[:, :-1]],
                              axis=1).ravel()[flat]
    start = np.maximum(ready, prev_end)
    end = np.maximum(end, start)
    tl = Timeline(sched.ranks, g.actions, g.rank, start, end, "simulated", sched)
    _add_allreduce(tl, g, costs)
    m = compute_metrics(tl, costs) if metrics else None
    return SimResult(tl, m, costs, rounds)


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
