"""Auto-scheduler on small scenarios: never worse than the seeds, fits memory, deterministic,
progress/cancel, top-K, plan meta, CLI and a profiler-style problem file."""
import json
import math
import random
import threading

import pytest

from flexpipe_ui.ir import Plan
from flexpipe_ui.planfile import load_plan
from flexpipe_ui.problem import Layer, Problem, save_problem
from flexpipe_ui.search import (NoFeasiblePlan, SearchCancelled, auto, auto_search, packing_makespan,
                                time_bounds)
from flexpipe_ui.search import space as sp
from flexpipe_ui.search.evaluate import stage_inflight
from flexpipe_ui.sim import simulate
from flexpipe_ui.validate import validate


def _gpt_like(ranks=4, mb=8, blocks=8, head=3.0, limit=None, comm=0.05):
    layers = [Layer(f=0.05, b=0.0, w=0.1, act=0.0, mem=4.0, name="embedding")]
    layers += [Layer(f=1.0, b=1.1, w=0.9, act=1.0, mem=2.0, name=f"block{k}") for k in range(blocks)]
    layers.append(Layer(f=head, b=head, w=head, act=3.0, mem=4.0, name="lm_head"))
    return Problem(ranks=ranks, microbatches=mb, layers=tuple(layers), comm=comm, memory_limit=limit)


def _uniform(ranks=4, mb=8, n=8):
    return Problem(ranks=ranks, microbatches=mb, layers=tuple(Layer(f=1, b=1, w=1, act=1) for _ in range(n)))


SMALL = dict(max_evals=60)


def _seed_scores(problem):
    """Every seed candidate simulated independently of the search (the library schedules)."""
    out = []
    for c in sp.seed_candidates(problem):
        try:
            plan = c.build()
            res = simulate(plan, problem)
        except ValueError:
            continue
        if problem.memory_limit is None or res.metrics.max_peak_memory <= problem.memory_limit + 1e-9:
            out.append((res.makespan, c.description))
    return out


@pytest.mark.parametrize("make", [lambda: _uniform(), lambda: _gpt_like(), lambda: _gpt_like(mb=4),
                                  lambda: _gpt_like(ranks=2, mb=6, comm=0.5)])
def test_never_worse_than_the_best_seed_and_valid(make):
    problem = make()
    res = auto_search(problem)
    plan = res.best
    validate(plan.schedule)
    sim = simulate(plan, problem)
    assert sim.makespan == pytest.approx(res.makespan)
    seeds = _seed_scores(problem)
    assert seeds, "the library seeds must exist (flexpipe_ui.library)"
    assert res.makespan <= min(m for m, _ in seeds) * (1 + 1e-9)
    assert res.makespan >= res.lower_bound * (1 - 1e-9)
    assert plan.partition is not None and sum(map(len, plan.partition)) == problem.num_layers


def test_heterogeneous_model_beats_even_split_1f1b():
    from flexpipe_ui.library import build_named
    problem = _gpt_like(head=4.0)
    megatron = simulate(build_named("1f1b", problem), problem).makespan
    assert auto(problem).meta["search"]["makespan"] < megatron / 1.2


@pytest.mark.parametrize("fraction", [0.9, 0.7])
def test_fits_memory(fraction):
    base = _gpt_like(mb=8)
    free = auto_search(base)
    cap = fraction * free.candidates[0][1].metrics.max_peak_memory
    problem = base.with_(memory_limit=cap)
    res = auto_search(problem, top=3)
    for plan, sim, _ in res.candidates:
        again = simulate(plan, problem)
        assert max(again.metrics.peak_memory) <= cap * (1 + 1e-9)
    assert res.makespan >= free.makespan * (1 - 1e-9)  # a cap never helps


