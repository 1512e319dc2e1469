"""Issue 11: numbers match their labels (hover, embedded problems, unit costs), CLI overrides and
progress, the AutoPanel is the search (never worse than the library, readable candidates)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from flexpipe_ui import presets, simulate
from flexpipe_ui.cli import main
from flexpipe_ui.gantt import gantt_figure
from flexpipe_ui.library import build_named
from flexpipe_ui.planfile import embedded_problem, load_plan, save_plan
from flexpipe_ui.torch_interop import import_torch_schedule


def test_gantt_hover_duration_is_the_duration_not_the_end():
    problem = presets.preset("gpt", ranks=4, microbatches=8)
    res = simulate(build_named("zb-v", problem), problem)
    fig = gantt_figure(res, memory_limit=problem.memory_limit)
    bars = [t for t in fig.data if t.type == "bar" and t.name != "idle"]
    assert bars
    for t in bars:
        assert "dur %{customdata[6]" in t.hovertemplate and "%{x" not in t.hovertemplate
        cd = np.asarray(t.customdata, dtype=object)
        start, end, dur = cd[:, 1].astype(float), cd[:, 2].astype(float), cd[:, 6].astype(float)
        assert np.allclose(dur, end - start) and np.allclose(np.asarray(t.x, float), end - start)
        assert " ms" in t.hovertemplate and "MiB" in t.hovertemplate
    assert "ms" in fig.layout.title.text and "MiB" in fig.layout.title.text
    # memory ticks never in scientific notation
    mem_axes = [fig.layout[k] for k in fig.layout if k.startswith("yaxis") and k != "yaxis"]
    assert mem_axes and all(ax.tickformat == ",.0f" for ax in mem_axes)


def test_unit_costs_are_said_loudly():
    res = simulate(import_torch_schedule("gpipe", 3, 4))
    assert gantt_figure(res, unit_costs=True).layout.title.text.startswith("UNIT COSTS")
    assert "UNIT COSTS" not in gantt_figure(res).layout.title.text


def test_stage_colouring_and_action_labels_for_v_placements():
    res = simulate(import_torch_schedule("zb-v", 4, 8))
    fig = gantt_figure(res)                      # a V rank hosts two stages: labels name the action
    f = next(t for t in fig.data if t.name and t.name.startswith("F"))
    assert set(f.text) == {str(a) for a in res.timeline.actions if a.kind.name == "F"}
    fig = gantt_figure(res, color_by="stage", window=(0.0, 10.0))
    f = next(t for t in fig.data if t.name and t.name.startswith("F"))
    assert len(set(f.marker.color)) == res.timeline.schedule.num_stages
    assert list(fig.layout.xaxis.range) == [0.0, 10.0]


def test_auto_plan_carries_its_problem_and_show_uses_it(tmp_path, capsys):
    out, prob = tmp_path / "auto.json", tmp_path / "p.json"
    assert main(["auto", "--preset", "gpt", "--ranks", "4", "--microbatches", "8", "-o", str(out),
                 "--write-problem", str(prob), "-q", "--max-evals", "20"]) == 0
    printed = capsys.readouterr().out
    written = json.loads(prob.read_text())
    assert written["ranks"] == 4 and written["microbatches"] == 8
    plan = load_plan(out)
    problem = embedded_problem(plan)
    assert problem is not None and problem.to_dict() == written
    assert main(["simulate", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert d["unit_costs"] is False and "UNIT COSTS" not in cap.err
    assert d["makespan"] == pytest.approx(simulate(plan, problem).makespan)
    assert f"{d['makespan']:.6g}" in printed               # the figure auto printed is what show says


def test_plan_without_problem_says_unit_costs(tmp_path, capsys):
    out = tmp_path / "p.json"
    save_plan(import_torch_schedule("gpipe", 3, 4), out)
    assert main(["simulate", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["unit_costs"] is True and "UNIT COSTS" in cap.err


def test_auto_rejects_bad_overrides(capsys):
    assert main(["auto", "--preset", "gpt", "--ranks", "0", "-o", "/tmp/x.json"]) == 2
    assert "argument --ranks: must be >= 1" in capsys.readouterr().err


def test_import_torch_reports_progress(tmp_path, capsys):
    assert main(["import-torch", "gpipe", "--ranks", "2", "--microbatches", "2", "-o", str(tmp_path / "t.json")]) == 0
    assert "building torch's gpipe schedule" in capsys.readouterr().err


def test_heartbeat_prints_while_a_step_runs():
    import io
    import time
    from flexpipe_ui.progress import heartbeat
    buf = io.StringIO()
    with heartbeat("starting workers", every=0.05, stream=buf):
        time.sleep(0.3)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "starting workers..." and any(l.strip().startswith("still starting workers") for l in lines)


def test_auto_panel_never_worse_than_library_even_with_a_tiny_time_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                 # "open in editor" autosaves beside the notebook (cwd)
    from flexpipe_ui.widgets import AutoPanel
    panel = AutoPanel(preset="gpt", ranks=4, microbatches=8, time_limit=1e-6, top=3)
    panel.run(wait=True)
    assert panel.error is None, panel.status
    problem = panel.problem()
    library = min(simulate(build_named(n, problem), problem).makespan for n in ("1f1b", "zb-v", "zb-h1"))
    assert panel.result.makespan <= library + 1e-9
    assert panel.result.best_seed is not None and panel.result.makespan <= panel.result.best_seed[1].makespan
    # the chart is drawn (the final best), and the candidates say what differs, with units
    assert any(t.type == "bar" for t in panel.figure.data)
    assert panel.chart.outputs and "application/vnd.plotly.v1+json" in panel.chart.outputs[0]["data"]
    labels = [lab for lab, _ in panel.w_candidates.options]
    assert all(" ms · peak " in lab and " MiB · " in lab and "/rank" in lab and "backward" in lab for lab in labels)
    # open in editor: shown in the panel's own output area
    d = panel.open_selected()
    assert d is panel.designer and len(panel.out.outputs) == 1
    assert "application/vnd.jupyter.widget-view+json" in panel.out.outputs[0]["data"]


def test_auto_panel_calls_auto_search_with_keywords_from_one_place():
    from flexpipe_ui.widgets import AutoPanel
    panel = AutoPanel(preset="gpt", ranks=4, microbatches=8, time_limit=0)
    opts = panel.search_options()
    assert opts["time_limit"] is None and opts["progress"] == panel._on_progress
    import inspect
    from flexpipe_ui.widgets import auto_panel
    src = inspect.getsource(auto_panel)
    assert src.count("auto_search(") == 1 and "auto_search(problem, **self.search_options(" in src


def test_compare_says_other_actions_instead_of_zero():
    from flexpipe_ui.widgets import Compare
    problem = presets.preset("gpt", ranks=4, microbatches=8)
    zbv = build_named("zb-v", problem)
    edited = zbv.edit(__import__("flexpipe_ui.edits", fromlist=["Move"]).Move(0, 1, 0))
    cmp = Compare({"ZB-V": zbv, "edited": edited, "1F1B": build_named("1f1b", problem)}, problem)
    html = cmp.table.value
    assert "other actions" in html and ">2</td>" in html and "makespan (ms)" in html
    assert "time (ms)" in cmp.figure.layout.xaxis3.title.text or any(
        "time (ms)" in (cmp.figure.layout[k].title.text or "") for k in cmp.figure.layout if k.startswith("xaxis"))


def test_designer_uses_the_embedded_problem(tmp_path):
    from flexpipe_ui.widgets import Designer
    problem = presets.preset("gpt", ranks=4, microbatches=8)
    path = tmp_path / "p.json"
    save_plan(build_named("zb-v", problem), path, problem=problem)
    d = Designer(load_plan(path), autosave=False)
    assert not d.unit_costs and d.makespan == pytest.approx(simulate(build_named("zb-v", problem), problem).makespan)
    assert "ms" in d.header.value and "fp-legend" in d.legend.value
    u = Designer(import_torch_schedule("gpipe", 3, 4), autosave=False)
    assert u.unit_costs and "UNIT COSTS" in u.header.value
