"""The simulator's lane-by-lane solver (``sim._solve_sweeps``) against the plain iteration over every
lane (``sim._solve_rounds``): the same equations, so the same fixpoint bit for bit, on library
schedules, DSL programs (memory caps, recompute), copy streams, comm, message sizes, overheads and
stage switches; and it needs far fewer passes over the schedule."""
from __future__ import annotations

import numpy as np
import pytest

from flexpipe_ui import Dep, Kind, Layer, Plan, Problem, Schedule, register_kind, simulate, unregister_kind
from flexpipe_ui import sim
from flexpipe_ui.costmodel import action_durations
from flexpipe_ui.graph import compile_schedule
from flexpipe_ui.library import NAMED, build_named
from flexpipe_ui.presets import preset


def _both(plan, problem=None):
    sched = plan.schedule if isinstance(plan, Plan) else plan
    costs = sim.costs_for(plan, problem)
    g = compile_schedule(sched)
    dur, lat = action_durations(g, costs)
    return sim._solve_sweeps(sim._lanes(g), dur, lat), sim._solve_rounds(g, dur, lat)


def _assert_same(plan, problem=None):
    (e1, r1, sweeps), (e2, r2, rounds) = _both(plan, problem)
    assert np.array_equal(e1, e2) and np.array_equal(r1, r2)
    assert sweeps <= rounds + 1
    return sweeps, rounds


def _random_problem(p: int, m: int, layers: int, seed: int, **terms) -> Problem:
    rng = np.random.default_rng(seed)
    ls = tuple(Layer(f=float(rng.uniform(0.2, 2)), b=float(rng.uniform(0.2, 2)), w=float(rng.uniform(0.05, 1)),
                     act=float(rng.uniform(0.5, 2)), mem=float(rng.uniform(0, 3)),
                     out=float(rng.uniform(1, 4)), switch=float(rng.uniform(0, 0.1)))
               for _ in range(layers))
    return Problem(ranks=p, microbatches=m, layers=ls, comm=float(rng.uniform(0, 0.4)), **terms)


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("p,m", [(2, 3), (4, 8), (8, 32), (5, 11)])
def test_library_schedules_same_fixpoint(name, p, m):
    problem = _random_problem(p, m, 4 * p, seed=p * 31 + m)
    try:
        plan = build_named(name, problem)
    except ValueError:
        pytest.skip(f"{name} does not take {p} ranks x {m} microbatches")
    _assert_same(plan, problem)


@pytest.mark.parametrize("terms", [{}, {"bandwidth": 3.0}, {"overhead": 0.05, "bandwidth": 2.0, "comm_cpu": 0.5},
                                   {"data_input": True, "overhead": {"F": 0.1, "W": 0.02}}])
def test_cost_terms_same_fixpoint(terms):
    problem = _random_problem(6, 24, 24, seed=7, **terms)
    for name in ("zb-v", "interleaved-1f1b", "dualpipe-v", "1f1b"):
        _assert_same(build_named(name, problem), problem)


def test_dsl_programs_same_fixpoint_and_far_fewer_passes():
    from flexpipe_ui.dsl import Program, Rules, vshape, wave
    from flexpipe_ui.kinds import scoped_kinds
    from flexpipe_ui.ops import register_recompute
    problem = preset("gpt", ranks=16, microbatches=64)
    with scoped_kinds():
        register_recompute()
        _check_programs(problem, [
            Program(placement=vshape(), rules=Rules(backward="split", priority=("I", "F", "W"), w_policy="priority",
                                                    memory_cap=problem.memory_limit)),
            Program(placement=wave(2), rules=Rules(backward="fused", priority=("B", "F"), in_flight="v*p")),
            Program(placement=vshape(), rules=Rules(backward="split", priority=("I", "F", "W")),
                    extra={"R": "all"})])


def _check_programs(problem, progs):
    for prog in progs:
        plan = prog.plan(problem=problem, partition="balanced")
        sweeps, rounds = _assert_same(plan, problem)
        res = simulate(plan, problem)
        assert res.rounds == sweeps
        assert sweeps < rounds   # fewer passes than the plain iteration's rounds


def test_copy_stream_same_fixpoint():
    O = Kind("OZZ", "other", lambda c: 0.7 * c.f, after=(Dep(frozenset({"F"})),), stream="copy")
    register_kind(O)
    try:
        rows = []
        p, m = 3, 6
        from oracles import onef1b
        base = onef1b(p, m)
        for r, row in enumerate(base.order):
            out = []
            for a in row:
                out.append(str(a))
                if a.kind.name == "F":
                    out.append(f"{a.stage}OZZ{a.microbatch}")
            rows.append(out)
        s = Schedule.from_rows(rows, placement=base.placement)
        _assert_same(s)
    finally:
        unregister_kind("OZZ")


def test_empty_lanes_and_single_rank():
    _assert_same(Schedule.from_text("r0: 0F0 0B0 0F1 0B1"))
    res = simulate(Schedule.from_text("r0: 0F0 0I0 0W0"))
    assert res.makespan == 3.0
