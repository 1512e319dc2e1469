"""The auto-scheduler's behaviour at scale: the list scheduler's reported lower bounds are true
bounds, an abandoned build could not have won, the search stays deterministic and within its
bounds, stop() ends it inside a build, progress reports phases and an estimate, and a search keeps
only the plans it may still use. Sizes are small enough for CI; timings live in
benchmarks/bench_scale.py."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from flexpipe_ui.dsl import Program, Rules, looped, vshape, wave
from flexpipe_ui.problem import Layer, Problem
from flexpipe_ui.search import SearchCancelled, auto_search, plan_bound
from flexpipe_ui.search import driver, state
from flexpipe_ui.sim import simulate
from flexpipe_ui.validate import validate
from flexpipe_ui.watch import Abandoned, watching

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_scale import scale_problem  # noqa: E402


def _gpt(ranks=8, mb=32, blocks=24, head=3.0, limit=None):
    layers = [Layer(f=0.05, b=0.0, w=0.1, act=0.0, mem=4.0, name="embedding")]
    layers += [Layer(f=1.0, b=1.1, w=0.9, act=1.0, mem=2.0, name=f"block{k}") for k in range(blocks)]
    layers.append(Layer(f=head, b=head, w=head, act=3.0, mem=4.0, name="lm_head"))
    return Problem(ranks=ranks, microbatches=mb, layers=tuple(layers), comm=0.05, memory_limit=limit)


@pytest.mark.parametrize("prog", [
    Program(placement=vshape(), rules=Rules(backward="split", priority=("I", "F", "W"), memory_cap=60.0)),
    Program(placement=looped(2), rules=Rules(backward="fused", priority=("B", "F"),
                                             in_flight="2*(p-r-1) + (v-1)*p + 1")),
    Program(placement=wave(3), rules=Rules(backward="split", priority=("F", "I", "W"), w_policy="fill")),
])
def test_list_scheduler_reports_true_lower_bounds(prog):
    """Every bound the list scheduler tells a watcher is at most the schedule's simulated makespan,
    and they rise to it (the last is within the last ticks' work of the end)."""
    problem = _gpt(ranks=8, mb=256, limit=60.0)
    seen: list[float] = []
    with watching(lambda b: b is not None and seen.append(b)):
        plan = prog.plan(problem=problem, partition="balanced")
    ms = simulate(plan, problem).makespan
    assert len(seen) >= plan.schedule.num_actions // 2048 >= 2
    assert all(b <= ms * (1 + 1e-12) for b in seen)
    assert seen[-1] > 0.5 * ms


def test_abandoned_builds_could_not_have_won(monkeypatch):
    """Force abandonment on a small problem; build every abandoned candidate in full afterwards:
    none is faster than the bar it was abandoned at, and the result is as good as without it."""
    problem = _gpt(ranks=8, mb=160, limit=70.0)   # builds of thousands of actions: they tick
    bars: list = []
    orig = state.SearchState._evaluate

    def spy(self, c, bar):
        s = orig(self, c, bar)
        if s is not None and s.error.startswith("abandoned"):
            bars.append((c, bar))
        return s

    monkeypatch.setattr(state.SearchState, "_evaluate", spy)
    res = auto_search(problem, abandon=True)
    assert res.stats["abandoned"] == len(bars) > 0
    for c, bar in bars:
        full = simulate(c.build(), problem).makespan
        assert full >= bar * (1 - 1e-9), (c.description, full, bar)
    monkeypatch.undo()
    plain = auto_search(problem, abandon=False)
    assert res.makespan == plain.makespan       # here the same plan, found with fewer full builds
    validate(res.best.schedule)
    assert simulate(res.best, problem).makespan == pytest.approx(res.makespan)


def test_large_search_is_deterministic_bounded_and_never_worse_than_the_library():
    problem = scale_problem(16, 96)
    a = auto_search(problem, seed=3)
    b = auto_search(problem, seed=3)
    assert a.best.schedule.order == b.best.schedule.order and a.best.partition == b.best.partition
    assert a.makespan == b.makespan and a.stats["abandoned"] == b.stats["abandoned"] > 0
    assert a.lower_bound == plan_bound(problem) <= a.makespan
    assert a.makespan <= a.lower_bound * 1.03
    assert a.best_seed is not None and a.makespan <= a.best_seed[1].makespan * (1 + 1e-12)
    validate(a.best.schedule)
    assert simulate(a.best, problem).makespan == a.makespan


def test_a_search_keeps_only_the_plans_it_may_use(monkeypatch):
    kept: dict = {}
    orig = driver.build_result

    def spy(problem, S, top):
        kept["plans"] = sum(1 for s in S.scored if s.plan is not None)
        kept["scored"] = len(S.scored)
        kept["top"] = top
        return orig(problem, S, top)

    monkeypatch.setattr(driver, "build_result", spy)
    res = auto_search(scale_problem(16, 96), top=2)
    assert len(res.candidates) == 2 and all(p is not None for p, _, _ in res.candidates)
    assert kept["scored"] > kept["plans"] and kept["plans"] <= kept["top"] + 3 + 1


def test_stop_ends_the_search_inside_a_build():
    """stop() turning true during a long build is seen at the build's next tick: the search
    returns what it had (or says it was cancelled) without finishing that build."""
    problem = scale_problem(16, 96)
    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        return calls["n"] > 40

    try:
        res = auto_search(problem, stop=stop)
        assert res.stats["stopped"] == "cancelled"
    except SearchCancelled:
        pass
    assert calls["n"] <= 42            # asked again at most once or twice after it said stop


def test_progress_reports_phases_share_and_estimate():
    events = []
    res = auto_search(scale_problem(16, 96), progress=events.append)
    phases = [e.phase for e in events]
    order = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    known = [p for p, _ in state.PHASES]   # events come after evaluations: phases in their order
    assert order[0] == "seeds" and "explore" in order and set(order) <= set(known)
    assert [known.index(p) for p in order if p != "repair"] == sorted(known.index(p) for p in order if p != "repair")
    fr = [e.fraction for e in events]
    assert all(b >= a - 1e-12 for a, b in zip(fr, fr[1:])) and 0 < fr[-1] <= 1
    est = [e.estimate for e in events if e.estimate is not None]
    assert est and all(x >= 0 and math.isfinite(x) for x in est)
    assert events[-1].abandoned == res.stats["abandoned"]


def test_abandon_watcher_raises_only_at_the_bar():
    S = state.SearchState(_gpt(), seed=0, time_limit=None, max_evals=10, max_actions=10 ** 9,
                          progress=None, stop=lambda: False, top=1, abandon=True)
    S.watch(None)
    S._bar = 100.0
    S.watch(99.0)
    with pytest.raises(Abandoned):
        S.watch(100.0)
