"""The cost model (``flexpipe_ui.costmodel``): old timings unchanged without the optional fields,
each new term against a hand-computed 2-rank timeline, the rules in one place, and the list
scheduler, the bounds and the exact polish agreeing with the simulator when the terms are on."""
import ast
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from flexpipe_ui import costmodel
from flexpipe_ui.dsl import Program, Rules, explicit, looped, vshape
from flexpipe_ui.dsl.hand import hand_plan
from flexpipe_ui.library import build_named
from flexpipe_ui.partition import partition_from_sizes
from flexpipe_ui.problem import Layer, Problem, ProblemError, load_problem, save_problem
from flexpipe_ui.search import auto_search, plan_bound
from flexpipe_ui.search import space as sp
from flexpipe_ui.search.bounds import memory_time_bound, time_bounds
from flexpipe_ui.sim import simulate
from flexpipe_ui.timeline import memory_curve

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- the 2-rank toy
# two layers (one stage each, stage s on rank s), f=1, b=2, w=1, comm 0.5, one microbatch:
#   0F0 [0, 1]  1F0 [1.5, 2.5]  1I0 [2.5, 4.5]  1W0 [4.5, 5.5]  0I0 [5, 7]  0W0 [7, 8]
SPLIT = "r0: 0F0 0I0 0W0\nr1: 1F0 1I0 1W0"
FUSED = "r0: 0F0 0B0\nr1: 1F0 1B0"


def _toy(layer=None, **terms):
    layer = layer or {}
    return Problem(ranks=2, microbatches=1, comm=0.5,
                   layers=tuple(Layer(f=1.0, b=2.0, w=1.0, act=4.0, **layer.get(i, {})) for i in range(2)),
                   **terms)


def _times(text, problem):
    plan = hand_plan(text, placement=(0, 1), microbatches=problem.microbatches, partition=((0,), (1,)))
    res = simulate(plan, problem)
    return {a: res.timeline.of(a) for a in text.replace("r0:", "").replace("r1:", "").split()}, res


def test_toy_without_terms_is_contract_4():
    t, res = _times(SPLIT, _toy())
    assert t == {"0F0": (0, 1), "1F0": (1.5, 2.5), "1I0": (2.5, 4.5), "1W0": (4.5, 5.5),
                 "0I0": (5, 7), "0W0": (7, 8)}
    assert res.makespan == 8


def test_overhead_per_kind():
    t, _ = _times(SPLIT, _toy(overhead={"F": 0.25, "I": 0.5, "W": 0.125}))
    assert t == {"0F0": (0, 1.25), "1F0": (1.75, 3), "1I0": (3, 5.5), "1W0": (5.5, 6.625),
                 "0I0": (6, 8.5), "0W0": (8.5, 9.625)}
    t, _ = _times(FUSED, _toy(overhead=0.5))  # a number: every compute action
    assert t == {"0F0": (0, 1.5), "1F0": (2, 3.5), "1B0": (3.5, 7), "0B0": (7.5, 11)}


def test_message_size_over_bandwidth():
    # the message from stage 0 to 1 (and its gradient back) is layer 0's out: 0.5 + 1 / 2 = 1
    t, _ = _times(SPLIT, _toy(layer={0: {"out": 1.0}, 1: {"out": 64.0}}, bandwidth=2.0))
    assert t == {"0F0": (0, 1), "1F0": (2, 3), "1I0": (3, 5), "1W0": (5, 6), "0I0": (6, 8), "0W0": (8, 9)}


def test_comm_cpu_occupies_sender_and_receiver():
    # each message costs 0.5 + 1 / 2 = 1, of which 0.5 is transfer; half of that (0.25) lengthens
    # the action that sends and the one that receives
    t, _ = _times(SPLIT, _toy(layer={0: {"out": 1.0}}, bandwidth=2.0, comm_cpu=0.5))
    assert t == {"0F0": (0, 1.25), "1F0": (2.25, 3.5), "1I0": (3.5, 5.75), "1W0": (5.75, 6.75),
                 "0I0": (6.75, 9), "0W0": (9, 10)}
    t, _ = _times(SPLIT, _toy(comm_cpu=1.0))  # no bandwidth: latency only, nothing to copy
    assert t["0W0"] == (7, 8)


