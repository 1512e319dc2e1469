"""Static Gantt: bars match the timeline, one trace per kind, memory panels, title metrics."""
import numpy as np
import pytest

from flexpipe_ui import Schedule, Timeline, simulate, uniform_costs
from flexpipe_ui.gantt import (LABEL_LIMIT, WEBGL_LIMIT, GanttError, gantt_figure, gantt_title, idle_intervals,
                               memory_at)
from flexpipe_ui.torch_interop import import_torch_schedule


def _bars(fig):
    return [t for t in fig.data if t.type == "bar" and t.name != "idle"]


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (8, 32)])
def test_bars_match_timeline_and_one_trace_per_kind(p, m):
    res = simulate(import_torch_schedule("gpipe", p, m))
    fig = gantt_figure(res)
    bars = _bars(fig)
    assert sorted(t.name.split()[0] for t in bars) == ["B", "F"]  # torch GPipe uses fused B
    tl = res.timeline
    for t in bars:
        kind = t.name.split()[0]
        sel = np.array([a.kind.name == kind for a in tl.actions])
        np.testing.assert_allclose(np.asarray(t.base, float), tl.start[sel])
        np.testing.assert_allclose(np.asarray(t.base, float) + np.asarray(t.x), tl.end[sel])
        np.testing.assert_array_equal(t.y, tl.rank[sel])
        assert list(t.text) == [str(a.microbatch) for a, s in zip(tl.actions, sel) if s]
        assert t.marker.color == tl.actions[int(np.flatnonzero(sel)[0])].kind.color
    # closed form from DESIGN.md: GPipe makespan (m+p-1)(F+I+W)
    assert f"makespan {3 * (m + p - 1):.4g}" in fig.layout.title.text


def test_idle_bars_are_the_bubble():
    res = simulate(import_torch_schedule("gpipe", 4, 8))
    r, s, e = idle_intervals(res.timeline)
    idle = np.bincount(r, weights=e - s, minlength=4)
    np.testing.assert_allclose(idle / res.makespan, res.metrics.bubble_per_rank)
    fig = gantt_figure(res)
    idle_tr = [t for t in fig.data if t.name == "idle"][0]
    assert np.isclose(np.sum(idle_tr.x), idle.sum())


def test_memory_panels_peak_and_cap():
    sched = import_torch_schedule("gpipe", 4, 8)
    res = simulate(sched)
    fig = gantt_figure(res, memory_limit=5.0)
    mem = [t for t in fig.data if t.name and t.name.startswith("memory rank")]
    assert len(mem) == 4
    for r, t in enumerate(mem):
        assert max(t.y) == pytest.approx(res.metrics.peak_memory[r])  # GPipe holds all m = 8
        assert t.line.color == "#d62728"  # 8 > cap 5: drawn red
    caps = [t for t in fig.data if t.name and t.name.startswith("memory cap")]
    assert len(caps) == 4 and all(c.y[0] == 5.0 for c in caps)
    assert "(OVER)" in fig.layout.title.text
    # hover memory: the rank's memory just after the action started (F of mb k on GPipe: k+1)
    at, curves = memory_at(res.timeline, res.costs)
    for a, v in zip(res.timeline.actions, at):
        if a.kind.name == "F":
            assert v == pytest.approx(a.microbatch + 1)


def test_speedup_in_title():
    zbv = simulate(import_torch_schedule("zb-v", 8, 32))
    gp = simulate(import_torch_schedule("gpipe", 8, 32))
    fig = gantt_figure(zbv, baseline=("GPipe", gp), title="ZB-V")
    text = fig.layout.title.text
    assert text.startswith("ZB-V") and "makespan 99.5" in text
    assert f"{117 / 99.5:.3f}× vs GPipe" in text
    assert gantt_title(zbv.metrics, baseline=117.0).endswith(f"{117 / 99.5:.3f}× vs baseline")