def test_nothing_fits_says_the_smallest_peak():
    problem = _gpt_like(limit=5.0)
    with pytest.raises(NoFeasiblePlan) as ei:
        auto(problem, **SMALL)
    e = ei.value
    assert isinstance(e, ValueError) and e.memory_limit == 5.0
    assert math.isfinite(e.smallest_peak) and e.smallest_peak > 5.0
    text = str(e)
    assert "memory_limit=5" in text and f"{e.smallest_peak:.6g}" in text
    assert "recompute" in text and "more ranks" in text


def test_deterministic_for_a_seed():
    problem = _gpt_like()
    a, b = auto(problem, seed=3), auto(problem, seed=3)
    assert a.schedule.to_text() == b.schedule.to_text() and a.partition == b.partition
    assert a.meta["candidate"] == b.meta["candidate"]


def test_progress_events_and_cancel():
    problem = _gpt_like(mb=4)  # few microbatches: dozens of candidates survive the bounds
    events = []
    auto(problem, progress=events.append, **SMALL)
    assert events and [e.evaluated for e in events] == list(range(1, len(events) + 1))
    bests = [e.best_makespan for e in events]
    assert all(x >= y for x, y in zip(bests, bests[1:]))
    assert all(e.total == 60 and e.elapsed >= 0 for e in events)
    assert isinstance(events[-1].best_plan, Plan)

    cancel = threading.Event()
    seen = []

    def stop_after_five(ev):
        seen.append(ev)
        if len(seen) == 5:
            cancel.set()

    res = auto_search(problem, progress=stop_after_five, stop=cancel.is_set)
    assert res.stats["stopped"] == "cancelled" and res.stats["evaluated"] == 5
    with pytest.raises(SearchCancelled):
        auto_search(problem, stop=lambda: True)


def test_top_k_meta_and_plan_file(tmp_path):
    problem = _gpt_like()
    res = auto_search(problem, top=4)
    spans = [s.makespan for _, s, _ in res.candidates]
    assert spans == sorted(spans) and len(res.candidates) == 4
    assert len({d for _, _, d in res.candidates}) == 4 or len({p.schedule.to_text() for p, _, _ in res.candidates}) == 4
    best = res.best
    assert best.meta["name"] == "auto" and best.meta["candidate"] == res.candidates[0][2]
    st = best.meta["search"]
    assert st["evaluated"] >= 1 and st["makespan"] == pytest.approx(res.makespan)
    assert st["lower_bound"] == pytest.approx(res.lower_bound)
    from flexpipe_ui.planfile import save_plan
    save_plan(best, tmp_path / "p.json")
    back = load_plan(tmp_path / "p.json")
    assert back.partition == best.partition and back.meta["name"] == "auto"
    assert simulate(back, problem).makespan == pytest.approx(res.makespan)


def test_bounds_are_lower_bounds_of_simulated_candidates():
    rng = random.Random(0)
    for problem in (_gpt_like(), _uniform(ranks=3, mb=5, n=9), _gpt_like(ranks=2, mb=3, comm=1.0)):
        cands = sp.seed_candidates(problem) + sp.program_candidates(problem)
        for c in rng.sample(cands, min(12, len(cands))):
            sc = problem.stage_costs(c.partition)
            b = time_bounds(sc, c.placement, problem.ranks, problem.microbatches)
            try:
                res = simulate(c.build(), problem)
            except ValueError:
                continue
            assert res.makespan >= b.time * (1 - 1e-9), c.description
            assert res.makespan >= packing_makespan(problem) * (1 - 1e-9), c.description
            assert res.metrics.max_peak_memory >= b.memory * (1 - 1e-9) - 1e-9, c.description


def _random_problem(rng, ranks, mb, n):
    layers = tuple(Layer(f=rng.uniform(0.1, 3), b=rng.uniform(0.1, 3), w=rng.uniform(0.0, 2),
                         act=1.0) for _ in range(n))
    return Problem(ranks=ranks, microbatches=mb, layers=layers, comm=rng.choice([0.0, 0.3, 2.0]))