def test_switch_is_charged_when_the_rank_changes_stage():
    # one rank holding both stages: 1F0 and 0B0 follow the other stage (+ its switch), 1B0 does not;
    # the lane's first action pays nothing
    p = Problem(ranks=1, microbatches=1, layers=(Layer(f=1.0, b=2.0, w=1.0, switch=0.25),
                                                Layer(f=1.0, b=2.0, w=1.0, switch=0.5)))
    plan = hand_plan("r0: 0F0 1F0 1B0 0B0", placement=(0, 0), microbatches=1, partition=((0,), (1,)))
    tl = simulate(plan, p).timeline
    assert {str(a): (s, e) for a, s, e in zip(tl.actions, tl.start, tl.end)} == {
        "0F0": (0, 1), "1F0": (1, 2.5), "1B0": (2.5, 5.5), "0B0": (5.5, 8.75)}
    # one stage per rank never switches: the same times as without the field
    two = _toy(layer={0: {"switch": 3.0}, 1: {"switch": 3.0}})
    assert _times(SPLIT, two)[0] == _times(SPLIT, _toy())[0]
    # order-free durations (a skeleton, the exact polish) leave it out
    g = __import__("flexpipe_ui.graph", fromlist=["compile_schedule"]).compile_schedule(plan.schedule)
    costs = p.stage_costs(plan.partition)
    assert costmodel.action_durations(g, costs, ordered=False)[0].tolist() == [1.0, 1.0, 3.0, 3.0]
    assert costmodel.switch_time(g, costs).tolist() == [0.0, 0.5, 0.0, 0.25]


def test_fused_backward_costs_bw():
    t, _ = _times(FUSED, _toy())
    assert t == {"0F0": (0, 1), "1F0": (1.5, 2.5), "1B0": (2.5, 5.5), "0B0": (6, 9)}
    t, _ = _times(FUSED, _toy(layer={0: {"bw": 2.0}, 1: {"bw": 2.0}}))
    assert t == {"0F0": (0, 1), "1F0": (1.5, 2.5), "1B0": (2.5, 4.5), "0B0": (5, 7)}
    t, _ = _times(SPLIT, _toy(layer={0: {"bw": 2.0}, 1: {"bw": 2.0}}))  # split I/W still cost b, w
    assert t["0W0"] == (7, 8)


def test_act_w_frees_the_rest_at_i():
    prob = _toy(layer={1: {"act_w": 1.0}})
    _, res = _times(SPLIT, prob)
    times, vals = memory_curve(res.timeline, res.costs, 1)
    # rank 1: +4 at 1F0's start, -3 at 1I0's end, -1 at 1W0's end
    assert times.tolist() == [0, 1.5, 4.5, 5.5] and vals.tolist() == [0, 4, 1, 0]
    times, vals = memory_curve(_times(SPLIT, _toy())[1].timeline, res.costs, 0)
    assert vals.tolist() == [0, 4, 0]  # rank 0 has no act_w: all of it until W


def test_act_w_lowers_the_peak():
    p = Problem(ranks=1, microbatches=2, layers=(Layer(f=1, b=1, w=1, act=4.0, act_w=1.0),))
    plan = hand_plan("r0: 0F0 0I0 0F1 0I1 0W0 0W1", placement=(0,), microbatches=2, partition=((0,),))
    assert simulate(plan, p).metrics.peak_memory == (5.0,)                       # 1 + 4
    assert simulate(plan, replace(p, layers=(Layer(f=1, b=1, w=1, act=4.0),))).metrics.peak_memory == (8.0,)


