import pytest

from flexpipe_ui import Schedule, ScheduleError, validate
from oracles import gpipe, onef1b, onef1b_rows


def _err(rows, m=None, placement=None):
    s = Schedule.from_rows(rows, m, placement)
    with pytest.raises(ScheduleError) as e:
        validate(s)
    return e.value


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 5, 16])
def test_reference_orders_are_valid(p, m):
    assert validate(onef1b(p, m)) is not None
    assert validate(gpipe(p, m, split=True)) is not None


def test_duplicate_and_out_of_range_named():
    rows = onef1b_rows(2, 2)
    rows[0].insert(1, "0F0")
    rows[1].append("1F2")
    e = _err(rows, 2)
    assert set(e.actions) >= {"0F0", "1F2"}
    assert "appears 2 times" in str(e) and "microbatch 2 out of range" in str(e)


def test_missing_backward_named():
    rows = onef1b_rows(2, 2)
    rows[1].remove("1B1")
    e = _err(rows, 2)
    assert "1B1" in e.actions[0] and "missing actions" in str(e)


def test_split_and_fused_backward_together():
    rows = onef1b_rows(2, 1)
    rows[1] += ["1I0", "1W0"]
    e = _err(rows, 1)
    assert set(e.actions) == {"1B0", "1I0", "1W0"}


def test_action_on_wrong_rank():
    e = _err([["0F0", "0B0", "1F0"], ["1B0"]], 1, placement=(0, 1))
    assert e.actions == ("1F0",) and "placed on rank 1" in str(e)


def test_local_order_violation_marks_both_cells():
    e = _err([["0F0", "0B0"], ["1B0", "1F0"]], 1)
    assert set(e.actions) == {"1B0", "1F0"}
    assert set(e.cells) == {(1, 0), (1, 1)}
    assert "comes later" in str(e) and "[1B0]" in str(e)


def test_deadlock_reports_wait_cycle():
    # rank 0 waits for 1I0 before its F1; rank 1 needs 0F1... wait: 1F1 needs 0F1, which is after 0I0
    rows = [["0F0", "0I0", "0F1", "0I1", "0W0", "0W1"],
            ["1F0", "1F1", "1I0", "1I1", "1W0", "1W1"]]
    # rank 1 runs 1F1 before 1I0; 1F1 needs 0F1 which waits on 0I0 which needs 1I0: a cycle
    e = _err(rows, 2)
    msg = str(e)
    assert "deadlock among ranks [0, 1]" in msg
    assert "rank 0 waits at 0I0 for 1I0 (rank 1)" in msg and "rank 1 waits at 1F1 for 0F1 (rank 0)" in msg
    assert {(0, 1), (1, 1)} <= set(e.cells)


def test_three_rank_cycle():
    rows = [["0F0", "0F1", "0B1", "0B0"],
            ["1F0", "1B0", "1F1", "1B1"],
            ["2F1", "2F0", "2B0", "2B1"]]
    e = _err(rows, 2)
    assert "deadlock" in str(e)


def test_grid_window_for_long_schedules():
    rows = onef1b_rows(2, 40)
    rows[1][50], rows[1][51] = rows[1][51], rows[1][50]  # swap an F after its B
    e = _err(rows, 40)
    assert "steps" in str(e) and "of 80" in str(e)
