"""No edit lost: a corrupt autosave is set aside (``*.corrupt-<time>.json``) and the Designer starts
fresh with a message; redo survives a restart; two Designers of the same name never overwrite each
other's autosave."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("ipywidgets")

from flexpipe_ui import Plan  # noqa: E402
from flexpipe_ui.library import build_named  # noqa: E402
from flexpipe_ui.torch_interop import import_torch_schedule  # noqa: E402
from flexpipe_ui.widgets import Designer  # noqa: E402
from flexpipe_ui.widgets.autosave import AutosaveError, read_autosave  # noqa: E402


@pytest.fixture
def plan():
    return build_named("1f1b", None, ranks=2, microbatches=4)


@pytest.fixture
def saved(plan, tmp_path, monkeypatch):
    """A good autosave document with two edits, one undone."""
    monkeypatch.chdir(tmp_path)
    d = Designer(plan, name="c", baseline=None)
    d.move("0F1", 0)
    d.move("1F1", 0)
    d.undo()
    doc = json.loads((tmp_path / "c.autosave.json").read_text())
    (tmp_path / "c.autosave.json").unlink()
    (tmp_path / "c.autosave.json.owner").unlink()
    return doc


def _corruptions(doc):
    step = doc["steps"][0]
    return {
        "top_list": [1, 2], "top_null": None, "top_number": 3, "top_string": "x",
        "format": {**doc, "format": "other/1"}, "no_base": {k: v for k, v in doc.items() if k != "base"},
        "no_steps": {k: v for k, v in doc.items() if k != "steps"}, "steps_dict": {**doc, "steps": {}},
        "steps_null": {**doc, "steps": None}, "step_list": {**doc, "steps": [[1]]},
        "step_unknown_type": {**doc, "steps": [{**step, "type": "Explode"}]},
        "step_from_source": {**doc, "steps": [{"type": "FromText", "text": "x", "microbatches": 1}]},
        "step_missing_field": {**doc, "steps": [{"type": "Move", "rank": 0, "src": 1}]},
        "step_extra_field": {**doc, "steps": [{**step, "bogus": 1}]},
        "step_out_of_range": {**doc, "steps": [{**step, "src": 999}]},
        "step_negative": {**doc, "steps": [{**step, "rank": -1}]},
        "step_rank_range": {**doc, "steps": [{**step, "rank": 77}]},
        "step_type_null": {**doc, "steps": [{**step, "type": None}]},
        "pos_range": {**doc, "pos": 99}, "pos_string": {**doc, "pos": "1"},
        "extra_top": {**doc, "surprise": 1}, "base_bad": {**doc, "base": {"format": "flexpipe-plan/1"}},
        "base_list": {**doc, "base": []}, "load_bad_plan": {**doc, "steps": [{"type": "load", "plan": [1]}]},
        "deep": "[" * 3000 + "]" * 3000, "truncated": json.dumps(doc)[:-20], "bytes": b"\xff\xfe{}",
    }


def test_corrupt_autosaves_are_set_aside_and_designer_starts_fresh(saved, plan, tmp_path):
    cases = _corruptions(saved)
    assert len(cases) >= 25
    for name, bad in cases.items():
        p = tmp_path / "c.autosave.json"
        p.write_bytes(bad if isinstance(bad, bytes) else (bad if isinstance(bad, str) else json.dumps(bad)).encode())
        before = p.read_bytes()
        d = Designer(plan, name="c", baseline=None)          # must not raise
        assert d._pos == 0 and d.plan.schedule.order == plan.schedule.order, name
        assert "corrupt" in d.message and "started fresh" in d.message, (name, d.message)
        kept = sorted(tmp_path.glob("c.autosave.corrupt-*.json"))
        assert kept and kept[-1].read_bytes() == before, name     # the bad file is kept, byte for byte
        for k in kept:
            k.unlink()
        d.move("0F1", 0)                                     # and autosave works again
        assert read_autosave(p).pos == 1, name
        p.unlink()


def test_read_autosave_names_the_field(saved, tmp_path):
    p = tmp_path / "x.autosave.json"
    p.write_text(json.dumps({**saved, "steps": [{"type": "Move", "rank": 0, "src": 1}]}))
    with pytest.raises(AutosaveError, match=r"x\.autosave\.json: steps\[0\] \(Move\) missing \['dst'\]"):
        read_autosave(p)


def test_redo_survives_a_restart(plan, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = Designer(plan, name="r", baseline=None)
    d.move("0F1", 0)
    d.move("1F1", 0)
    after_two = d.plan.schedule.order
    d.undo()
    d2 = Designer(plan, name="r", baseline=None)             # a restarted kernel
    assert d2._pos == 1 and d2.can_redo and "1 to redo" in d2.message
    d2.redo()
    assert d2.plan.schedule.order == after_two


def test_two_designers_of_one_name_keep_both_autosaves(plan, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a = Designer(plan, name="same", baseline=None)
    a.move("0F1", 0)
    b = Designer(plan, name="same", baseline=None)           # restores a's edit and takes the file over
    assert b.plan.schedule.order == a.plan.schedule.order
    b.move("1F1", 0)
    src = a._locate("0F2")[1]
    a.move("0F2", 1)                                         # a must not overwrite b's file
    assert "same-2.autosave.json" in a.message
    assert read_autosave(tmp_path / "same.autosave.json").steps[-1]["rank"] == 1     # b's edit is kept
    a_file = read_autosave(tmp_path / "same-2.autosave.json")
    assert a_file.pos == 2 and a_file.steps[-1] == {"type": "Move", "rank": 0, "src": src, "dst": 1}
    b.move("1F2", 1)
    assert read_autosave(tmp_path / "same.autosave.json").pos == 3
    other = Designer(Plan(import_torch_schedule("gpipe", 2, 4)), name="same", baseline=None)
    other.move("0F1", 0)                                     # another starting plan: its own file
    assert read_autosave(tmp_path / "same.autosave.json").pos == 3
    assert other.autosave_path.name.startswith("same-") and other.autosave_path.name != "same-2.autosave.json"