def test_release_bound_is_a_lower_bound_on_every_candidate_kind():
    """Random costs, comm and few microbatches (where ``release`` binds): every library schedule
    and DSL program simulates to at least its bound, and the bound is never below ``work``."""
    rng = random.Random(1)
    tight = 0
    for trial in range(6):
        ranks = rng.choice([2, 3, 4])
        problem = _random_problem(rng, ranks, rng.choice([1, 2, ranks, 2 * ranks]), rng.randint(2 * ranks, 4 * ranks))
        cands = sp.seed_candidates(problem) + sp.program_candidates(problem)
        for c in rng.sample(cands, min(10, len(cands))):
            b = time_bounds(problem.stage_costs(c.partition), c.placement, problem.ranks, problem.microbatches)
            assert b.release >= b.work * (1 - 1e-12)
            try:
                res = simulate(c.build(), problem)
            except ValueError:
                continue
            assert res.makespan >= b.release * (1 - 1e-9), (trial, c.description)
            tight += res.makespan <= b.release * 1.05
    assert tight > 0  # the bound is close on some candidates, not vacuous


def test_release_bound_sees_the_round_trip():
    """One stage per rank, one microbatch: the first rank waits for the whole round trip, so the
    bound is the chain F... + I... + W0 exactly, well above busy time + arrival."""
    problem = _uniform(ranks=4, mb=1, n=4)
    b = time_bounds(problem.stage_costs(((0,), (1,), (2,), (3,))), (0, 1, 2, 3), 4, 1)
    assert b.work == pytest.approx(3 + 3)          # rank 3: arrival 3, busy F+I+W
    assert b.release == pytest.approx(4 + 4 + 1)   # 4 F, 4 I, then W of stage 0
    assert simulate(sp.seed_candidates(problem)[0].build(), problem).makespan >= b.release - 1e-9


def test_stage_inflight_counts_held_microbatches():
    from flexpipe_ui.library import build_named
    problem = _uniform(ranks=4, mb=8)
    res = simulate(build_named("gpipe", problem), problem)
    assert stage_inflight(res).tolist() == [8, 8, 8, 8]
    res = simulate(build_named("1f1b", problem), problem)
    assert stage_inflight(res).tolist() == [4, 3, 2, 1]


def test_profiler_problem_file_and_cli(tmp_path, capsys):
    from flexpipe_ui.cli import main
    # what kernel_runtime's profiler writes: ms and MiB, with meta
    d = {"format": "flexpipe-problem/1", "ranks": 2, "microbatches": 4, "comm": 0.12,
         "memory_limit": 900.0,
         "layers": [{"f": 0.31, "b": 0.0, "w": 0.4, "act": 2.0, "mem": 120.0, "name": "embedding"}]
         + [{"f": 1.42, "b": 1.61, "w": 1.3, "act": 48.0, "mem": 64.0, "name": f"block{k}"} for k in range(4)]
         + [{"f": 2.9, "b": 3.1, "w": 2.7, "act": 96.0, "mem": 120.0, "name": "lm_head"}],
         "meta": {"source": "kernel_runtime.profile", "device": "cpu", "units": {"time": "ms", "memory": "MiB"},
                  "repeats": 5}}
    src = tmp_path / "problem.json"
    src.write_text(json.dumps(d))
    out = tmp_path / "plan.json"
    assert main(["auto", str(src), "-o", str(out), "--top", "2", "-q"]) == 0
    text = capsys.readouterr().out
    assert "lower bound" in text and "wrote" in text
    plan = load_plan(out)
    assert plan.meta["name"] == "auto" and (tmp_path / "plan.2.json").exists()
    from flexpipe_ui.problem import load_problem
    problem = load_problem(src)
    assert simulate(plan, problem).metrics.max_peak_memory <= 900.0 + 1e-9
    # bad input: exit 2 with a message
    assert main(["auto", str(tmp_path / "missing.json"), "-o", str(out)]) == 2
    assert main(["auto", str(src), "-o", str(out), "--top", "0"]) == 2
    assert "--top" in capsys.readouterr().err


