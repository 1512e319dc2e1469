"""The DSL: placements, rules, the actor list scheduler (timed like the simulator), hand orders, errors."""
import numpy as np
import pytest

from flexpipe_ui.dsl import (PlacementError, Program, Rules, RulesDeadlock, RulesError, eval_formula,
                             explicit, hand, looped, program_from_source, vshape, wave)
from flexpipe_ui.ir import Schedule
from flexpipe_ui.problem import Layer, Problem, uniform_costs
from flexpipe_ui.sim import simulate
from flexpipe_ui.validate import ScheduleError, check

GRID = [(p, m) for p in (2, 3, 4, 8) for m in sorted({1, 2, p, 2 * p, 4 * p})]


# -- placements -----------------------------------------------------------------------------------
def test_placements():
    assert looped(1)(3) == (0, 1, 2)
    assert looped(2)(3) == (0, 1, 2, 0, 1, 2)
    assert vshape()(3) == (0, 1, 2, 2, 1, 0)
    assert wave(3)(2) == (0, 1, 1, 0, 0, 1)
    assert wave(2)(4) == vshape()(4)
    assert explicit([0, 1, 1, 0])(2) == (0, 1, 1, 0)
    assert [repr(x) for x in (looped(2), vshape(), wave(3), explicit([1, 0]))] == \
        ["looped(2)", "vshape()", "wave(3)", "explicit([1, 0])"]


def test_bad_placements_name_stage_and_rank():
    with pytest.raises(PlacementError, match="stage 2 on rank 3, but there are 3 ranks"):
        explicit([0, 1, 3])(3)
    with pytest.raises(PlacementError, match=r"leaves ranks \[2\] without a stage"):
        explicit([0, 1, 1, 0])(3)
    with pytest.raises(PlacementError, match="v must be an integer >= 1"):
        looped(0)
    with pytest.raises(PlacementError, match="ranks must be an integer >= 1"):
        vshape()(0)


# -- rules ----------------------------------------------------------------------------------------
def test_formulas_and_rules_source():
    assert eval_formula("2*(p-1-r) + (v-1)*p + 1", p=8, r=0, v=2, m=32) == 23
    assert eval_formula("min(p, m) - r // 2", p=4, r=3, v=1, m=2) == 1
    with pytest.raises(RulesError, match="only integers"):
        eval_formula("__import__('os')", p=1, r=0, v=1, m=1)
    r = Rules(backward="split", in_flight="p - r").on(0, priority=("F", "I", "W"))
    assert r.for_rank(0).priority == ("F", "I", "W") and r.for_rank(1).priority == Rules().priority
    assert r.for_rank(0).in_flight == "p - r" and not r.for_rank(1).overrides
    assert eval(r.source(), {"Rules": Rules}) == r
    combined = Rules(backward="split") | Rules(in_flight=3)
    assert combined.backward == "split" and combined.in_flight == 3
    with pytest.raises(RulesError, match="unknown rule fields"):
        Rules().with_(bogus=1)
    prog = Program(placement=vshape(), rules=r)
    assert program_from_source(prog.source()) == prog


@pytest.mark.parametrize("bad, match", [
    (Rules(in_flight=0), r"in_flight limit 0 on rank 0 is below the 1 stage"),
    (Rules(in_flight="p - r - 1"), r"in_flight limit 0 \(= 'p - r - 1' with p=4, r=3"),
    (Rules(warmup=0), "warmup limit 0"),
    (Rules(memory_cap=0.5), r"memory cap 0.5 on rank 0 is below what one microbatch needs there: "
                            r"static 0 \+ activations 1 = 1"),
    (Rules(traversal="sideways"), "traversal must be one of"),
    (Rules(backward="half"), "backward must be one of"),
    (Rules(priority=("F", "Q")), "unknown kind 'Q'"),
    (Rules().on(9, backward="split"), r"override ranks \[9\], but there are only 4 ranks"),
])
def test_impossible_rules_raise_before_any_work(bad, match):
    with pytest.raises(ValueError, match=match):
        Program(rules=bad).schedule(ranks=4, microbatches=8)


def test_memory_cap_counts_both_v_stages():
    with pytest.raises(RulesError, match=r"below what one microbatch needs there: static 0 \+ "
                                         r"activations 1 = 1"):
        Program(placement=vshape(), rules=Rules(memory_cap=0.75)).schedule(ranks=4, microbatches=4)
    with pytest.raises(RulesError, match="in_flight limit 1 on rank 0 is below the 2 stage"):
        Program(placement=vshape(), rules=Rules(in_flight=1)).schedule(ranks=4, microbatches=4)


