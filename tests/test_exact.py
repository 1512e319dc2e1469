"""Exact polish (CP-SAT): never worse, valid, fits the cap, its bound is a true lower bound
(checked against every order of a small problem), and the auto-scheduler's ``exact`` phase."""
import itertools
import math

import pytest

from flexpipe_ui.ir import Action, Plan, Schedule
from flexpipe_ui.kinds import get_kind
from flexpipe_ui.problem import Layer, Problem
from flexpipe_ui.search import auto_search
from flexpipe_ui.search import exact as ex
from flexpipe_ui.sim import simulate
from flexpipe_ui.validate import ScheduleError, validate

pytestmark = pytest.mark.skipif(not ex.available(), reason="ortools not installed (the [exact] extra)")


def _problem(ranks=2, mb=2, layers=None, comm=0.25, limit=None):
    layers = layers or (Layer(f=1.0, b=2.0, w=0.5, act=1.0, mem=1.0), Layer(f=1.5, b=1.0, w=1.0, act=2.0, mem=1.0))
    return Problem(ranks=ranks, microbatches=mb, layers=tuple(layers), comm=comm, memory_limit=limit)


def _all_orders(problem, kinds):
    """Every per-rank order of one stage per rank (stage r on rank r), valid or not."""
    per_rank = []
    for r in range(problem.ranks):
        acts = [Action(r, get_kind(k), m) for m in range(problem.microbatches) for k in kinds]
        per_rank.append(list(itertools.permutations(acts)))
    for rows in itertools.product(*per_rank):
        yield Schedule(problem.ranks, problem.microbatches, tuple(range(problem.ranks)), tuple(rows))


@pytest.mark.parametrize("kinds,mb,limit", [(("F", "B"), 2, None), (("F", "I", "W"), 1, None),
                                            (("F", "B"), 2, 4.5)])
def test_polish_reaches_the_brute_force_optimum_and_its_bound_holds(kinds, mb, limit):
    problem = _problem(mb=mb, limit=limit)
    part = ((0,), (1,))
    best, worst_plan = math.inf, None
    for sched in _all_orders(problem, kinds):
        try:
            validate(sched)
        except ScheduleError:
            continue
        res = simulate(Plan(sched, part), problem)
        if limit is not None and res.metrics.max_peak_memory > limit + 1e-9:
            continue
        best = min(best, res.makespan)
        if worst_plan is None or res.makespan > worst_plan[1]:
            worst_plan = (Plan(sched, part), res.makespan)
    assert math.isfinite(best)
    r = ex.polish(worst_plan[0], problem, time_limit=10)
    assert r.status == "OPTIMAL"
    assert r.makespan == pytest.approx(best, rel=1e-6)
    assert r.bound <= best * (1 + 1e-9) and r.bound >= best * (1 - 1e-3)
    if r.plan is not None:
        validate(r.plan.schedule)
        sim = simulate(r.plan, problem)
        assert sim.makespan == pytest.approx(r.makespan)
        assert limit is None or sim.metrics.max_peak_memory <= limit + 1e-9


def _few_mb(limit=None):
    layers = [Layer(f=0.05, b=0.0, w=0.1, act=0.0, mem=4.0)]
    layers += [Layer(f=1.0, b=1.1, w=0.9, act=1.0, mem=2.0) for _ in range(10)]
    layers.append(Layer(f=2.5, b=2.5, w=2.5, act=3.0, mem=4.0))
    return Problem(ranks=4, microbatches=4, layers=tuple(layers), comm=0.05, memory_limit=limit)


def test_polish_improves_a_greedy_order_and_keeps_the_plan_usable():
    from flexpipe_ui.library import build_named
    problem = _few_mb()
    plan = build_named("zb-v", problem)
    before = simulate(plan, problem).makespan
    r = ex.polish(plan, problem, time_limit=10)
    assert r.plan is not None and r.makespan < before * (1 - 1e-6)
    assert r.bound <= r.makespan + 1e-9
    validate(r.plan.schedule)
    assert r.plan.partition == plan.partition and r.plan.meta.get("exact") is True
    assert simulate(r.plan, problem).makespan == pytest.approx(r.makespan)
    # the plan prints as replayable Python (a hand grid source step)
    assert "hand" in r.plan.to_python() or "from_text" in r.plan.to_python().lower()


def test_polish_respects_a_binding_memory_cap():
    from flexpipe_ui.library import build_named
    free = _few_mb()
    plan = build_named("1f1b", free)
    cap = simulate(plan, free).metrics.max_peak_memory  # 1F1B's own peak: GPipe-like orders exceed it
    problem = _few_mb(limit=cap)
    r = ex.polish(plan, problem, time_limit=10)
    out = r.plan or plan
    assert simulate(out, problem).metrics.max_peak_memory <= cap * (1 + 1e-9)
    unconstrained = ex.polish(plan, free, time_limit=10)
    assert r.makespan >= unconstrained.bound - 1e-9


def test_polish_declines_what_it_cannot_model(monkeypatch):
    from flexpipe_ui.library import build_named
    problem = _few_mb()
    plan = build_named("1f1b", problem)
    monkeypatch.setattr(ex, "EXACT_MAX_ACTIONS", 10)
    r = ex.polish(plan, problem)
    assert r.plan is None and "too large" in r.status
    monkeypatch.setattr(ex, "available", lambda: False)
    r = ex.polish(plan, problem)
    assert r.plan is None and "ortools" in r.status


def test_auto_search_exact_phase_records_runs_and_never_loses():
    problem = _few_mb()
    plain = auto_search(problem)
    res = auto_search(problem, exact=6)
    assert res.makespan <= plain.makespan * (1 + 1e-12)
    runs = res.stats["exact"]
    assert runs and all(run["bound"] <= run["after"] + 1e-9 for run in runs)
    assert all(run["after"] <= run["before"] + 1e-9 for run in runs)
    validate(res.best.schedule)


def test_cli_exact_flag(tmp_path, capsys):
    from flexpipe_ui.cli import main
    from flexpipe_ui.planfile import load_plan
    from flexpipe_ui.problem import save_problem
    save_problem(_few_mb(), tmp_path / "p.json")
    rc = main(["auto", str(tmp_path / "p.json"), "-o", str(tmp_path / "plan.json"), "--exact", "3", "-q"])
    out = capsys.readouterr().out
    assert rc == 0 and "exact order (" in out and "nothing on this structure beats" in out
    validate(load_plan(tmp_path / "plan.json").schedule)
    assert main(["auto", str(tmp_path / "p.json"), "-o", str(tmp_path / "x.json"), "--exact", "-1"]) == 2
    assert "--exact: must be >= 0" in capsys.readouterr().err
