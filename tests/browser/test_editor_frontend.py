"""The editor's front end alone (its ES module on a fake anywidget model, no Jupyter): drawing,
click-to-select, drag-to-drop with the right action/rank/time, refusal marker, keyboard commands."""
from __future__ import annotations

import pytest
from labserver import LAUNCH_ARGS, editor_test_page

from flexpipe_ui import simulate
from flexpipe_ui.torch_interop import import_torch_schedule
from flexpipe_ui.widgets.gantt_editor import pack_timeline

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def editor_page(chromium_path, tmp_path_factory):
    from playwright.sync_api import sync_playwright
    res = simulate(import_torch_schedule("zb-v", 4, 8))
    data = pack_timeline(res.timeline, res.costs, memory_limit=8.0, version=3)
    page_path = editor_test_page(tmp_path_factory.mktemp("editor") / "editor.html")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=LAUNCH_ARGS)
        pg = b.new_page(viewport={"width": 1300, "height": 700})
        pg.goto(page_path.as_uri())
        pg.wait_for_function("window.__fp_ready === true")
        pg.evaluate("(d) => window.__fp_draw(d)", data)
        yield pg, res, data
        b.close()


def _sets(pg, key):
    return [v for k, v in pg.evaluate("window.__fp_sets") if k == key]


def test_draws_every_bar_with_hover_and_memory(editor_page):
    pg, res, data = editor_page
    n = len(res.timeline.actions)
    assert pg.locator("rect.fp-bar").count() == n
    assert pg.locator(".fp-mem polyline").count() == 4 and pg.locator(".fp-cap").count() == 4
    tip = pg.locator("rect.fp-bar[data-name='2I3'] title").text_content()
    s, e = res.timeline.of("2I3")
    assert tip.startswith("2I3 (stage 2, mb 3)")
    assert f"start {'%.4g' % s} ms · end {'%.4g' % e} ms · dur {'%.4g' % (e - s)} ms" in tip
    assert " MiB" in tip.split("memory", 1)[1]
    # the axis says its unit; peaks carry MiB
    assert pg.locator(".fp-axis-title").text_content() == "time (ms)"
    assert all(t.endswith(" MiB") for t in pg.locator(".fp-mem text").all_text_contents() if t.startswith("peak"))
    assert _sets(pg, "rendered")[-1] == 3
    # bar geometry follows time: 0F1 starts where 0F0 ends
    x0 = pg.locator("rect.fp-bar[data-name='0F0']").bounding_box()
    x1 = pg.locator("rect.fp-bar[data-name='0F1']").bounding_box()
    assert x1["x"] == pytest.approx(x0["x"] + x0["width"], abs=1.0)


def test_click_selects_and_drag_reports_drop(editor_page):
    pg, res, data = editor_page
    box = pg.locator("rect.fp-bar[data-name='1F2']").bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    pg.mouse.click(cx, cy)
    assert _sets(pg, "selected")[-1] == "1F2" and not _sets(pg, "drop")
    assert "fp-sel" in pg.locator("rect.fp-bar[data-name='1F2']").get_attribute("class")
    target = pg.locator("rect.fp-bar[data-name='1F0']").bounding_box()
    pg.mouse.move(cx, cy)
    pg.mouse.down()
    for k in range(1, 9):
        pg.mouse.move(cx + (target["x"] + 1 - cx) * k / 8, cy)
    assert pg.locator(".fp-marker").get_attribute("visibility") == "visible"   # live insertion marker
    pg.mouse.up()
    drop = _sets(pg, "drop")[-1]
    assert drop["name"] == "1F2" and drop["rank"] == 1
    s0, _ = res.timeline.of("1F0")
    assert drop["time"] < (s0 + res.timeline.of("1F0")[1]) / 2   # lands before 1F0's centre
    # dropped on another row: the rank it reports is that row's
    box = pg.locator("rect.fp-bar[data-name='1F3']").bounding_box()
    pg.mouse.move(box["x"] + 3, box["y"] + 5)
    pg.mouse.down()
    for k in range(1, 6):
        pg.mouse.move(box["x"] + 3, box["y"] + 5 + 26 * 2 * k / 5)
    pg.mouse.up()
    assert _sets(pg, "drop")[-1]["rank"] == 3


def test_keys_send_commands_and_highlight_draws(editor_page):
    pg, res, data = editor_page
    pg.locator(".fp-editor").focus()
    for key, cmd in (("ArrowLeft", "earlier"), ("ArrowRight", "later"), ("s", "swap"), ("z", "undo"), ("y", "redo")):
        pg.keyboard.press(key)
        assert _sets(pg, "command")[-1]["cmd"] == cmd
    pg.evaluate("() => window.__fp_model.set('highlight', ['0W0', '0I0'])")
    assert pg.locator("rect.fp-bar.fp-bad").count() == 2


def test_unit_costs_say_so_and_big_numbers_are_separated(editor_page):
    pg, res, data = editor_page
    big = dict(data, units={"time": "", "memory": ""}, version=data["version"] + 1,
               memory=[{"t": c["t"], "v": [v * 10000 for v in c["v"]]} for c in data["memory"]],
               memory_limit=80000.0)
    pg.evaluate("(d) => window.__fp_draw(d)", big)
    try:
        assert pg.locator(".fp-axis-title").text_content() == "time (unit costs)"
        peaks = [t for t in pg.locator(".fp-mem text").all_text_contents() if t.startswith("peak")]
        assert peaks and all("e+" not in t and "," in t and "MiB" not in t for t in peaks), peaks
    finally:
        pg.evaluate("(d) => window.__fp_draw(d)", dict(data, version=data["version"] + 2))
