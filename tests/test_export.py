"""Exports: offline HTML, images via kaleido, Chrome trace JSON, plan JSON, torch CSV."""
import json
import os

import numpy as np
import pytest

from flexpipe_ui import load_plan, simulate
from flexpipe_ui.export import (ExportError, chrome_trace, image_backend, save_chrome_trace,
                                save_html, save_image, save_plan_json, save_torch_csv)
from flexpipe_ui.gantt import gantt_figure
from flexpipe_ui.torch_interop import import_torch_schedule, read_torch_csv


@pytest.fixture(scope="module")
def res():
    return simulate(import_torch_schedule("zb-v", 4, 8))


def test_html_is_standalone(res, tmp_path):
    path = save_html(gantt_figure(res), tmp_path / "sub" / "g.html")
    text = open(path).read()
    assert len(text) > 1_000_000          # plotly.js inlined
    assert "cdn.plot.ly" not in text.split("<body>")[0]
    assert "makespan" in text


def test_chrome_trace(res, tmp_path):
    tr = chrome_trace(res, scale=1000.0)
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    tl = res.timeline
    assert len(xs) == len(tl.actions)
    for e, a, r, s, en in zip(xs, tl.actions, tl.rank, tl.start, tl.end):
        assert e["name"] == str(a) and e["tid"] == r and e["cat"] == a.kind.name
        assert e["ts"] == pytest.approx(s * 1000) and e["dur"] == pytest.approx((en - s) * 1000)
    names = {e["tid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert names == {r: f"rank {r}" for r in range(4)}
    counters = [e for e in tr["traceEvents"] if e["ph"] == "C"]
    assert max(e["args"]["memory"] for e in counters) == pytest.approx(res.metrics.max_peak_memory)
    p = save_chrome_trace(res.timeline, tmp_path / "t.json", res.costs)
    assert json.loads(open(p).read())["otherData"]["makespan"] == pytest.approx(res.makespan)


def test_plan_and_torch_csv(res, tmp_path):
    sched = res.timeline.schedule
    plan = load_plan(save_plan_json(sched, tmp_path / "p.json"))
    assert plan.schedule.order == sched.order
    back = read_torch_csv(save_torch_csv(sched, tmp_path / "p.csv"), 8, sched.placement)
    assert back.order == sched.order


def test_image_export(res, tmp_path):
    if image_backend() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no Chromium for kaleido (apt-get install chromium)")
        pytest.skip("no Chromium found for kaleido image export")
    fig = gantt_figure(res)
    png = save_image(fig, tmp_path / "g.png", width=900, height=500)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    svg = save_image(fig, tmp_path / "g.svg")
    assert "<svg" in open(svg).read(2000)
    with pytest.raises(ExportError, match="format"):
        save_image(fig, tmp_path / "g.bmp")
