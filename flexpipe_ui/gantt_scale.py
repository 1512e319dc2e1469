"""The static Gantt (``gantt``) at scale: its level of detail (``gantt_lod``'s rules, for the window
the figure opens on), the "occupied" band trace, and memory panels grouped past ``MAX_LANES`` ranks.

A figure of 100k actions drawn bar by bar is noise and takes seconds of the browser's main thread;
with these, a zoomed-out 64 × 256 chart draws a few thousand shapes (bands where bars are thinner
than a few pixels), each band's hover says how many actions it holds and when, and
``gantt_figure(..., window=(t0, t1))`` draws a zoomed window bar by bar (only what is visible).
plotly is imported by the caller (``gantt``); this module only builds traces.
"""
from __future__ import annotations

import math

import numpy as np

from .gantt_lod import MAX_LANES, MIN_BAR_PX, Lod, envelope, level_of_detail
from .timeline import Timeline

__all__ = ["PLOT_WIDTH_PX", "lod_view", "band_trace", "visible_idle", "memory_groups", "group_curve",
           "lane_height"]

PLOT_WIDTH_PX = 1100
"""Plot width assumed for the level of detail when the figure's width is not given (a notebook
cell's plot area, about)."""

BAND_COLOR = "rgba(110,120,132,0.75)"


def lane_height(ranks: int) -> int:
    """Pixels per rank lane: 28 up to ``MAX_LANES`` ranks, then 12 (a 64-rank chart ~770 px)."""
    return 28 if ranks <= MAX_LANES else 12


def lod_view(tl: Timeline, window: tuple[float, float], width: int | None) -> Lod:
    """``gantt_lod.level_of_detail`` of a timeline's bars (a lane is a rank's stream)."""
    side = np.array([not a.kind.occupies_compute for a in tl.actions], bool) if len(tl.actions) else np.zeros(0, bool)
    plot_px = max(200, (width or PLOT_WIDTH_PX) - 100)
    return level_of_detail(tl.start, tl.end, tl.rank * 2 + side, window, plot_px)


def band_trace(go, lv: Lod, tu: str = "", legendgroup: str = "occupied", showlegend: bool = True):
    """One bar trace of the bands: grey, at their rank's lane, hover with the count and span."""
    rank = lv.band_lane // 2
    side = lv.band_lane % 2
    return go.Bar(
        name="occupied (thin bars; zoom in: window=)", orientation="h", base=lv.band_start,
        x=lv.band_end - lv.band_start, y=rank + 0.3 * side, width=np.where(side, 0.2, 0.8),
        marker=dict(color=BAND_COLOR, line=dict(width=0)), legendgroup=legendgroup, showlegend=showlegend,
        customdata=np.stack([lv.band_count, lv.band_start, lv.band_end], axis=1),
        hovertemplate=(f"%{{customdata[0]}} actions<br>from %{{customdata[1]:,.4g}} to %{{customdata[2]:,.4g}}{tu}"
                       "<extra>rank %{y}</extra>"))


def visible_idle(rs: np.ndarray, ss: np.ndarray, es: np.ndarray, window: tuple[float, float],
                 width: int | None) -> np.ndarray:
    """Mask of the idle gaps worth drawing in the window: visible and at least ``MIN_BAR_PX`` wide
    (thinner ones sit inside the bands)."""
    t0, t1 = window
    scale = max(200, (width or PLOT_WIDTH_PX) - 100) / max(t1 - t0, 1e-300)
    return (es > t0) & (ss < t1) & ((np.minimum(es, t1) - np.maximum(ss, t0)) * scale >= MIN_BAR_PX)


def memory_groups(ranks: int) -> list[range]:
    """Ranks per memory panel: one each up to ``MAX_LANES``, then ``MAX_LANES`` equal groups."""
    if ranks <= MAX_LANES:
        return [range(r, r + 1) for r in range(ranks)]
    g = math.ceil(ranks / MAX_LANES)
    return [range(a, min(a + g, ranks)) for a in range(0, ranks, g)]


def group_curve(curves, group: range, window: tuple[float, float], cols: int = 600):
    """(x, y) of a group's memory panel: per pixel column the lowest and highest value any of its
    ranks takes (``gantt_lod.envelope``), so every rank's peak shows."""
    lo = hi = None
    for r in group:
        times, vals = curves[r]
        x, y = envelope(times, vals, window, cols)
        pair = y[:-1].reshape(-1, 2)
        lo = pair[:, 0] if lo is None else np.minimum(lo, pair[:, 0])
        hi = pair[:, 1] if hi is None else np.maximum(hi, pair[:, 1])
        last = y[-1] if r == group[0] else max(last, y[-1])
    return x, np.r_[np.stack([lo, hi], axis=1).ravel(), last]