def test_act_w_above_act_allocates_at_i():
    """A split backward that keeps more after I than F held (the gradients W needs): I's end adds
    act_w - act, W's end frees all of act_w."""
    p = Problem(ranks=1, microbatches=1, layers=(Layer(f=1, b=1, w=1, act=1.0, act_w=3.0),))
    plan = hand_plan("r0: 0F0 0I0 0W0", placement=(0,), microbatches=1, partition=((0,),))
    res = simulate(plan, p)
    times, vals = memory_curve(res.timeline, res.costs, 0)
    assert times.tolist() == [0, 0, 2, 3] and vals.tolist() == [0, 1, 3, 0]
    assert res.metrics.peak_memory == (3.0,)


def test_data_input_first_stage_runs_its_backward_in_w():
    """data_input: stage 0's I is a no-op and its W the fused backward (b + w, or bw), with B's
    overhead; its activation is held whole until W (act_w ignored there), the other stages as before."""
    t, _ = _times(SPLIT, _toy(data_input=True))
    assert t == {"0F0": (0, 1), "1F0": (1.5, 2.5), "1I0": (2.5, 4.5), "1W0": (4.5, 5.5),
                 "0I0": (5, 5), "0W0": (5, 8)}
    t, _ = _times(SPLIT, _toy(layer={0: {"bw": 2.0}}, data_input=True))
    assert t["0I0"] == (5, 5) and t["0W0"] == (5, 7)
    t, _ = _times(SPLIT, _toy(data_input=True, overhead={"F": 0.0, "I": 0.5, "W": 0.125, "B": 0.25}))
    assert t["1I0"] == (2.5, 5) and t["0I0"] == (5.5, 5.5) and t["0W0"] == (5.5, 8.75)
    t, _ = _times(FUSED, _toy(layer={0: {"bw": 2.0}}, data_input=True))   # fused B unchanged
    assert t["0B0"] == (6, 8)
    prob = _toy(layer={0: {"act_w": 1.0}, 1: {"act_w": 1.0}}, data_input=True)
    _, res = _times(SPLIT, prob)
    assert memory_curve(res.timeline, res.costs, 0)[1].tolist() == [0, 4, 0]      # whole until W
    assert memory_curve(res.timeline, res.costs, 1)[1].tolist() == [0, 4, 1, 0]   # act_w applies


def test_data_parallel_allreduce_lane():
    # dp 2: each stage's all-reduce costs 2 (2-1)/2 * grad / 1 = grad; after its last W, own lane
    prob = _toy(layer={0: {"grad": 2.0}, 1: {"grad": 4.0}}, dp=2, dp_bandwidth=1.0)
    t, res = _times(SPLIT, prob)
    assert t["0W0"] == (7, 8)                                  # compute unchanged
    assert res.timeline.meta["allreduce"] == [(1, 1, 5.5, 9.5), (0, 0, 8.0, 10.0)]
    assert res.makespan == 10.0
    # two stages on one rank: their all-reduces queue on that rank's lane
    two = Problem(ranks=1, microbatches=1, layers=(Layer(f=1, b=1, w=1, grad=3.0),) * 2, dp=4,
                  dp_bandwidth=1.5)  # 2 * 3/4 * 3 / 1.5 = 3 each
    plan = hand_plan("r0: 0F0 1F0 1I0 1W0 0I0 0W0", placement=(0, 0), microbatches=1,
                     partition=((0,), (1,)))
    r = simulate(plan, two)
    assert r.timeline.meta["allreduce"] == [(0, 1, 4.0, 7.0), (0, 0, 7.0, 10.0)]  # waits for the lane
    assert r.makespan == 10.0


# ---------------------------------------------------------------- neutral = absent, bit for bit

def _dyadic_problem(rng, ranks, n, **terms):
    q = lambda lo, hi: rng.randint(lo, hi) / 8
    return Problem(ranks=ranks, microbatches=rng.choice([2, 4, 2 * ranks]), comm=q(0, 4),
                   layers=tuple(Layer(f=q(1, 16), b=q(1, 16), w=q(0, 12), act=q(1, 8), mem=q(0, 8))
                                for _ in range(n)), **terms)


def _neutral(p: Problem) -> Problem:
    return replace(p, overhead=0.0, comm_cpu=0.0, dp=1,
                   layers=tuple(replace(l, bw=l.b + l.w, act_w=l.act, out=1.0, switch=0.0) for l in p.layers))