def test_big_schedule_is_webgl_with_few_traces():
    res = simulate(import_torch_schedule("zb-v", 16, 128))
    n = len(res.timeline.actions)
    assert n >= 12000 > WEBGL_LIMIT
    fig = gantt_figure(res, highlight=["5I7"], lod=False)   # every bar: WebGL
    assert len(fig.data) <= 1 + 2 * 3 + 1 + 16  # idle + (segments, hover markers) per kind + highlight + memory
    gl = [t for t in fig.data if t.type == "scattergl"]
    markers = [t for t in gl if t.mode == "markers"]
    assert sum(len(t.x) for t in markers) == n     # every action hoverable
    for t in markers:
        kind = t.name
        sel = np.array([a.kind.name == kind for a in res.timeline.actions])
        np.testing.assert_allclose(np.asarray(t.x, float), (res.timeline.start[sel] + res.timeline.end[sel]) / 2)
    segs = [t for t in gl if t.mode == "lines" and t.name.startswith("F ")][0]
    sel = np.array([a.kind.name == "F" for a in res.timeline.actions])
    np.testing.assert_allclose(np.asarray(segs.x, float)[0::3], res.timeline.start[sel])
    np.testing.assert_allclose(np.asarray(segs.x, float)[1::3], res.timeline.end[sel])
    hl = [t for t in gl if t.name == "highlighted"][0]
    assert list(np.asarray(hl.x, float)[:2]) == list(res.timeline.of("5I7"))
    small = gantt_figure(simulate(import_torch_schedule("gpipe", 2, 2)), render="webgl")
    assert any(t.type == "scattergl" for t in small.data)
    assert all(t.type != "scattergl" for t in gantt_figure(res, render="svg", memory=False, lod=False).data)


def test_level_of_detail_at_scale():
    """Zoomed out, thin bars become bands (every action in a bar or a band, few shapes, SVG); a
    window draws only what is visible; past 16 ranks the memory panels group ranks and keep peaks."""
    from flexpipe_ui.library import build_named
    from flexpipe_ui.presets import Transformer, gpt
    problem = gpt(64, 256, model=Transformer(blocks=3 * 64, seq=1024))
    res = simulate(build_named("zb-h1", problem), problem)
    n = len(res.timeline.actions)
    fig = gantt_figure(res, memory_limit=problem.memory_limit)
    bands = [t for t in fig.data if t.name and t.name.startswith("occupied")]
    bars = [t for t in _bars(fig) if not t.name.startswith("occupied")]
    assert len(bands) == 1 and all(t.type == "bar" for t in fig.data if t.name and not t.name.startswith("memory"))
    drawn = sum(len(t.base) for t in bars)
    assert drawn + int(np.sum(np.asarray(bands[0].customdata)[:, 0])) == n
    assert drawn + len(bands[0].base) < n / 5
    assert "actions" in bands[0].hovertemplate
    mem = [t for t in fig.data if t.name and t.name.startswith("memory ranks")]
    assert len(mem) == 16 and mem[0].name == "memory ranks 0-3"
    peaks = res.metrics.peak_memory
    for k, t in enumerate(mem):
        assert max(t.y) == pytest.approx(max(peaks[4 * k:4 * k + 4]))
    assert fig.layout.height < 2000
    # a window: only the bars in it, one by one, labelled where they fit (plotly hides the rest)
    t0 = res.makespan * 0.5
    win = gantt_figure(res, window=(t0, t0 + res.makespan / 60), memory=False)
    tl = res.timeline
    visible = int(((tl.end > t0) & (tl.start < t0 + res.makespan / 60)).sum())
    shown = sum(len(t.base) for t in _bars(win) if not t.name.startswith("occupied"))
    assert visible * 0.9 <= shown <= visible
    assert all(len(t.text) == len(t.base) for t in _bars(win) if t.text is not None)


def test_measured_timeline_and_highlight():
    sched = Schedule.from_text("r0: 0F0 0B0\n")
    tl = Timeline.from_records(1, [(0, "0F0", 0.0, 1.5), (0, "0B0", 2.0, 4.0)], schedule=sched)
    fig = gantt_figure(tl, uniform_costs(1, 1), highlight=["0B0"], title="measured")
    bars = {t.name.split()[0]: t for t in _bars(fig)}
    assert list(bars["B"].marker.line.width) == [3.0]
    assert list(bars["F"].marker.line.width) == [0.4]
    assert "makespan 4" in fig.layout.title.text
    idle_tr = [t for t in fig.data if t.name == "idle"][0]
    assert list(idle_tr.base) == [1.5] and list(idle_tr.x) == [0.5]


def test_bad_input():
    with pytest.raises(GanttError, match="Timeline or SimResult"):
        gantt_figure("0F0")
    with pytest.raises(GanttError, match="baseline"):
        gantt_figure(simulate(import_torch_schedule("gpipe", 2, 2)), baseline="fast")
