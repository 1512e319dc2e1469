import math

import numpy as np
import pytest

from flexpipe_ui import (Dep, Kind, Layer, Plan, Problem, Schedule, ScheduleError, Timeline,
                         compute_metrics, register_kind, simulate, uniform_costs, unregister_kind)
from flexpipe_ui.timeline import memory_curve
from oracles import gpipe, onef1b

GRID = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 8, 32)]


@pytest.mark.parametrize("p,m", GRID)
def test_gpipe_and_1f1b_closed_form(p, m):
    F = I = W = 1.0
    for s in (gpipe(p, m), onef1b(p, m)):
        res = simulate(s)
        assert res.makespan == (m + p - 1) * (F + I + W)
        work = m * (F + I + W)
        assert res.metrics.bubble == pytest.approx(1 - work / res.makespan)
    # splitting the backward lets W fill the drain: never worse, strictly better for p > 1
    split = simulate(gpipe(p, m, split=True)).makespan
    assert split <= (m + p - 1) * 3 and (p == 1 or split < (m + p - 1) * 3)


@pytest.mark.parametrize("p,m", GRID)
def test_1f1b_peak_activations(p, m):
    res = simulate(onef1b(p, m))
    assert res.metrics.peak_activation == tuple(float(min(p - r, m)) for r in range(p))
    assert simulate(gpipe(p, m)).metrics.peak_activation == (float(m),) * p


def test_comm_is_added_on_cross_rank_dependencies():
    s = Schedule.from_text("r0: 0F0 0B0\nr1: 1F0 1B0")
    res = simulate(s, comm=0.5)
    tl = res.timeline
    assert tl.of("1F0") == (1.5, 2.5)
    assert tl.of("1B0") == (2.5, 4.5)
    assert tl.of("0B0") == (5.0, 7.0)
    assert res.makespan == 7.0


def test_heterogeneous_costs_and_static_memory():
    pr = Problem(ranks=2, microbatches=2, comm=0.0,
                 layers=(Layer(f=1, b=2, w=1, act=3, mem=10), Layer(f=2, b=1, w=1, act=1, mem=5)))
    s = Schedule.from_text("r0: 0F0 0F1 0I0 0I1 0W0 0W1\nr1: 1F0 1F1 1I0 1I1 1W0 1W1")
    res = simulate(Plan(s, ((0,), (1,))), pr)
    tl = res.timeline
    assert tl.of("1F0") == (1, 3) and tl.of("1F1") == (3, 5)
    assert tl.of("1I0") == (5, 6) and tl.of("0I0") == (6, 8)
    assert res.metrics.peak_memory == (10 + 6, 5 + 2)
    t, v = memory_curve(tl, res.costs, 0)
    assert v[0] == 10 and v.max() == 16 and v[-1] == 10


def test_memory_freed_at_t_is_free_at_t():
    s = Schedule.from_text("r0: 0F0 0B0 0F1 0B1")
    res = simulate(s)
    assert res.metrics.peak_activation == (1.0,)


def test_plan_partition_drives_costs():
    pr = Problem(ranks=2, microbatches=1, layers=tuple(Layer(f=1, b=1, w=1) for _ in range(3)))
    s = Schedule.from_text("r0: 0F0 0B0\nr1: 1F0 1B0")
    assert simulate(Plan(s, ((0, 1), (2,))), pr).makespan == 2 + 1 + 2 + 4
    assert simulate(Plan(s, ((0,), (1, 2))), pr).makespan == 1 + 2 + 4 + 2


def test_invalid_schedule_raises_schedule_error():
    with pytest.raises(ScheduleError):
        simulate(Schedule.from_text("r0: 0F0\nr1: 1F0 1B0"))
    with pytest.raises(ScheduleError) as e:
        simulate(Schedule.from_text("r0: 0F0 0F1 0I0 0I1 0W0 0W1\nr1: 1F0 1F1 1I1 1I0 1W0 1W1".replace(
            "0F1 0I0", "0I0 0F1").replace("1F1 1I1 1I0", "1F1 1I0 1I1")))
    assert "deadlock" in str(e.value)


def test_deadlock_with_zero_costs_is_still_caught():
    pr = Problem(ranks=2, microbatches=2, layers=(Layer(f=0, b=0, w=0), Layer(f=0, b=0, w=0)))
    s = Schedule.from_text("r0: 0F0 0I0 0F1 0I1 0W0 0W1\nr1: 1F0 1F1 1I0 1I1 1W0 1W1")
    with pytest.raises(ScheduleError) as e:
        simulate(Plan(s, ((0,), (1,))), pr)
    assert "deadlock" in str(e.value)


def test_user_kind_recompute_and_copy_stream():
    R = Kind("RZ", "other", lambda c: c.f, after=(Dep(frozenset({"F"})),), before=frozenset({"I", "B"}),
             mem_start=1.0, adjust={"F": (0.0, -1.0)})
    O = Kind("OZ", "other", lambda c: 5.0, after=(Dep(frozenset({"F"})),), stream="copy")
    register_kind(R)
    register_kind(O)
    try:
        s = Schedule.from_text("r0: 0F0 0OZ0 0F1 0RZ0 0B0 0RZ1 0B1")
        res = simulate(s)
        tl = res.timeline
        assert tl.of("0RZ0") == (2, 3) and tl.of("0B0") == (3, 5)
        assert res.metrics.peak_activation == (1.0,)  # F keeps nothing; R re-creates one at a time
        assert tl.of("0OZ0") == (1, 6)           # copy stream: starts when 0F0 ends, runs beside compute
        assert tl.of("0F1") == (1, 2)
        assert res.metrics.busy == (8.0,)        # copy work is not compute
        assert res.makespan == 8.0
        # a copy is issued where it stands in the rank's list (the runtime's wait_stream point):
        # listed last, it waits for the compute action before it
        late = simulate(Schedule.from_text("r0: 0F0 0F1 0RZ0 0B0 0RZ1 0B1 0OZ0")).timeline
        assert late.of("0OZ0") == (8, 13)
    finally:
        unregister_kind("RZ")
        unregister_kind("OZ")


