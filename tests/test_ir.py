import pytest

from flexpipe_ui import (Action, B, F, I, W, Dep, Kind, ParseError, Plan, Schedule, get_kind,
                         parse_action, register_kind, unregister_kind)
from flexpipe_ui.kinds import KindError


@pytest.mark.parametrize("text,stage,kind,mb", [("2F0", 2, F, 0), ("1I3", 1, I, 3), ("0W5", 0, W, 5),
                                                ("3B1", 3, B, 1), ("12F104", 12, F, 104)])
def test_action_text_round_trips(text, stage, kind, mb):
    a = parse_action(text)
    assert (a.stage, a.kind, a.microbatch) == (stage, kind, mb)
    assert str(a) == text and parse_action(str(a)) == a


@pytest.mark.parametrize("bad", ["", "F0", "2F", "2f0", "2X0", "a1F0", "2 F 0x"])
def test_bad_action_text_names_the_text(bad):
    with pytest.raises(ParseError) as e:
        parse_action(bad, "rank 3, position 7")
    assert repr(bad) in str(e.value) and "rank 3, position 7" in str(e.value)


def test_kind_predicates():
    assert F.is_forward and not F.is_backward
    assert I.is_backward and I.computes_input_grad and not I.computes_weight_grad
    assert W.is_backward and W.computes_weight_grad and W.frees_activation
    assert B.computes_input_grad and B.computes_weight_grad and B.frees_activation
    assert not I.frees_activation


def test_user_kind_registry_round_trip():
    R = Kind("RX", "other", lambda c: c.f, after=(Dep(frozenset({"F"})),), before=frozenset({"I", "B"}))
    register_kind(R)
    try:
        a = parse_action("1RX4")
        assert a.kind is get_kind("RX") and str(a) == "1RX4"
        register_kind(Kind("RX", "other", lambda c: 2 * c.f))  # re-running a cell replaces it
        assert get_kind("RX").cost(type("C", (), {"f": 1.0})()) == 2.0
    finally:
        unregister_kind("RX")
    with pytest.raises(ParseError):
        parse_action("1RX4")


@pytest.mark.parametrize("name", ["F", "r", "R2", "SEND_F", "OVERLAP_F_B"])
def test_register_kind_rejects_bad_names(name):
    with pytest.raises(KindError):
        register_kind(Kind(name, "other", lambda c: 0.0))


def test_schedule_from_text_and_back():
    text = "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1"
    s = Schedule.from_text(text)
    assert s.ranks == 2 and s.microbatches == 2 and s.placement == (0, 1)
    assert Schedule.from_text(s.to_text()) == s
    assert s.stages_of(1) == (1,)


def test_schedule_from_text_reports_line():
    with pytest.raises(ParseError) as e:
        Schedule.from_text("r0: 0F0 0F1\nr1: 1F0 1Q0")
    assert "line 2" in str(e.value) and "1Q0" in str(e.value)


def test_plan_partition_must_match_stages():
    s = Schedule.from_text("r0: 0F0 0B0\nr1: 1F0 1B0")
    Plan(s, ((0, 1), (2,)))
    with pytest.raises(ValueError):
        Plan(s, ((0, 1, 2),))


def test_derived_values_are_declared_and_not_part_of_the_value():
    from dataclasses import replace
    from flexpipe_ui.graph import compile_schedule
    from flexpipe_ui.validate import validate, validated
    s = Schedule.from_text("r0: 0F0 0B0\nr1: 1F0 1B0")
    t = Schedule.from_text("r0: 0F0 0B0\nr1: 1F0 1B0")
    assert not validated(s) and "_derived" not in repr(s)
    g = compile_schedule(s)
    assert validate(s) is s and validated(s) and compile_schedule(s) is g
    assert s == t and hash(s) == hash(t) and not validated(t)      # the verdict is not the value
    assert not validated(replace(s, order=s.order))                 # a new schedule starts afresh
    assert s.position[(1, "B", 0)] == (1, 1)
