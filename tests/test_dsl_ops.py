"""New operations: recompute and offload/reload, and a user kind in a few lines, scheduled,
validated, simulated and drawn like the built-ins."""
import pytest

from flexpipe_ui.dsl import Program, Rules, looped, vshape
from flexpipe_ui.kinds import Dep, Kind, get_kind, register_kind, unregister_kind
from flexpipe_ui.ops import register_offload, register_recompute
from flexpipe_ui.planfile import plan_from_dict, plan_to_dict
from flexpipe_ui.sim import simulate
from flexpipe_ui.validate import check

ONE_F_ONE_B = Program(rules=Rules(in_flight="p - r"))
GPIPE = Program(rules=Rules(priority=("F", "B"), forwards_first=True))


@pytest.fixture(autouse=True)
def _ops():
    register_recompute()
    register_offload(seconds_per_unit=0.25)
    yield


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 16)])
def test_recompute_trades_a_forward_for_the_activation(p, m):
    base = simulate(ONE_F_ONE_B.schedule(ranks=p, microbatches=m))
    s = ONE_F_ONE_B.with_(extra={"R": "all"}).schedule(ranks=p, microbatches=m)
    assert check(s) == []  # the full scan: the scheduler marks its output valid
    rc = simulate(s)
    # every rank keeps one re-created activation at a time instead of min(p - r, m)
    assert rc.metrics.peak_activation == (1.0,) * p
    assert base.metrics.peak_activation[0] == min(p, m)
    # each R is placed just before its backward and costs one forward (F = 1 per rank here)
    for row in s.order:
        names = [str(a) for a in row]
        for i, a in enumerate(row):
            if a.kind.name == "R":
                assert names[i + 1] == f"{a.stage}B{a.microbatch}"
    busy_extra = sum(rc.metrics.busy) - sum(base.metrics.busy)
    assert busy_extra == pytest.approx(p * m * 1.0)
    assert base.makespan < rc.makespan <= base.makespan + m * 1.0 + 1e-9


def test_recompute_lets_a_tight_memory_cap_keep_more_in_flight():
    cap = 2.0
    plain = simulate(Program(rules=Rules(memory_cap=cap)).schedule(ranks=4, microbatches=8))
    rc = simulate(Program(rules=Rules(memory_cap=cap), extra={"R": "all"}).schedule(ranks=4, microbatches=8))
    assert max(plain.metrics.peak_memory) <= cap and max(rc.metrics.peak_memory) <= cap
    assert rc.makespan < plain.makespan


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8)])
def test_offload_frees_memory_between_forward_and_backward(p, m):
    stages = tuple(range(p - 1))  # the last stage's backward follows its forward at once
    prog = GPIPE.with_(extra={"OFF": stages, "LOAD": stages})
    s = prog.schedule(ranks=p, microbatches=m)
    assert check(s) == []  # the full scan: the scheduler marks its output valid
    off = simulate(s)
    base = simulate(GPIPE.schedule(ranks=p, microbatches=m))
    assert all(off.metrics.peak_activation[r] < base.metrics.peak_activation[r] for r in range(p - 1))
    # copies run on their own stream: compute time is unchanged, the backwards wait for reloads
    assert sum(off.metrics.busy) == pytest.approx(sum(base.metrics.busy))
    assert base.makespan <= off.makespan <= base.makespan + m * 0.25 * (p - 1) + 1e-9
    tl = off.timeline
    for row in s.order:            # a copy is issued where it stands: after the compute action before it
        for i, a in enumerate(row):
            if a.kind.name != "LOAD":
                continue
            before = [x for x in row[:i] if x.kind.stream == "compute"]
            if before:
                assert tl.of(a)[0] >= tl.of(before[-1])[1] - 1e-9
            assert tl.of(f"{a.stage}B{a.microbatch}")[0] >= tl.of(a)[1] - 1e-9   # the backward waits for it


def test_a_user_kind_in_a_few_lines_is_scheduled_simulated_validated_and_drawn():
    # a "checksum" pass on the activation after each forward, on the compute stream
    register_kind(Kind("CK", "other", lambda c: 0.25 * c.f, after=(Dep(frozenset({"F"}), 0),),
                       before=frozenset({"B", "I"}), color="#17becf", description="checksum"))
    try:
        prog = Program(placement=vshape(), rules=Rules(in_flight="2*p"), extra={"CK": (0, 1)})
        plan = prog.plan(ranks=2, microbatches=4)
        assert check(plan.schedule) == []  # the full scan: the scheduler marks its output valid
        res = simulate(plan)
        assert sum(1 for _, _, a in plan.schedule.actions() if a.kind.name == "CK") == 8
        assert res.metrics.busy[0] + res.metrics.busy[1] == pytest.approx(2 * 4 * 3 + 8 * 0.25 * 0.5)
        assert plan_from_dict(plan_to_dict(plan)) == plan
        ns = {}
        exec(plan.to_python(), ns)
        assert ns["plan"] == plan
        pytest.importorskip("plotly")
        from flexpipe_ui.gantt import gantt_figure
        fig = gantt_figure(res, res.costs)
        ck = [t for t in fig.data if str(t.name).startswith("CK")]
        assert ck and ck[0].marker.color == "#17becf" and len(ck[0].x) == 8
    finally:
        unregister_kind("CK")


def test_ops_are_not_registered_on_import_and_reregistering_replaces():
    import importlib
    import flexpipe_ui.ops as ops
    importlib.reload(ops)
    k1 = ops.register_recompute()
    k2 = ops.register_recompute()
    assert get_kind("R") is k2 and k1 == k2
    with pytest.raises(ValueError, match="seconds_per_unit must be >= 0"):
        register_offload(seconds_per_unit=-1)


def test_register_known():
    from flexpipe_ui.ops import register_known
    assert register_known({"F", "R", "LOAD"}) == ["R", "OFF", "LOAD"]
    assert register_known({"F"}) == []


def test_a_lookup_does_not_register_but_loading_a_plan_does():
    """In a fresh process ``get_kind("R")`` is unknown; a plan file naming R loads (and registers R);
    a kind registered inside ``scoped_kinds`` is gone after it."""
    import subprocess
    import sys
    code = """
import pytest
from flexpipe_ui.kinds import KindError, get_kind, kinds, scoped_kinds
from flexpipe_ui.ops import register_offload
from flexpipe_ui.planfile import plan_from_dict
with pytest.raises(KindError):
    get_kind("R")
with scoped_kinds():
    register_offload()
    assert "OFF" in kinds()
assert "OFF" not in kinds()
plan = plan_from_dict({"format": "flexpipe-plan/1", "ranks": 1, "microbatches": 1,
                       "order": {"0": ["0F0", "0R0", "0B0"]}})
assert get_kind("R") is plan.schedule.order[0][1].kind
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