def test_measured_timeline_metrics():
    tl = Timeline.from_records(2, [(0, "0F0", 0.0, 1.0), (1, "1F0", 1.2, 2.2), (1, "1B0", 2.2, 4.2),
                                   (0, "0B0", 4.4, 6.4)])
    m = compute_metrics(tl, uniform_costs(2, 2))
    assert m.makespan == pytest.approx(6.4)
    assert m.busy == (3.0, 3.0) and m.peak_activation == (1.0, 1.0)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (3, 7)])
def test_random_costs_match_a_plain_event_loop(p, m):
    """The vectorized fixpoint equals a straightforward per-rank event loop (independent oracle)."""
    rng = np.random.default_rng(p * 100 + m)
    layers = tuple(Layer(f=float(rng.uniform(0.5, 2)), b=float(rng.uniform(0.5, 2)),
                         w=float(rng.uniform(0.1, 1)), act=1.0) for _ in range(p))
    pr = Problem(ranks=p, microbatches=m, layers=layers, comm=0.3)
    s = gpipe(p, m, split=True)
    res = simulate(Plan(s, tuple((i,) for i in range(p))), pr)
    ends: dict[str, float] = {}
    cost = {"F": "f", "I": "b", "W": "w"}
    ptr, t = [0] * p, [0.0] * p
    while any(ptr[r] < len(s.order[r]) for r in range(p)):
        for r in range(p):
            while ptr[r] < len(s.order[r]):
                a = s.order[r][ptr[r]]
                k, st, mb = a.kind.name, a.stage, a.microbatch
                deps = {"F": [(f"{st - 1}F{mb}", True)] if st else [],
                        "I": [(f"{st}F{mb}", False)] + ([(f"{st + 1}I{mb}", True)] if st < p - 1 else []),
                        "W": [(f"{st}I{mb}", False)]}[k]
                if any(d not in ends for d, _ in deps):
                    break
                ready = max([ends[d] + (0.3 if cross else 0) for d, cross in deps] + [0.0])
                start = max(t[r], ready)
                t[r] = ends[str(a)] = start + getattr(layers[st], cost[k])
                ptr[r] += 1
    for a in res.timeline.actions:
        assert res.timeline.of(a)[1] == pytest.approx(ends[str(a)], abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_no_false_memory_peak_from_float_rounding(seed):
    """A free at t and the allocation of the action starting at t must coincide exactly."""
    rng = np.random.default_rng(seed)
    p, m = 4, 64
    layers = tuple(Layer(f=float(rng.uniform(0.1, 1)), b=float(rng.uniform(0.1, 1)),
                         w=float(rng.uniform(0.1, 1)), act=1.0) for _ in range(p))
    res = simulate(Plan(onef1b(p, m), tuple((i,) for i in range(p))),
                   Problem(ranks=p, microbatches=m, layers=layers, comm=0.013))
    assert res.metrics.peak_activation == tuple(float(p - r) for r in range(p))
    tl = res.timeline
    assert np.allclose(tl.end - tl.start, res.timeline.end - res.timeline.start)


def test_a_converged_simulation_proves_the_schedule_valid():
    """``simulate`` on a schedule no one validated: its equations converging rule out a deadlock
    (``validate.proven_by_simulation``), so a ``validate`` after it finds the schedule valid
    without its own search (the Designer's edit path), and a deadlock is still caught whichever
    sweep the search is asked at."""
    from flexpipe_ui.validate import validate, validated
    ok = Schedule.from_text("r0: 0F0 0F1 0I0 0I1 0W0 0W1\nr1: 1F0 1I0 1F1 1I1 1W0 1W1")
    assert not validated(ok)
    simulate(ok)
    assert validated(ok) and validate(ok) is ok
    bad = "r0: 0F0 0I0 0F1 0I1 0W0 0W1\nr1: 1F0 1F1 1I0 1I1 1W0 1W1"
    for after in (1, 2, 32, 1000):
        with pytest.raises(ScheduleError) as e:
            simulate(Schedule.from_text(bad), check_after=after)
        assert "deadlock" in str(e.value)
        assert not validated(Schedule.from_text(bad))


def test_zero_cost_actions_without_a_cycle_are_proven_too():
    """Zero durations can let a cycle converge; the check looks at the zero-cost part only and
    finds none here (every action costs nothing, no cycle)."""
    from flexpipe_ui.validate import validated
    pr = Problem(ranks=2, microbatches=2, layers=(Layer(f=0, b=0, w=0), Layer(f=0, b=0, w=0)))
    s = Schedule.from_text("r0: 0F0 0F1 0I0 0I1 0W0 0W1\nr1: 1F0 1I0 1F1 1I1 1W0 1W1")
    simulate(Plan(s, ((0,), (1,))), pr)
    assert validated(s)
