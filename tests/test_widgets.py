"""Widgets without a browser: we act as the front end (set the traits a drag, click or key press
sets; click buttons) and check the plan, the messages and what would be drawn."""
import json

import numpy as np
import pytest

from flexpipe_ui import Plan, Schedule, load_plan, simulate
from flexpipe_ui.edits import Move, Swap
from flexpipe_ui.torch_interop import import_torch_schedule
from flexpipe_ui.widgets import Compare, Designer, GanttEditor
from flexpipe_ui.widgets.gantt_editor import pack_timeline


@pytest.fixture
def zbv():
    return Plan(import_torch_schedule("zb-v", 4, 8))


@pytest.fixture
def designer(zbv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return Designer(zbv, name="t", baseline=33.0)  # GPipe 4x8 closed form (m+p-1)*3 = 33


def drag(d, name, before=None, after=None, rank=None):
    """What the browser sends when ``name`` is let go just before/after another bar's center."""
    r = d._locate(name)[0] if rank is None else rank
    centers = dict(d.editor.bar_centers(d._locate(name)[0]))
    t = centers[before] - 1e-3 if before else centers[after] + 1e-3
    d.editor.drop = {"name": name, "rank": r, "time": t, "seq": np.random.rand()}


def row(d, r=0):
    return [str(a) for a in d.plan.schedule.order[r]]


def test_initial_state_and_header(designer):
    assert designer.valid and designer.makespan == pytest.approx(25.5)
    h = designer.header.value
    assert "makespan <b>25.5</b>" in h and "bubble" in h and "peak memory" in h
    assert f"{33 / 25.5:.3f}×" in h
    data = designer.editor.data
    assert len(data["bars"]["name"]) == designer.plan.schedule.num_actions
    assert len(data["memory"]) == 4 and data["version"] == 1


def test_drag_reorders_validates_and_redraws(designer, tmp_path):
    v0 = designer.editor.version
    drag(designer, "0F1", before="0F0")
    assert row(designer)[:2] == ["0F1", "0F0"]
    assert designer.plan.trace[-1] == Move(0, 1, 0)
    assert designer.valid and designer.editor.version == v0 + 1
    bars = designer.editor.data["bars"]
    start = dict(zip(bars["name"], bars["start"]))
    assert start["0F1"] < start["0F0"]
    assert designer.makespan == simulate(designer.plan).makespan
    saved = json.loads((tmp_path / "t.autosave.json").read_text())
    assert saved["steps"] == [{"type": "Move", "rank": 0, "src": 1, "dst": 0}]
    assert saved["plan"]["order"]["0"][:2] == ["0F1", "0F0"]
    # the history prints as Python that rebuilds the same plan
    ns = {}
    exec(designer.plan.to_python(), ns)
    assert ns["plan"].schedule.order == designer.plan.schedule.order


def test_drop_on_other_rank_or_in_place_is_not_an_edit(designer):
    before = designer.plan
    v0 = designer.editor.version
    drag(designer, "0F2", before="0F1", rank=2)
    assert designer.plan is before and "runs on rank 0" in designer.message
    assert designer.editor.version == v0 + 1          # redrawn: the bar snaps back
    drag(designer, "0F2", after="0F1")                  # its own place
    assert designer.plan is before and "its own place" in designer.message


def test_invalid_edit_is_shown_highlighted_and_undoable(designer):
    ok = designer.plan
    w = row(designer).index("0W0")
    designer.move("0W0", row(designer).index("0I0"))    # W before its I: breaks a dependency
    assert not designer.valid
    assert set(designer.editor.highlight) >= {"0W0", "0I0"}
    assert "needs" in designer.status.value and "undo" in designer.status.value
    assert "INVALID" in designer.header.value
    assert designer.editor.data["memory"] == []          # drawn packed, not simulated
    designer.btn_undo.click()
    assert designer.valid and designer.plan.schedule.order == ok.schedule.order
    assert designer.editor.highlight == []
    designer.btn_redo.click()
    assert not designer.valid and row(designer).index("0W0") < w


def test_deadlock_is_reported_with_both_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = Designer(Schedule.from_text("r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1F1 1B0 1B1"), baseline=None)
    d.move("0B0", 1)
    assert not d.valid and "deadlock" in d.message + d.status.value
    assert {"0B0", "1F1"} <= set(d.editor.highlight)
    d.undo()
    assert d.valid


def test_buttons_and_keys(designer):
    designer.sel_box.value = "0F3"
    assert designer.selected == "0F3" == designer.editor.selected
    i = row(designer).index("0F3")
    designer.btn_later.click()
    assert row(designer).index("0F3") == i + 1
    designer.editor.command = {"cmd": "earlier", "seq": 1}
    assert row(designer).index("0F3") == i
    designer.btn_swap.click()
    assert designer.plan.trace[-1] == Swap(0, i, i + 1)
    designer.editor.command = {"cmd": "undo", "seq": 2}
    designer.editor.command = {"cmd": "undo", "seq": 3}
    assert row(designer).index("0F3") == i + 1
    designer.editor.command = {"cmd": "redo", "seq": 4}
    assert row(designer).index("0F3") == i
    assert designer.errors == []


def test_errors_go_to_the_output(designer):
    designer.selected = ""
    designer.btn_later.click()
    assert designer.errors and "select an action first" in designer.errors[-1]
    assert any("select an action first" in o.get("text", "") for o in designer.out.outputs)
    designer.editor.command = {"cmd": "bogus", "seq": 9}
    assert "unknown editor command" in designer.errors[-1]


def test_autosave_restores_after_restart(zbv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = Designer(zbv, name="r", baseline=None)
    d.move("0F1", 0)
    d.selected = "1F2"
    d.nudge(-1)
    d.move("0F0", 0)
    d.undo()                                            # the redo entry is kept (autosave /2)
    order = d.plan.schedule.order
    d2 = Designer(zbv, name="r", baseline=None)          # a "restarted kernel"
    assert d2.plan.schedule.order == order and "restored 2 edits" in d2.message
    assert d2.plan.trace[1:] == d.plan.trace[1:]
    d2.undo()
    d2.undo()
    assert d2.plan.schedule.order == zbv.schedule.order
    other = Designer(Plan(import_torch_schedule("gpipe", 4, 8)), name="r", baseline=None)
    assert "another starting plan" in other.message and other._pos == 0


def test_save_load_and_exports(designer, tmp_path):
    designer.move("0F1", 0)
    designer.path_box.value = str(tmp_path / "mine.plan.json")
    designer.btn_save.click()
    saved = load_plan(tmp_path / "mine.plan.json")
    assert saved.schedule.order == designer.plan.schedule.order
    designer.undo()
    designer.btn_load.click()
    assert designer.plan.schedule.order == saved.schedule.order and designer.can_undo
    for what, suffix in (("html", ".html"), ("csv", ".csv"), ("trace", ".trace.json")):
        p = designer.export(what)
        assert p.exists() and p.name.endswith(suffix), what
    assert designer.errors == []


def test_display_bundle(designer):
    b = designer._repr_mimebundle_()
    assert "text/plain" in b and "application/vnd.jupyter.widget-view+json" in b
    assert b["text/plain"].startswith("Designer(")


def test_pack_timeline_matches_simulation():
    res = simulate(import_torch_schedule("gpipe", 3, 4))
    d = pack_timeline(res.timeline, res.costs, memory_limit=2.0, version=7)
    assert d["version"] == 7 and d["ranks"] == 3 and d["makespan"] == res.makespan
    assert d["bars"]["start"] == list(np.round(res.timeline.start, 9))
    assert [max(c["v"]) for c in d["memory"]] == list(res.metrics.peak_memory)
    GanttEditor().show(res.timeline, res.costs)  # constructs without a front end


def test_compare_table_and_moves():
    a = import_torch_schedule("gpipe", 4, 8)
    b = import_torch_schedule("zb-v", 4, 8)
    edited = a.with_order([a.order[0][1:2] + a.order[0][:1] + a.order[0][2:]] + list(a.order[1:]))
    cmp = Compare([("GPipe", a), ("ZB-V", b), ("edited", edited)], memory_limit=7.0)
    sp = cmp.speedups()
    assert sp["GPipe"] == 1.0 and sp["ZB-V"] == pytest.approx(33 / 25.5)
    html = cmp.table.value
    assert "1.294×" in html and "background:#d8f5d0" in html and "outline:2px solid #c00" in html
    # the edited row: two actions moved, and they are outlined in its Gantt
    assert ">2</td>" in html
    widths = [t.marker.line.width for t in cmp.figure.data if t.name and t.name.startswith("F")]
    assert any(np.max(np.atleast_1d(w)) == 3.0 for w in widths)
    cmp.baseline = 1
    assert "speedup vs ZB-V" in cmp.table.value
    with pytest.raises(ValueError, match="at least two"):
        Compare([("one", a)])


def test_one_history_edits_reset_and_load_survive_a_restart(zbv, tmp_path, monkeypatch):
    """The edits live in the plans' traces (undoing an edit gives ``edits.undo`` of the plan);
    a reset and a loaded file are history entries too, and all of them replay from the autosave."""
    from flexpipe_ui.edits import undo
    monkeypatch.chdir(tmp_path)
    d = Designer(zbv, name="h", baseline=None)
    d.move("0F1", 0)
    assert undo(d.plan) == d.history[-2]
    d.path_box.value = str(tmp_path / "one.plan.json")
    d.save()
    d.reset()
    assert d.plan is d.history[0] and "reset" in d.message
    d.load()
    d.move("1F2", 0)
    orders = [p.schedule.order for p in d.history]
    d2 = Designer(zbv, name="h", baseline=None)
    assert [p.schedule.order for p in d2.history] == orders and "restored 4 edits" in d2.message
    d2.undo()
    assert d2.plan.schedule.order == d.history[-2].schedule.order and "load" in d2.message


def test_editor_data_travels_as_binary_columns():
    """GanttEditor.data on the wire: numeric columns as little-endian buffers that decode to the
    very numbers of pack_timeline, names and labels joined, colours as a palette (data_to_wire)."""
    from ipywidgets.widgets.widget import _remove_buffers

    from flexpipe_ui.widgets.gantt_editor import GanttEditor, data_to_wire
    res = simulate(import_torch_schedule("zb-v", 4, 8))
    ed = GanttEditor()
    ed.show(res.timeline, res.costs, memory_limit=9.0)
    plain = ed.data
    state, paths, buffers = _remove_buffers(ed.get_state(["data"]))
    assert buffers and all(p[0] == "data" for p in paths)
    json.dumps(state)                                   # the rest is small JSON
    wire = data_to_wire(plain)
    b = wire["bars"]
    assert b["name"].split("\n") == plain["bars"]["name"] and b["label"].split("\n") == plain["bars"]["label"]
    for key, dtype in (("start", "<f8"), ("end", "<f8"), ("rank", "<i4"), ("mem", "<f8")):
        assert np.frombuffer(b[key], dtype).tolist() == plain["bars"][key]
    assert [b["palette"][k] for k in np.frombuffer(b["color"], "<u2")] == plain["bars"]["color"]
    assert [np.frombuffer(c["v"], "<f8").tolist() for c in wire["memory"]] == [c["v"] for c in plain["memory"]]
    assert data_to_wire({}) == {}