def test_tight_memory_uses_recompute_and_the_plan_round_trips(tmp_path):
    from flexpipe_ui.planfile import save_plan
    # one layer per rank (so finer chunks cannot help) with big activations: without recompute
    # only one microbatch per rank fits in flight
    layers = tuple(Layer(f=1.0, b=1.0, w=1.0, act=10.0, mem=1.0) for _ in range(2))
    free = Problem(ranks=2, microbatches=6, layers=layers)
    cap = 1.0 + 10.0 * 1.5
    problem = free.with_(memory_limit=cap)
    res = auto_search(problem, top=3)
    for plan, sim, desc in res.candidates:
        assert simulate(plan, problem).metrics.max_peak_memory <= cap * (1 + 1e-9), desc
    best = res.best
    validate(best.schedule)
    assert res.makespan >= auto_search(free).makespan * (1 - 1e-9)
    save_plan(best, tmp_path / "p.json")
    back = load_plan(tmp_path / "p.json")
    assert simulate(back, problem).makespan == pytest.approx(res.makespan)
    used = best.schedule.kinds_used()
    assert "R" in used, f"expected recomputation under a {cap} cap, got {res.candidates[0][2]}"


@pytest.mark.parametrize("ranks,mb", [(2, 2), (2, 5), (3, 3), (3, 6), (4, 2), (4, 8)])
def test_grid_never_worse_than_seeds_and_fits(ranks, mb):
    rng = random.Random(ranks * 100 + mb)
    layers = tuple(Layer(f=rng.uniform(0.3, 2), b=rng.uniform(0.3, 2), w=rng.uniform(0.05, 1.5),
                         act=rng.uniform(0.5, 2), mem=rng.uniform(0, 2)) for _ in range(3 * ranks))
    free = Problem(ranks=ranks, microbatches=mb, layers=layers, comm=rng.choice([0.0, 0.1, 0.6]))
    peak_free = auto_search(free).candidates[0][1].metrics.max_peak_memory
    for problem in (free, free.with_(memory_limit=0.8 * peak_free)):
        try:
            res = auto_search(problem, max_evals=80)
        except NoFeasiblePlan as e:  # only acceptable when nothing in the space fits
            assert e.smallest_peak > problem.memory_limit
            continue
        seeds = _seed_scores(problem)
        if seeds:
            assert res.makespan <= min(m for m, _ in seeds) * (1 + 1e-9)
        sim = simulate(res.best, problem)
        assert sim.makespan == pytest.approx(res.makespan)
        if problem.memory_limit is not None:
            assert sim.metrics.max_peak_memory <= problem.memory_limit * (1 + 1e-9)


def test_auto_plan_replays_from_its_trace():
    problem = _gpt_like()
    plan = auto(problem)
    ns: dict = {}
    exec(plan.to_python(), ns)
    again = ns["plan"]
    assert again.schedule.to_text() == plan.schedule.to_text() and again.partition == plan.partition


def test_time_limit_still_returns_a_plan():
    problem = _gpt_like()
    res = auto_search(problem, time_limit=1e-9)
    assert res.stats["stopped"] == "time_limit" and res.stats["evaluated"] >= 1
    assert simulate(res.best, problem).makespan == pytest.approx(res.makespan)


def test_fewer_layers_than_ranks_is_a_clear_error():
    from flexpipe_ui.problem import ProblemError
    with pytest.raises(ProblemError, match="3 layers but 4 ranks"):
        auto(_uniform(ranks=4, mb=4, n=3))
    # one rank and one microbatch are fine
    assert auto_search(_uniform(ranks=1, mb=4, n=3)).makespan == pytest.approx(36)
    assert auto_search(_uniform(ranks=3, mb=1, n=6)).best.microbatches == 1
