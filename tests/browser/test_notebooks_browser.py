"""Real browser, one test per notebook: open it in JupyterLab, press Run All AT ONCE (before its
kernel is up: the first-open case the shipped ``flexpipe-lab`` extension handles), then check that

- no dialog ("Select Kernel") and no news toast ever showed, and the notebook ran to the end;
- no cell has an error output and no widget is stuck at "Loading widget...";
- every plotly chart has data (a drawn trace) and every editor has bars;
- no text box overlaps another: chart titles / subplot titles vs legends;
- no chart is wider than its cell.

Screenshots of every chart/widget output go to ``test-output/browser/<notebook>_cell<N>.png``.
Adding a notebook is one line in ``NOTEBOOKS``.
"""
from __future__ import annotations

import json
import time

import pytest
from labserver import _KERNEL_STATE

pytestmark = pytest.mark.browser

NOTEBOOKS = {                        # notebook: seconds allowed for Run All
    "01_quickstart.ipynb": 300,
    "02_design_by_hand.ipynb": 300,
    "03_auto_vs_manual.ipynb": 420,
    "04_launch_training.ipynb": 480,
    "05_your_model.ipynb": 480,
}

_RUN_STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cells = (w && w.content ? w.content.widgets : []).filter((c) => c.model.type === "code");
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const errors = [];
  cells.forEach((c, i) => c.model.outputs.toJSON().forEach((o) => {
    if (o.output_type === "error") errors.push(`cell ${i}: ${o.ename}: ${o.evalue}`); }));
  return {done: cells.length > 0 && cells.every((c) => c.model.executionCount !== null),
          idle: !!k && k.status === "idle", errors,
          counts: cells.map((c) => c.model.executionCount)};
}"""

# every title-like box and every legend of each plotly chart, in page coordinates
_BOXES = """(plot) => {
  const r = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const texts = [...plot.querySelectorAll(".gtitle, .annotation-text, .g-xtitle, .g-ytitle")]
                  .filter((e) => e.textContent.trim()).map((e) => ({what: e.textContent.trim().slice(0, 60), box: r(e)}));
  const legends = [...plot.querySelectorAll(".legend")].map((e) => ({what: "legend", box: r(e)}));
  const traces = plot.querySelectorAll(".trace .point, .trace path.js-line, .trace path.point, .gl-container canvas").length;
  return {texts, legends, traces, box: r(plot)};
}"""


def _overlap(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(0.0, w) * max(0.0, h)


def _run_all_at_once(page, lab, notebook: str, timeout_s: float) -> dict:
    page.goto(f"{lab['url']}/lab/tree/{notebook}?token={lab['token']}&reset")
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
    page.locator(".jp-Notebook").first.wait_for(state="visible", timeout=120_000)
    at_press = page.evaluate(_KERNEL_STATE)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    if at_press["connection"] != "connected":   # pressed before the kernel: the page must say so
        page.locator(".fp-kernel-wait").first.wait_for(state="attached", timeout=10_000)
    deadline = time.time() + timeout_s
    dialogs, toasts = [], []
    while True:
        if page.locator(".jp-Dialog").count():
            dialogs.append(page.locator(".jp-Dialog").first.inner_text()[:200])
        toasts += [t for t in page.locator(".Toastify__toast").all_inner_texts() if "news" in t.lower()]
        st = page.evaluate(_RUN_STATE)
        if st["errors"] or dialogs or (st["done"] and st["idle"]):
            break
        assert time.time() < deadline, f"{notebook}: Run All did not finish in {timeout_s} s: {st}"
        time.sleep(1.0)
    assert not dialogs, f"{notebook}: a dialog showed: {dialogs[0]!r}"
    assert not toasts, f"{notebook}: the news toast showed: {toasts[0]!r}"
    assert not st["errors"], f"{notebook}: error output: {st['errors']}"
    return st


@pytest.mark.parametrize("notebook", list(NOTEBOOKS), ids=lambda n: n.split(".")[0])
def test_notebook_runs_clean_in_jupyterlab(lab, page, browser_output, notebook):
    _run_all_at_once(page, lab, notebook, NOTEBOOKS[notebook])
    stem = notebook.split(".")[0]
    # widgets render (give late comm messages a moment)
    deadline = time.time() + 60
    while page.get_by_text("Loading widget...").count():
        assert time.time() < deadline, f"{notebook}: a widget is stuck at 'Loading widget...'"
        time.sleep(0.5)
    problems, shots = [], []
    outputs = page.locator(".jp-Cell.jp-CodeCell")
    for i in range(outputs.count()):
        cell = outputs.nth(i)
        area = cell.locator(".jp-OutputArea")
        if not area.count() or not (cell.locator(".js-plotly-plot").count() or cell.locator(".fp-editor").count()
                                    or cell.locator(".widget-vbox").count()):
            continue
        area.first.scroll_into_view_if_needed()
        time.sleep(0.4)
        cell_box = cell.bounding_box()
        for p in range(cell.locator(".js-plotly-plot").count()):
            plot = cell.locator(".js-plotly-plot").nth(p)
            plot.scroll_into_view_if_needed()
            info = plot.evaluate(_BOXES)
            if info["traces"] == 0:
                problems.append(f"cell {i} chart {p}: no data drawn")
            if info["box"][2] > cell_box["x"] + cell_box["width"] + 2:
                problems.append(f"cell {i} chart {p}: wider than its cell ({info['box'][2]:.0f} > "
                                f"{cell_box['x'] + cell_box['width']:.0f} px)")
            for t in info["texts"]:
                for g in info["legends"]:
                    if _overlap(t["box"], g["box"]) > 4.0:
                        problems.append(f"cell {i} chart {p}: legend overlaps {t['what']!r}")
            texts = info["texts"]
            for a in range(len(texts)):
                for b in range(a + 1, len(texts)):
                    if _overlap(texts[a]["box"], texts[b]["box"]) > 4.0:
                        problems.append(f"cell {i} chart {p}: {texts[a]['what']!r} overlaps {texts[b]['what']!r}")
        for e in range(cell.locator(".fp-editor").count()):
            bars = cell.locator(".fp-editor").nth(e).locator("rect.fp-bar")
            try:   # an editor whose view missed its data asks the kernel again (GanttEditor._on_rendered)
                bars.first.wait_for(state="attached", timeout=20_000)
            except Exception:  # noqa: BLE001 - reported below with the others
                problems.append(f"cell {i} editor {e}: no bars")
        shot = browser_output / f"{stem}_cell{i}.png"
        area.first.screenshot(path=str(shot))
        shots.append(shot.name)
    (browser_output / f"{stem}.json").write_text(json.dumps({"screenshots": shots, "problems": problems}, indent=1))
    assert shots, f"{notebook}: no chart or widget output found"
    assert not problems, f"{notebook}: " + "; ".join(problems)