def test_costs_must_match_the_placement():
    with pytest.raises(RulesError, match="costs are for 4 stages but vshape"):
        Program(placement=vshape()).schedule(ranks=4, microbatches=2, costs=uniform_costs(4, 4))


# -- the list scheduler ---------------------------------------------------------------------------
RULESETS = {
    "1f1b": Program(rules=Rules(in_flight="p - r")),
    "zb": Program(rules=Rules(backward="split", priority=("I", "F", "W"), w_policy="fill",
                              in_flight="p")),
    "v": Program(placement=vshape(), rules=Rules(backward="split", in_flight="2*p", traversal="breadth")),
    "wave-eager": Program(placement=wave(3), rules=Rules(backward="split", w_policy="eager",
                                                          in_flight="v*p")),
    "interleaved-mb": Program(placement=looped(2), rules=Rules(traversal="microbatch", warmup="v*p")),
}


@pytest.mark.parametrize("name", RULESETS)
@pytest.mark.parametrize("p,m", GRID)
def test_generated_schedules_are_valid_and_respect_limits(name, p, m):
    prog = RULESETS[name]
    s = prog.schedule(ranks=p, microbatches=m)
    assert check(s) == []  # the full scan: the scheduler marks its output valid
    res = simulate(s)
    place, rules, limits, costs = prog.resolve(p, m, None)
    for r, (lim, _) in enumerate(limits):
        if lim is not None:  # activations are counted in (stage, microbatch) slots of act / v each
            v = sum(1 for x in place if x == r)
            assert res.metrics.peak_activation[r] <= lim / v + 1e-9


@pytest.mark.parametrize("prog", [RULESETS["zb"], RULESETS["v"], RULESETS["wave-eager"],
                                  Program(placement=vshape(), rules=Rules(backward="split",
                                                                          priority=("I", "F", "W")))])
def test_scheduler_times_are_the_simulators(prog):
    """The actors decide with the simulator's rules and costs: re-simulating the order they wrote
    gives back exactly their start times (uneven costs and comm included)."""
    prob = Problem(ranks=4, microbatches=6, comm=0.3,
                   layers=tuple(Layer(f=1 + (i % 3) * 0.5, b=2.0, w=0.7, act=1.0) for i in range(12)))
    plan = prog.plan(problem=prob)
    tl = simulate(plan, prob).timeline
    mine = plan.schedule.derived("list_starts")
    for r in range(4):
        assert np.allclose(tl.start[tl.rank == r], mine[r])


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 32)])
def test_memory_cap_is_respected(p, m):
    for cap in (1.0, 2.0, 3.5):
        s = Program(rules=Rules(memory_cap=cap)).schedule(ranks=p, microbatches=m)
        assert max(simulate(s).metrics.peak_memory) <= cap + 1e-9


def test_per_rank_override_changes_only_that_rank():
    base = Program(rules=Rules(backward="split", in_flight="p - r"))
    over = base.with_(rules=base.rules.on(3, backward="fused"))
    a, b = base.schedule(ranks=4, microbatches=4), over.schedule(ranks=4, microbatches=4)
    assert {x.kind.name for x in b.order[3]} == {"F", "B"}
    assert all({x.kind.name for x in b.order[r]} == {"F", "I", "W"} for r in range(3))
    assert {x.kind.name for x in a.order[3]} == {"F", "I", "W"}


def test_forwards_first_and_traversal():
    s = Program(placement=looped(2), rules=Rules(priority=("F", "B"), traversal="breadth",
                                                  forwards_first=True)).schedule(ranks=2, microbatches=3)
    row0 = [str(a) for a in s.order[0]]
    assert row0[:6] == ["0F0", "0F1", "0F2", "2F0", "2F1", "2F2"]
    assert all(a.kind.name == "B" for a in s.order[0][6:])


# -- hand orders ----------------------------------------------------------------------------------
def test_hand_order_round_trips_and_uses_dsl_placements():
    text = "r0: 0F0 0F1 3F0 3B0 0B0 3F1 3B1 0B1\nr1: 1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"
    s = hand(text, placement=vshape())
    assert s.placement == (0, 1, 1, 0) and Schedule.from_text(s.to_text(), 2, s.placement) == s
    simulate(s)


