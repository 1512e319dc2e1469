"""The editor's incremental path: a drag re-solves from the shown plan (``simulate(warm=)``), the
edited schedule inherits what a reorder cannot change (``graph.reordered``), the redraw's columns
come from the schedule's flat arrays and the wire reuses the packed arrays. Each shortcut must give
exactly what the full path gives: same timeline bit for bit, same findings, same columns, same
bytes."""
from __future__ import annotations

import numpy as np
import pytest

from flexpipe_ui import Plan, Schedule, simulate
from flexpipe_ui import edits, graph, sim
from flexpipe_ui.library import build_named
from flexpipe_ui.presets import preset
from flexpipe_ui.timeline import memory_at, memory_events
from flexpipe_ui.validate import ScheduleError, check, static_problems


def _fresh(s: Schedule) -> Schedule:
    """The same schedule with nothing derived (as if loaded from a file)."""
    return Schedule(s.ranks, s.microbatches, s.placement, s.order)


def _moves(s: Schedule, rng, k: int):
    for _ in range(k):
        r = int(rng.integers(s.ranks))
        n = len(s.order[r])
        i, j = (int(x) for x in rng.integers(n, size=2))
        yield edits.Move(r, i, j) if i != j else edits.Swap(r, 0, n - 1)


@pytest.mark.parametrize("name,p,m", [("zb-h1", 4, 8), ("interleaved-1f1b", 4, 8), ("zb-v", 4, 8),
                                      ("dualpipe-v", 4, 10)])
def test_warm_simulation_equals_the_cold_one_bit_for_bit(name, p, m):
    """Random moves and swaps, each simulated warm from the previous result and cold from scratch:
    the same starts and ends bit for bit, or the same deadlock verdict."""
    problem = preset("gpt", ranks=p, microbatches=m)
    plan = build_named(name, problem)
    prev = simulate(plan, problem)
    rng = np.random.default_rng(7)
    seen_valid = seen_bad = 0
    for step in _moves(plan.schedule, rng, 40):
        child = plan.edit(step)
        cold_plan = Plan(_fresh(child.schedule), child.partition)
        try:
            cold = simulate(cold_plan, problem)
        except ScheduleError as e:
            with pytest.raises(ScheduleError) as w:
                simulate(child, problem, warm=prev, check_after=4)
            assert str(w.value) == str(e)
            seen_bad += 1
            continue
        warm = simulate(child, problem, warm=prev)
        assert np.array_equal(warm.timeline.start, cold.timeline.start)
        assert np.array_equal(warm.timeline.end, cold.timeline.end)
        assert warm.metrics == cold.metrics
        assert warm.rounds <= cold.rounds + 1
        plan, prev = child, warm
        seen_valid += 1
    assert seen_valid >= 5 and seen_bad >= 5        # both paths were exercised


def test_a_warm_start_from_an_unrelated_result_is_still_exact():
    """Warm values are only a starting point: from another plan's result (other actions, other
    costs) the fixpoint is the same."""
    problem = preset("gpt", ranks=4, microbatches=8)
    a = build_named("zb-h1", problem)
    other_problem = preset("gpt_heavy_head", ranks=4, microbatches=8)
    other = simulate(build_named("1f1b", other_problem), other_problem)
    cold = simulate(Plan(_fresh(a.schedule), a.partition), problem)
    warm = simulate(a, problem, warm=other)
    assert np.array_equal(warm.timeline.end, cold.timeline.end)


def test_a_reorder_inherits_flat_arrays_names_and_structure_verdict():
    problem = preset("gpt", ranks=4, microbatches=8)
    plan = build_named("zb-v", problem)
    s = plan.schedule
    assert graph.structure_problems(s) == [] and graph.action_names(s)
    rng = np.random.default_rng(3)
    for step in _moves(s, rng, 20):
        child = step.apply(s)
        fresh = _fresh(child)
        got, want = graph.flat_arrays(child), graph.flat_arrays(fresh)
        assert got[0] == want[0] and got[1] == want[1]      # kinds numbered in first-seen order
        for x, y in zip(got[2:], want[2:]):
            assert np.array_equal(x, y)
        assert graph.action_names(child) == graph.action_names(fresh)
        assert static_problems(child) == static_problems(fresh)
        assert check(child) == check(fresh)
        assert graph.locate(child, str(child.order[step.rank][0])) == (step.rank, 0)
        s = child
    assert graph.locate(s, "99F99") is None


def test_insert_and_remove_do_not_inherit():
    """Insert and Remove change which actions a rank has: their schedules find their own
    structure problems (here a missing and then a duplicated action)."""
    s = build_named("1f1b", ranks=2, microbatches=4).schedule
    assert graph.structure_problems(s) == []
    gone = edits.Remove(0, 0).apply(s)
    assert any("missing" in f.message for f in graph.structure_problems(gone))
    twice = edits.Insert(1, 0, "1F0").apply(s)
    assert any("appears 2 times" in f.message for f in graph.structure_problems(twice))


def test_memory_events_are_found_once_and_read_only():
    problem = preset("gpt", ranks=4, microbatches=8)
    res = simulate(build_named("zb-h1", problem), problem)
    r1 = memory_events(res.timeline, res.costs)
    assert memory_events(res.timeline, res.costs) is r1
    with pytest.raises(ValueError):
        r1[2][0] = 1.0
    # memory_at per rank equals a direct per-rank reading of the same events
    at, curves = memory_at(res.timeline, res.costs)
    r_ev, t_ev, d_ev = r1
    for r, (times, vals) in enumerate(curves):
        sel = r_ev == r
        assert np.array_equal(times, np.r_[0.0, t_ev[sel]])
        mine = res.timeline.rank == r
        idx = np.searchsorted(times, res.timeline.start[mine], side="right") - 1
        assert np.array_equal(at[mine], vals[idx])
    assert max(max(v) for _, v in curves) == pytest.approx(max(res.metrics.peak_memory))


def test_redraw_columns_and_wire_bytes_equal_the_full_pass():
    """The columns from the schedule's arrays equal those read off the action objects, and the wire
    built from the packed arrays carries the same bytes as one built from the lists."""
    from flexpipe_ui.widgets.gantt_editor import GanttEditor, _text_columns, data_to_wire
    from flexpipe_ui.timeline import Timeline
    problem = preset("gpt", ranks=4, microbatches=8)
    res = simulate(build_named("zb-v", problem), problem)
    tl = res.timeline
    fast = _text_columns(tl)
    slow = _text_columns(Timeline(tl.ranks, tuple(tl.actions), tl.rank, tl.start, tl.end))   # no schedule
    for key in ("name", "color", "label"):
        assert fast[key] == slow[key]
    assert np.array_equal(fast["stage"], slow["stage"]) and np.array_equal(fast["side"], slow["side"])
    ed = GanttEditor()
    ed.show(tl, res.costs, memory_limit=9.0)
    a, b = data_to_wire(ed.data, ed)["bars"], data_to_wire(ed.data)["bars"]
    for key in ("rank", "start", "end", "stage", "index", "side", "mem"):
        assert bytes(a[key]) == bytes(b[key]), key
    assert [a["palette"][k] for k in np.frombuffer(a["color"], "<u2")] == ed.data["bars"]["color"]
    r = int(tl.rank[0])
    want = sorted(((nm, (s + e) / 2) for nm, rr, s, e in zip(ed.data["bars"]["name"], ed.data["bars"]["rank"],
                   ed.data["bars"]["start"], ed.data["bars"]["end"]) if rr == r), key=lambda x: x[1])
    assert ed.bar_centers(r) == want
