"""AutoPanel and LaunchPanel driven from code (what their buttons do), without a browser.

The launch tests start real worker processes (2 ranks, gloo on CPU): a few seconds each.
"""
import sys
import threading
import time
from pathlib import Path

import pytest

from flexpipe_ui import Plan, simulate
from flexpipe_ui.presets import preset
from flexpipe_ui.torch_interop import import_torch_schedule
from flexpipe_ui.widgets import AutoPanel, Designer, LaunchPanel


def test_auto_panel_runs_in_a_thread_and_opens_the_best(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    panel = AutoPanel(preset="gpt", ranks=4, microbatches=8, time_limit=20, top=3)
    panel.w_cap.value = 0.0
    assert panel.btn_open.disabled
    t0 = time.perf_counter()
    panel.btn_run.click()                      # returns at once: the search runs in a thread
    assert time.perf_counter() - t0 < 1.0 and panel._thread is not None
    assert panel.wait(60)
    assert panel.error is None and panel.result is not None, panel.status
    assert not panel.running and not panel.btn_open.disabled
    ev = panel.events
    assert ev and ev[-1].evaluated == len(ev) and panel.progress.value == min(len(ev), panel.progress.max)
    assert panel.best_makespan == pytest.approx(panel.result.makespan)
    assert len(panel.w_candidates.options) == len(panel.result.candidates) <= 3
    assert any(t.type == "bar" for t in panel.figure.data)        # best-so-far Gantt drawn
    assert "best" in panel.figure.layout.title.text
    # the chart shows the best plan's simulation
    best_plan, best_sim, _ = panel.result.candidates[0]
    assert f"makespan {best_sim.makespan:.4g}" in panel.figure.layout.title.text
    panel.btn_open.click()
    assert isinstance(panel.designer, Designer) and panel.designer.makespan == pytest.approx(best_sim.makespan)
    cmp = panel.compare_selected()
    assert cmp.speedups()["auto"] >= 1.0 - 1e-9                    # never worse than 1F1B
    assert repr(panel).startswith("AutoPanel(best")


def test_auto_panel_stop_keeps_best_so_far():
    panel = AutoPanel(preset="gpt", ranks=8, microbatches=32, time_limit=60)
    seen = threading.Event()
    orig = panel._on_progress

    def progress(p):
        orig(p)
        if p.evaluated >= 3:
            seen.set()
            time.sleep(0.05)                                      # let Stop land mid-search
    panel._on_progress = progress
    panel.run()
    assert seen.wait(60)
    panel.btn_stop.click()
    assert panel.wait(60)
    assert panel.result is not None and panel.result.stats["stopped"] == "cancelled"


def test_auto_panel_exact_polish_is_reported():
    from flexpipe_ui.search.exact import available
    if not available():
        pytest.skip("ortools not installed")
    panel = AutoPanel(preset="few_microbatches", ranks=4, microbatches=4, time_limit=30)
    assert not panel.w_exact.disabled
    panel.w_exact.value = 3.0
    panel.run(wait=True)
    assert panel.error is None, panel.status
    runs = panel.result.stats["exact"]
    # one line for the exact polish, with each structure's before/after and proven bound
    assert runs and panel.status.count("exact polish:") == 1
    assert panel.status.count("no order of that structure beats") == len([r for r in runs if "bound" in r])
    assert panel.result.makespan <= min(r["before"] for r in runs) + 1e-9


def test_auto_panel_bad_profile_is_reported():
    panel = AutoPanel(preset="gpt")
    panel.w_profile.value = "/nonexistent/profile.json"
    panel.btn_run.click()
    assert not panel.running and "does not exist" in panel.status
    assert any("does not exist" in o.get("text", "") for o in panel.out.outputs)


@pytest.mark.timeout(180)
def test_launch_panel_trains_and_draws_measured():
    plan = Plan(import_torch_schedule("gpipe", 2, 2))
    panel = LaunchPanel(plan, steps=2)
    assert panel.w_devices.value in ("cpu", "cuda")
    panel.start(wait=True, timeout=150)
    assert panel.error is None, panel.status
    assert [e.step for e in panel.events] == [0, 1]
    assert list(panel.loss_fig.data[0].y) == [e.loss for e in panel.events]
    assert len(panel.loss_fig.data[1].y) == 2                     # step times
    assert panel.measured is not None and panel.measured.source == "measured"
    bars = [t for t in panel.meas_fig.data if t.type == "bar" and t.name != "idle"]
    assert sum(len(t.base) for t in bars) == plan.schedule.num_actions
    assert "finished 2 steps" in panel.status and not panel.running
    # measured peak memory per rank in the measured Gantt's title; re-fit from the run
    assert panel.measured.peak_memory_measured and "measured peak" in panel.meas_fig.layout.title.text
    assert not panel.btn_refit.disabled
    panel.btn_refit.click()
    assert panel.fitted is not None and panel.fitted.num_layers == plan.schedule.num_stages
    assert "re-fitted" in panel.status and "re-fitted" in panel.pred_fig.layout.title.text


@pytest.mark.timeout(180)
def test_launch_panel_shows_worker_errors():
    plan = Plan(import_torch_schedule("gpipe", 2, 2))
    sys.path.insert(0, str(Path(__file__).parent / "runtime"))  # the runtime tests' fault injection
    from faults import failing_handlers
    panel = LaunchPanel(plan, steps=2, handlers=failing_handlers(1, "1B1", "raise"))
    panel.start(wait=True, timeout=150)
    assert panel.error is not None
    assert "worker error" in panel.status and "1B1" in panel.status
