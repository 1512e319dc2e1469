"""The auto-scheduler under memory caps: the memory-throughput bound it prunes DSL candidates with is
a true lower bound, and pruning with it keeps the answer."""
import random

import pytest

from flexpipe_ui.dsl import Program, Rules, RulesError, looped, vshape
from flexpipe_ui.ops import register_recompute
from flexpipe_ui.problem import Layer, Problem
from flexpipe_ui.search import auto_search, state
from flexpipe_ui.search import space as sp
from flexpipe_ui.search.bounds import memory_time_bound, time_bounds
from flexpipe_ui.sim import simulate


def _problem(ranks, mb, n, rng, limit=None, comm=0.1):
    return Problem(ranks=ranks, microbatches=mb, comm=comm, memory_limit=limit, layers=tuple(
        Layer(f=rng.uniform(0.5, 2), b=rng.uniform(0.5, 2), w=rng.uniform(0.2, 1.5),
              act=rng.uniform(0.3, 2), mem=rng.uniform(0, 1)) for _ in range(n)))


@pytest.mark.parametrize("ranks,mb", [(2, 12), (3, 12), (4, 16)])
def test_memory_time_bound_is_below_every_fitting_schedule(ranks, mb):
    register_recompute()
    rng = random.Random(ranks * 10 + mb)
    base = _problem(ranks, mb, 2 * ranks, rng)
    binding = 0
    for pl in (looped(1), looped(2), vshape()):
        S = len(pl(ranks))
        for extra in ({}, {"R": "all"}, {"R": (0,)}):
            for rules in (Rules(backward="split", priority=("I", "F", "W"), w_policy="fill"),
                          Rules(priority=("B", "F"), in_flight="v*p"), Rules(priority=("F", "B"))):
                prog = Program(placement=pl, rules=rules, extra=extra)
                free = simulate(prog.plan(problem=base, partition="balanced"), base)
                for frac in (0.3, 0.4, 0.5, 0.75, 1.0):
                    cap = free.metrics.max_peak_memory * frac
                    try:
                        plan = prog.with_(rules=rules.with_(memory_cap=cap)).plan(problem=base,
                                                                                  partition="balanced")
                    except RulesError:
                        continue
                    res = simulate(plan, base)
                    assert res.metrics.max_peak_memory <= cap * (1 + 1e-9)
                    costs = base.stage_costs(plan.partition)
                    where = extra.get("R", ())
                    mt = memory_time_bound(costs, plan.schedule.placement, ranks, mb, cap, where)
                    assert res.makespan >= mt * (1 - 1e-9), (pl, extra, rules, frac)
                    tb = time_bounds(costs, plan.schedule.placement, ranks, mb).time
                    binding += mt > tb
    assert binding > 0  # under tight caps the bound is stronger than the work/chain bound


def test_memory_time_bound_edges():
    rng = random.Random(5)
    p = _problem(2, 4, 4, rng)
    costs = p.stage_costs(((0,), (1,), (2,), (3,)))
    assert memory_time_bound(costs, (0, 1, 1, 0), 2, 4, None) == 0.0
    assert memory_time_bound(costs, (0, 1, 1, 0), 2, 4, 100.0, "all") == 0.0
    assert memory_time_bound(costs, (0, 1, 1, 0), 2, 4, 1e-6) == float("inf")  # static alone overflows
    a = memory_time_bound(costs, (0, 1, 1, 0), 2, 4, 50.0)
    b = memory_time_bound(costs, (0, 1, 1, 0), 2, 4, 50.0, (0, 3))
    assert 0 < b <= a


def test_pruning_by_the_memory_bound_keeps_the_answer(monkeypatch):
    rng = random.Random(11)
    prob = _problem(4, 8, 10, rng)
    free = auto_search(prob, max_evals=40)
    tight = Problem(ranks=4, microbatches=8, comm=prob.comm, layers=prob.layers,
                    memory_limit=free.candidates[0][1].metrics.max_peak_memory * 0.3)
    # the DSL programs' bound is what this measures: leave out the fits of over-cap plans that
    # come after (they would spend the rest of the budget in both searches)
    from flexpipe_ui.search import spend
    monkeypatch.setattr(spend, "spend_memory", lambda *a, **k: None)
    pruned = auto_search(tight, max_evals=120)
    monkeypatch.setattr(state, "memory_time_bound", lambda *a, **k: 0.0)
    plain = auto_search(tight, max_evals=120)
    assert pruned.makespan <= plain.makespan * (1 + 1e-9)
    assert pruned.stats["evaluated"] < plain.stats["evaluated"]
    assert pruned.candidates[0][1].metrics.max_peak_memory <= tight.memory_limit * (1 + 1e-9)


def test_capped_dsl_candidates_never_land_over_memory():
    # with the scheduler's cap counting every kind, repair has no over-cap DSL programs to retry
    from flexpipe_ui.presets import preset
    prob = preset("tight_memory")
    res = auto_search(prob, max_evals=60)
    assert res.candidates[0][1].metrics.max_peak_memory <= prob.memory_limit
    structs = sp.structures(prob, (1, 3))
    for c in sp.recompute_candidates(prob, structs[:2]) + sp.program_candidates(prob, only=structs[:2]):
        try:
            plan = c.build()
        except RulesError:
            continue
        assert simulate(plan, prob).metrics.max_peak_memory <= prob.memory_limit * (1 + 1e-9), c.description


def test_the_search_leaves_no_global_state_behind():
    """The GC stays on, and the recompute kind the search tries under a cap stays registered only
    when a returned plan uses it."""
    import gc

    from flexpipe_ui.kinds import kinds, scoped_kinds, unregister_kind
    rng = random.Random(5)
    prob = _problem(4, 8, 10, rng)
    free = auto_search(prob, max_evals=40)
    with scoped_kinds():
        for frac in (0.3, 0.9):
            unregister_kind("R")
            capped = Problem(ranks=4, microbatches=8, comm=prob.comm, layers=prob.layers,
                             memory_limit=free.candidates[0][1].metrics.max_peak_memory * frac)
            res = auto_search(capped, max_evals=80, top=3)
            used = {a.kind.name for p, _, _ in res.candidates for _, _, a in p.schedule.actions()}
            assert ("R" in kinds()) == ("R" in used) and gc.isenabled()
