"""Level of detail of the Gantt at scale, without a browser: the label-width rule, band merging of
thin bars, only what is visible, and the memory envelope (``flexpipe_ui.gantt_lod``)."""
from __future__ import annotations

import numpy as np
import pytest

from flexpipe_ui import simulate
from flexpipe_ui.gantt_lod import (BAND_GAP_PX, CHAR_PX, LABEL_PAD_PX, MIN_BAR_PX, envelope, label_fits,
                                   label_px, level_of_detail)
from flexpipe_ui.library import build_named
from flexpipe_ui.presets import preset
from flexpipe_ui.timeline import memory_at


@pytest.fixture(scope="module")
def big():
    from flexpipe_ui.presets import Transformer
    problem = preset("gpt", ranks=32, microbatches=128, model=Transformer(blocks=94))
    res = simulate(build_named("zb-v", problem), problem)
    tl = res.timeline
    texts = [str(a.microbatch) for a in tl.actions]
    return tl, texts, res


def test_label_width_rule():
    assert label_px("31") == 2 * CHAR_PX
    need = 2 * CHAR_PX + LABEL_PAD_PX
    assert label_fits(need, "31") and not label_fits(need - 0.01, "31")
    assert label_fits(need, "7") and not label_fits(need, "127")


def _check(tl, texts, lod, window, width):
    t0, t1 = window
    scale = width / (t1 - t0)
    s, e = np.maximum(tl.start, t0), np.minimum(tl.end, t1)
    visible = np.flatnonzero((tl.end > t0) & (tl.start < t1))
    # every visible bar is drawn alone or inside exactly one band; nothing invisible is drawn
    assert len(lod.bars) + int(lod.band_count.sum()) == len(visible)
    assert set(lod.bars.tolist()) <= set(visible.tolist())
    px = (e - s) * scale
    assert (px[lod.bars] >= MIN_BAR_PX).all()
    # labels: exactly the drawn bars whose text fits, and their boxes never overlap on a lane
    fits = {i for i in lod.bars.tolist() if label_fits(px[i], texts[i])}
    assert set(lod.labels.tolist()) == fits
    for r in range(tl.ranks):
        lab = [i for i in lod.labels.tolist() if tl.rank[i] == r]
        mids = (s[lab] + e[lab]) / 2 * scale
        half = np.array([label_px(texts[i]) / 2 for i in lab])
        o = np.argsort(mids)
        if len(o) > 1:
            assert (mids[o][1:] - half[o][1:] >= mids[o][:-1] + half[o][:-1]).all()
    # bands hold only thin bars and never overlap a drawn bar of their lane
    for ln, bs, be in zip(lod.band_lane, lod.band_start, lod.band_end):
        assert be >= bs and t0 <= bs and be <= t1
        on = lod.bars[tl.rank[lod.bars] == ln]
        assert not ((s[on] < be - 1e-9) & (e[on] > bs + 1e-9)).any()


def test_zoomed_out_merges_thin_bars_into_few_bands(big):
    tl, texts, _ = big
    window, width = (0.0, tl.makespan), 1200
    lod = level_of_detail(tl.start, tl.end, tl.rank, window, width, texts)
    _check(tl, texts, lod, window, width)
    n = len(tl.actions)
    assert n > 20000 and lod.shapes < n / 5      # ~25k actions become a few thousand shapes
    assert len(lod.band_lane) > 0 and lod.band_count.max() > 10


def test_zoomed_in_draws_every_visible_bar_with_labels(big):
    tl, texts, _ = big
    t0 = tl.makespan * 0.45
    window = (t0, t0 + tl.makespan / 40)
    lod = level_of_detail(tl.start, tl.end, tl.rank, window, 1200, texts)
    _check(tl, texts, lod, window, 1200)
    # no bands but the slivers of bars cut by the window's edges
    assert all(bs == window[0] or be == window[1] for bs, be in zip(lod.band_start, lod.band_end))
    assert len(lod.labels) > 0.5 * len(lod.bars)
    assert len(lod.bars) < len(tl.actions) / 20    # only what is visible


def test_band_gap_rule():
    # three thin bars on lane 0, the third after a visible gap; one wide bar on lane 1
    start = np.array([0.0, 1.0, 5.0, 0.0])
    end = np.array([0.9, 1.9, 5.9, 8.0])
    lane = np.array([0, 0, 0, 1])
    lod = level_of_detail(start, end, lane, (0.0, 10.0), 20.0, ["a", "b", "c", "w"])  # 2 px per unit
    assert lod.bars.tolist() == [3] and lod.labels.tolist() == [3]
    assert lod.band_lane.tolist() == [0, 0] and lod.band_count.tolist() == [2, 1]
    assert lod.band_start.tolist() == [0.0, 5.0] and lod.band_end.tolist() == [1.9, 5.9]
    # a gap of exactly BAND_GAP_PX or more splits; less joins
    wide = level_of_detail(start, end, lane, (0.0, 10.0), 20.0 * (BAND_GAP_PX / 0.2 + 1) / 10)
    assert wide.band_count.sum() + len(wide.bars) == 4


def test_memory_envelope_keeps_the_peak(big):
    tl, _, res = big
    _, curves = memory_at(tl, res.costs)
    times, vals = curves[0]
    for window in ((0.0, tl.makespan), (tl.makespan * 0.2, tl.makespan * 0.3)):
        x, y = envelope(times, vals, window, 300)
        inside = (times >= window[0]) & (times < window[1])
        assert len(x) == 601
        assert y.max() == pytest.approx(max(vals[inside].max(initial=-np.inf), y.max()))
        assert y.max() >= vals[inside].max() and y.min() <= vals[inside].min()