@pytest.mark.parametrize("seed", range(3))
def test_neutral_terms_give_identical_timelines(seed):
    rng = random.Random(seed)
    p = _dyadic_problem(rng, 4, 16)
    q = _neutral(p)
    assert q.has_cost_terms and not p.has_cost_terms
    plans = [build_named(n, p) for n in ("1f1b", "zb-h1", "interleaved-1f1b", "zb-v")]
    plans += [Program(placement=vshape(), rules=Rules(backward="split", priority=("I", "F", "W"),
                                                      w_policy="fill", memory_cap=60.0)).plan(problem=p)]
    for plan in plans:
        a, b = simulate(plan, p), simulate(plan, q)
        assert np.array_equal(a.timeline.start, b.timeline.start)
        assert np.array_equal(a.timeline.end, b.timeline.end)
        assert a.metrics == b.metrics
    # the list scheduler makes the same orders too
    prog = Program(placement=looped(2), rules=Rules(backward="split", priority=("I", "F", "W"),
                                                    memory_cap=80.0))
    assert prog.plan(problem=p).schedule.order == prog.plan(problem=q).schedule.order
    # and the bounds are the same numbers
    cp, cq = p.stage_costs(plans[2].partition), q.stage_costs(plans[2].partition)
    place = plans[2].schedule.placement
    assert time_bounds(cp, place, 4, p.microbatches) == time_bounds(cq, place, 4, p.microbatches)


# ---------------------------------------------------------------- problem file fields

def test_fields_round_trip_and_are_written_only_when_set(tmp_path):
    plain = _toy()
    save_problem(plain, tmp_path / "a.json")
    d = json.loads((tmp_path / "a.json").read_text())
    assert set(d) == {"format", "ranks", "microbatches", "comm", "layers"}
    assert set(d["layers"][0]) == {"f", "b", "w", "act", "mem"}
    full = _toy(layer={0: {"out": 1.0, "bw": 2.5, "act_w": 1.0, "grad": 3.0, "switch": 0.25}}, bandwidth=10.0,
                overhead={"F": 0.1, "B": 0.2}, comm_cpu=0.25, dp=2, dp_bandwidth=5.0, data_input=True)
    save_problem(full, tmp_path / "b.json")
    back = load_problem(tmp_path / "b.json")
    assert back == full
    d = json.loads((tmp_path / "b.json").read_text())
    assert d["overhead"] == {"F": 0.1, "B": 0.2} and "out" not in d["layers"][1]


@pytest.mark.parametrize("change,match", [
    ({"bandwidth": 0}, r"'bandwidth'.*> 0"),
    ({"overhead": -1}, r"'overhead'"),
    ({"overhead": {"F": "x"}}, r"'overhead', kind 'F'"),
    ({"comm_cpu": 1.5}, r"'comm_cpu'.*0\.\.1"),
    ({"dp": 1.5}, r"'dp'"),
    ({"dp": 2}, r"'dp_bandwidth' is not set"),
    ({"data_input": "yes"}, r"'data_input' must be true or false"),
    ({"layer1": {"bw": -1}}, r"layer 1, key 'bw'"),
    ({"layer1": {"out": "big"}}, r"layer 1, key 'out'"),
    ({"layer0": {"act_w": -1.0}}, r"layer 0, key 'act_w'"),
    ({"layer1": {"switch": -0.5}}, r"layer 1, key 'switch'"),
])
def test_field_errors_name_the_field(tmp_path, change, match):
    d = _toy().to_dict()
    for k, v in change.items():
        if k.startswith("layer"):
            d["layers"][int(k[-1])].update(v)
        else:
            d[k] = v
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError, match=match):
        load_problem(tmp_path / "p.json")


# ---------------------------------------------------------------- one place

_CALLERS = ("flexpipe_ui/sim.py", "flexpipe_ui/dsl/scheduler.py", "flexpipe_ui/dsl/actor_plan.py",
            "flexpipe_ui/search/exact.py", "flexpipe_ui/search/bounds.py")


