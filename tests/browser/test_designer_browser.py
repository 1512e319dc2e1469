"""Real browser: open 01_quickstart in JupyterLab, run all cells, drag one bar, check both sides.

Kernel side: the Designer's autosave file (written by the kernel after every edit) must show the
dragged action at its new place. Browser side: the editor's SVG must have redrawn (its
``data-version`` rose) with the bar moved. Then the kernel is restarted and the notebook re-run:
the Designer must come back with the drag restored from its autosave. Screenshots go to
``test-output/browser/``.
"""
from __future__ import annotations

import json
import time

import pytest
from labserver import drag_bar, open_and_run

pytestmark = pytest.mark.browser

NOTEBOOK = "01_quickstart.ipynb"
AUTOSAVE = "quickstart.autosave.json"   # Designer(name="quickstart") in the notebook
DRAGGED = "0F1"                          # stage 0's forwards have no producer: any order is valid


def _bar_box(page, name):
    loc = page.locator(f".fp-editor rect.fp-bar[data-name='{name}']").first
    loc.wait_for(state="attached")
    return loc.bounding_box()


def test_drag_in_jupyterlab(lab, page, browser_output):
    OUTPUT = browser_output
    autosave = lab["dir"] / AUTOSAVE
    open_and_run(page, lab, NOTEBOOK, f".fp-editor rect.fp-bar[data-name='{DRAGGED}']")
    editor_bar = page.locator(f".fp-editor rect.fp-bar[data-name='{DRAGGED}']").first
    # wait until the autosave exists (the Designer cell ran) and the page drew the current data
    deadline = time.time() + 120
    while not autosave.exists():
        assert time.time() < deadline, f"no {AUTOSAVE} after running the notebook"
        time.sleep(0.5)
    before = json.loads(autosave.read_text())
    row0 = before["plan"]["order"]["0"]
    assert row0.index("0F0") < row0.index(DRAGGED)
    svg = page.locator(".fp-editor svg.fp-svg").first
    editor_bar.scroll_into_view_if_needed()
    time.sleep(0.5)
    v0 = int(svg.get_attribute("data-version"))
    target = _bar_box(page, "0F0")
    drag_bar(page, DRAGGED, target["x"] + 2)   # left part of 0F0: the drop center lands before it
    # browser side: the editor redrew with a newer version
    page.wait_for_function(f"Number(document.querySelector('.fp-editor svg.fp-svg').dataset.version) > {v0}",
                           timeout=30_000)
    latency = svg.get_attribute("data-latency-ms")
    # kernel side: the autosave shows the new order
    deadline = time.time() + 30
    while True:
        after = json.loads(autosave.read_text())
        row0 = after["plan"]["order"]["0"]
        if row0.index(DRAGGED) < row0.index("0F0"):
            break
        assert time.time() < deadline, f"kernel-side plan did not change: rank 0 starts {row0[:4]}"
        time.sleep(0.3)
    assert after["steps"] and after["steps"][-1]["type"] == "Move"
    assert after["valid"] is True
    # the kernel's verdict reached the page (status line under the chart)
    page.get_by_text("step 1: Move(rank=0, src=1, dst=0)").first.wait_for(timeout=30_000)
    # the chart shows it: the dragged bar is now left of 0F0
    assert _bar_box(page, DRAGGED)["x"] < _bar_box(page, "0F0")["x"]
    shot = OUTPUT / "designer_drag.png"
    page.locator(".fp-editor").first.screenshot(path=str(shot))
    page.screenshot(path=str(OUTPUT / "designer_page.png"), full_page=False)
    (OUTPUT / "latency.json").write_text(json.dumps({"drop_to_redraw_ms": float(latency) if latency else None}))
    print(f"browser drop->redraw latency: {latency} ms; screenshot {shot}")
    # edits are never lost: restart the kernel, run everything again, the drag is restored
    # (not awaited: the command's promise waits for the confirmation dialog)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:restart-run-all'); }")
    page.locator(".jp-Dialog button", has_text="Restart").first.click()
    page.get_by_text("restored 1 edit from quickstart.autosave.json").first.wait_for(timeout=240_000)
    assert _bar_box(page, DRAGGED)["x"] < _bar_box(page, "0F0")["x"]
    page.screenshot(path=str(OUTPUT / "designer_restored.png"), full_page=False)
