"""Edits: each step's semantics and errors, the replayable trace, undo, and ``to_python``."""
import pytest

from flexpipe_ui.dsl import Program, Rules, vshape
from flexpipe_ui.edits import (EditError, FromText, Insert, Move, PinBefore, Remove, Swap,
                               apply_edit, replay, undo)
from flexpipe_ui.ir import Plan, Schedule
from flexpipe_ui.library import build_named
from flexpipe_ui.planfile import FromFile, load_plan, save_plan
from flexpipe_ui.problem import Layer, Problem
from flexpipe_ui.validate import ScheduleError, validate

S = Schedule.from_text("r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1")


def row(s, r=0):
    return [str(a) for a in s.order[r]]


def test_edit_steps():
    assert row(apply_edit(S, Move(0, 0, 2))) == ["0F1", "0B0", "0F0", "0B1"]
    assert row(apply_edit(S, Move(0, 3, 0))) == ["0B1", "0F0", "0F1", "0B0"]
    assert row(apply_edit(S, Swap(0, 1, 2))) == ["0F0", "0B0", "0F1", "0B1"]
    assert row(apply_edit(S, Insert(0, 4, "0F2"))) == ["0F0", "0F1", "0B0", "0B1", "0F2"]
    assert row(apply_edit(S, Remove(1, 0)), 1) == ["1B0", "1F1", "1B1"]
    assert row(apply_edit(S, PinBefore("0B0", "0F1"))) == ["0F0", "0B0", "0F1", "0B1"]
    assert row(apply_edit(S, PinBefore("0F1", "0F0"))) == ["0F1", "0F0", "0B0", "0B1"]
    assert apply_edit(S, Swap(1, 0, 0)) == S
    assert S.order[0][0].kind.name == "F"  # schedules are immutable: the original is unchanged


@pytest.mark.parametrize("edit, match", [
    (Move(2, 0, 1), r"rank 2 out of range: the schedule has 2 ranks \(0..1\)"),
    (Move(0, 4, 0), r"src 4 out of range: rank 0 has 4 actions \(positions 0..3\)"),
    (Swap(0, 0, -1), "j -1 out of range"),
    (Insert(0, 5, "0F2"), r"index 5 out of range: rank 0 has 4 actions \(positions 0..4\)"),
    (Insert(0, 0, "zz"), "cannot parse action 'zz'"),
    (Remove(1, 9), "index 9 out of range"),
    (PinBefore("0F0", "1F0"), "0F0 is on rank 0 but 1F0 is on rank 1"),
    (PinBefore("0F7", "0F0"), "0F7 is not in the schedule"),
    ("swap", "not an edit step"),
])
def test_bad_edits_say_why(edit, match):
    with pytest.raises(EditError, match=match):
        apply_edit(S, edit)


def test_edits_do_not_validate_but_the_validator_explains():
    bad = apply_edit(S, Swap(1, 0, 1))  # 1B0 before its forward
    with pytest.raises(ScheduleError, match="needs 1F0, which comes later"):
        validate(bad)


def _exec(src):
    ns = {}
    exec(src, ns)
    return ns["plan"]


def test_trace_replays_and_prints_as_python():
    plan = build_named("zb-h1", None, ranks=4, microbatches=8)
    steps = [Swap(3, 2, 3), PinBefore("0W0", "0I1"), Move(1, 5, 4), Insert(2, 0, "2F0"), Remove(2, 0)]
    edited = plan
    for st in steps:
        edited = edited.edit(st)
    assert edited.trace[1:] == tuple(steps) and edited.meta["edits"] == len(steps)
    assert replay(edited.trace) == edited
    back = _exec(edited.to_python())
    assert back == edited and back.trace == edited.trace
    assert "plan = plan.edit(PinBefore(action='0W0', before='0I1'))" in edited.to_python()


def test_undo():
    plan = build_named("1f1b", None, ranks=3, microbatches=4)
    a = plan.edit(Swap(0, 2, 3))
    b = a.edit(Move(1, 0, 2))
    assert undo(b) == a and undo(b).trace == a.trace
    assert undo(undo(b)).schedule == plan.schedule
    assert undo(plan) == plan


def test_program_source_and_problem_round_trip():
    prob = Problem(ranks=2, microbatches=4, comm=0.2,
                   layers=tuple(Layer(f=1.0 + i, b=1.5, w=0.5, act=1.0, mem=0.25) for i in range(4)))
    plan = Program(placement=vshape(), rules=Rules(backward="split", in_flight="2*p")).plan(problem=prob)
    plan = plan.edit(Swap(0, 1, 2))
    back = _exec(plan.to_python())
    assert back == plan and back.partition == plan.partition and back.trace == plan.trace


def test_plan_without_trace_and_loaded_file(tmp_path):
    s = Schedule.from_text("r0: 0F0 0B0\nr1: 1F0 1B0")
    plan = Plan(s, meta={"note": "by hand", "n": [1, 2]})
    assert _exec(plan.to_python()) == plan
    edited = plan.edit(Insert(0, 0, "0F0")).edit(Remove(0, 0))
    assert isinstance(edited.trace[0], FromText) and _exec(edited.to_python()) == edited
    path = tmp_path / "p.json"
    save_plan(build_named("gpipe", None, ranks=2, microbatches=2), path)
    loaded = FromFile(str(path)).build().edit(Swap(0, 0, 1))
    src = loaded.to_python()
    assert f"load_plan({str(path)!r})" in src and _exec(src) == loaded
    assert load_plan(path).trace == ()


def test_hand_plan_is_a_replayable_source():
    from flexpipe_ui.dsl import hand_plan
    plan = hand_plan("r0: 0F0 3F0 3B0 0B0\nr1: 1F0 2F0 2B0 1B0", placement=vshape(), meta={"by": "me"})
    assert plan.schedule.placement == (0, 1, 1, 0) and isinstance(plan.trace[0], FromText)
    edited = plan.edit(Swap(0, 0, 1))
    with pytest.raises(ScheduleError):
        validate(edited.schedule)
    assert _exec(edited.to_python()) == edited and undo(edited) == plan