@pytest.mark.parametrize("path", _CALLERS)
def test_callers_have_no_latency_or_memory_rule_of_their_own(path):
    """They never read the latency or memory fields (comm, act, act_w, out, bandwidth, bw,
    comm_cpu, overhead) nor a kind's memory spec; they call costmodel."""
    tree = ast.parse((ROOT / path).read_text())
    banned = {"comm", "act", "act_w", "out", "bandwidth", "comm_cpu", "overhead", "mem_start", "mem_end",
              "adjust", "bw", "switch"}
    reads = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in banned})
    assert reads == [], f"{path} reads {reads}"
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
               and n.module.endswith("costmodel") for a in n.names}
    assert imports, f"{path} does not use costmodel"


def test_the_fit_tolerance_is_defined_once():
    pat = re.compile(r"(limit|cap|memory_limit|caps\[r\])\)?\s*(\*\s*\(1 \+ 1e-\d+\)|\+ 1e-\d+|\+ _EPS)"
                     r"|(<=|>|<)\s*\w*(limit|cap)\w*\s*[-+*]\s*\(?\s*1?\s*[-+]?\s*1e-"
                     r"|memory_cap\s*<\s*\w+\s*-\s*1e-|caps\[[^\]]*\]\s*\+\s*_EPS|\(1 \+ _REL\)")
    offenders = []
    for f in sorted((ROOT / "flexpipe_ui").rglob("*.py")):
        text = f.read_text()
        if f.relative_to(ROOT).as_posix() != "flexpipe_ui/costmodel/stage.py" and "FIT_TOL =" in text:
            offenders.append(f"{f}: defines FIT_TOL")
        for i, line in enumerate(text.splitlines(), 1):
            if pat.search(line):
                offenders.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == []
    assert costmodel.fits(1.0 + 1e-10, 1.0) and not costmodel.fits(1.0 + 1e-6, 1.0)
    assert costmodel.fits(1e12, None)


# ---------------------------------------------------------------- consumers agree with the model

def _with_terms(rng, p: Problem) -> Problem:
    layers = tuple(replace(l, out=rng.uniform(0.0, 4.0), bw=rng.uniform(0.3, 1.0) * (l.b + l.w),
                           act_w=rng.uniform(0.0, 1.0) * l.act, switch=rng.uniform(0.0, 0.5))
                   for l in p.layers)
    ov = rng.choice([0.3, {"F": 0.1, "I": 0.4, "W": 0.2, "B": 0.5}])
    return replace(p, layers=layers, bandwidth=rng.uniform(1.0, 8.0), overhead=ov,
                   comm_cpu=rng.choice([0.0, 0.5]), data_input=rng.choice([False, True]))


@pytest.mark.parametrize("rules", [Rules(backward="split", priority=("I", "F", "W"), w_policy="fill"),
                                   Rules(backward="fused", priority=("B", "F")),
                                   Rules(backward="split", priority=("I", "F", "W"), memory_cap=30.0)])
def test_list_scheduler_starts_are_the_simulators_with_terms(rules):
    rng = random.Random(3)
    p = _with_terms(rng, Problem(ranks=4, microbatches=6, comm=0.3, layers=tuple(
        Layer(f=1 + (i % 3) * 0.5, b=2.0, w=0.7, act=1.0 + i % 2) for i in range(12))))
    for placement in (looped(1), vshape(), looped(3)):
        plan = Program(placement=placement, rules=rules).plan(problem=p, partition="balanced")
        tl = simulate(plan, p).timeline
        mine = plan.schedule.derived("list_starts")
        for r in range(4):
            assert np.allclose(tl.start[tl.rank == r], mine[r])
        if rules.memory_cap is not None:
            assert costmodel.fits(simulate(plan, p).metrics.max_peak_memory, rules.memory_cap)