def test_hand_order_deadlock_reports_the_wait_cycle():
    text = "r0: 0F0 0B0 0F1 0B1\nr1: 1F1 1B1 1F0 1B0"
    with pytest.raises(ScheduleError, match=r"deadlock among ranks \[0, 1\]: rank 0 waits at 0B0 "
                                            r"for 1B0 \(rank 1\); rank 1 waits at 1F1 for 0F1"):
        hand(text)


def test_rules_deadlock_is_reported_not_looped(monkeypatch):
    # a user kind nobody can satisfy: must end with RulesDeadlock naming the stuck actions
    from flexpipe_ui.kinds import Dep, Kind, register_kind, unregister_kind
    register_kind(Kind("ZZ", "other", lambda c: 1.0, after=(Dep(frozenset({"B"}), 0),),
                       before=frozenset({"B"})))
    try:
        with pytest.raises(RulesDeadlock, match="the rules cannot finish"):
            Program(extra={"ZZ": "all"}).schedule(ranks=2, microbatches=2)
    finally:
        unregister_kind("ZZ")


def test_random_rule_sets_finish_or_refuse_up_front():
    """A seeded sweep over the knobs the auto-scheduler turns (placements, priorities, traversals,
    limits, caps, overrides, recompute/offload, uneven costs, comm): every program either raises a
    RulesError before scheduling or yields a valid schedule; the actors never deadlock."""
    import random

    from flexpipe_ui.ops import register_all
    register_all()
    rng = random.Random(1)
    made = refused = 0
    for _ in range(120):
        p = rng.choice([1, 2, 3, 4])
        m = rng.choice([1, 2, p, 2 * p, 3 * p])
        pl = rng.choice([looped(1), looped(2), vshape(), wave(3)])
        S = len(pl(p))
        prob = Problem(ranks=p, microbatches=m, comm=rng.choice([0.0, 0.3]), layers=tuple(
            Layer(f=rng.uniform(0.2, 3), b=rng.uniform(0.2, 3), w=rng.uniform(0.05, 2),
                  act=rng.uniform(0.1, 2), mem=rng.uniform(0, 1)) for _ in range(S + rng.randint(0, 3))))
        rules = Rules(priority=tuple(rng.sample(["I", "F", "W", "B"], 4)),
                      traversal=rng.choice(["depth", "breadth", "microbatch"]),
                      in_flight=rng.choice([None, "p - r", "v*p", "v", "max(v, p-r)", 3]),
                      warmup=rng.choice([None, "p-r+v"]), memory_cap=rng.choice([None, 4.0, 20.0]),
                      backward=rng.choice(["fused", "split"]),
                      w_policy=rng.choice(["priority", "eager", "fill"]), forwards_first=rng.random() < 0.2)
        if rng.random() < 0.3:
            rules = rules.on(0, backward="split", in_flight=None)
        extra = rng.choice([{}, {"R": "all"}, {"OFF": (0,), "LOAD": (0,)}])
        try:
            plan = Program(placement=pl, rules=rules, extra=extra).plan(problem=prob)
        except RulesDeadlock:
            raise
        except RulesError:
            refused += 1
            continue
        assert check(plan.schedule) == []  # the full scan: the scheduler marks its output valid
        simulate(plan, prob)
        made += 1
    assert made > 40 and refused > 5


def test_forwards_first_with_a_limit_is_refused_with_the_numbers():
    with pytest.raises(RulesError, match="forwards_first on rank 0 runs all 8 microbatches' forwards on "
                                         "its 1 stage.s. before any backward, so it holds 8 activations, "
                                         "but its in_flight limit is 4"):
        Program(rules=Rules(forwards_first=True, in_flight="p - r")).schedule(ranks=4, microbatches=8)
    with pytest.raises(RulesError, match=r"holds all 8 microbatches' activations before any backward: "
                                         r"8 > memory cap 5"):
        Program(rules=Rules(forwards_first=True, memory_cap=5.0)).schedule(ranks=4, microbatches=8)
    from flexpipe_ui.ops import register_recompute
    register_recompute()  # with recomputation the forwards keep nothing, so the same cap works
    Program(rules=Rules(forwards_first=True, memory_cap=5.0), extra={"R": "all"}).schedule(ranks=4, microbatches=8)