def test_bounds_stay_below_every_plan_with_terms():
    """Candidate bounds (work, chain, release, memory-throughput at the plan's own peak) and the
    plan-independent bound, on random problems with random new fields, under every plan tried."""
    rng = random.Random(11)
    for trial in range(6):
        ranks = rng.choice([2, 3, 4])
        n = rng.randint(ranks, 3 * ranks)
        base = Problem(ranks=ranks, microbatches=rng.choice([1, 2, ranks, 2 * ranks]),
                       comm=rng.choice([0.0, 0.2, 1.5]),
                       layers=tuple(Layer(f=rng.uniform(0.05, 3), b=rng.uniform(0.0, 3),
                                          w=rng.uniform(0.0, 2), act=rng.uniform(0.5, 2)) for _ in range(n)))
        p = _with_terms(rng, base)
        bound = plan_bound(p)
        cands = sp.seed_candidates(p) + sp.program_candidates(p)
        for c in rng.sample(cands, min(10, len(cands))):
            try:
                plan = c.build()
            except ValueError:
                continue
            res = simulate(plan, p)
            span, peak = res.makespan, res.metrics.max_peak_memory
            costs = p.stage_costs(plan.partition)
            place = plan.schedule.placement
            b = time_bounds(costs, place, ranks, p.microbatches)
            assert span >= bound * (1 - 1e-9), (trial, c.description, span, bound)
            assert span >= b.time * (1 - 1e-9), (trial, c.description, span, b)
            assert peak >= b.memory * (1 - 1e-9)
            if not any(k.name not in "FIWB" for row in plan.schedule.order for a in row for k in [a.kind]):
                mt = memory_time_bound(costs, place, ranks, p.microbatches, peak)
                assert span >= mt * (1 - 1e-9), (trial, c.description, span, mt)


def test_exact_polish_respects_the_terms():
    from flexpipe_ui.search import exact
    if not exact.available():
        pytest.skip("ortools not installed")
    rng = random.Random(5)
    p = _with_terms(rng, Problem(ranks=2, microbatches=3, comm=0.2, layers=tuple(
        Layer(f=1.0 + i * 0.25, b=1.5, w=0.75, act=1.0) for i in range(4))))
    plan = Program(placement=looped(2), rules=Rules(backward="split", priority=("F", "I", "W"))).plan(problem=p)
    before = simulate(plan, p).makespan
    r = exact.polish(plan, p, time_limit=3.0, workers=2)
    assert r.makespan <= before
    assert r.bound <= r.makespan * (1 + 1e-9)
    if r.plan is not None:
        assert simulate(r.plan, p).makespan <= r.makespan * (1 + 1e-12)


# ---------------------------------------------------------------- the search optimises what is true

def _search_problem(**kw):
    lk = {k: kw.pop(k) for k in list(kw) if k in ("bw", "out", "switch")}
    return Problem(ranks=4, microbatches=8, comm=0.1,
                   layers=tuple(Layer(f=1.0, b=1.0, w=1.0, act=1.0, **lk) for _ in range(16)), **kw)


def _kinds(plan):
    return {a.kind.name for row in plan.schedule.order for a in row}


def test_auto_without_terms_splits_the_backward_and_loops_stages():
    res = auto_search(_search_problem())
    assert _kinds(res.best) == {"F", "I", "W"} and res.best.schedule.num_stages > 4


def test_auto_fuses_the_backward_when_bw_is_much_less_than_b_plus_w():
    res = auto_search(_search_problem(bw=1.25))
    assert _kinds(res.best) == {"F", "B"}
    split = auto_search(_search_problem()).best
    assert simulate(split, _search_problem(bw=1.25)).makespan > res.makespan


def test_auto_keeps_one_stage_per_rank_when_switching_stages_costs():
    p = _search_problem(switch=0.75)
    res = auto_search(p)
    assert res.best.schedule.num_stages == 4
    looped_plan = auto_search(_search_problem()).best
    assert looped_plan.schedule.num_stages > 4
    assert simulate(looped_plan, p).makespan > res.makespan


def test_auto_keeps_one_stage_per_rank_when_actions_and_messages_cost():
    p = _search_problem(overhead=1.5, bandwidth=1.0, out=2.0, comm_cpu=0.5)
    res = auto_search(p)
    assert res.best.schedule.num_stages == 4
    looped_plan = auto_search(_search_problem()).best
    assert simulate(looped_plan, p).makespan > res.makespan
