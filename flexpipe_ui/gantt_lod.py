"""Level of detail for Gantt charts at scale: for a time window drawn ``width_px`` wide, which bars
are drawn one by one, which thin ones merge into "occupied" bands, which bars get a label, and a
memory curve decimated to the pixels it covers.

The rules (one place; the editor's front end ``widgets/gantt_editor.js`` applies the same ones,
with these constants sent in its ``data``):

- only bars that overlap the window count (zoom and pan re-render only what is visible);
- a bar narrower than ``MIN_BAR_PX`` on screen is *thin*: runs of thin bars on one lane whose gaps
  are narrower than ``BAND_GAP_PX`` become one band (its hover says how many actions, from when to
  when), so a zoomed-out chart of 100k actions draws a few thousand shapes, not noise;
- a bar gets its label only if the label's width (``label_px``: ``CHAR_PX`` per character at the
  10 px font) plus ``LABEL_PAD_PX`` fits inside it, so labels never overlap each other (bars on a
  lane do not overlap) nor spill out of their bar.

Pure numpy; no plotly, no browser.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["MIN_BAR_PX", "BAND_GAP_PX", "LABEL_FONT_PX", "CHAR_PX", "LABEL_PAD_PX", "MAX_LANES",
           "label_px", "label_fits", "Lod", "level_of_detail", "envelope", "lod_constants"]

MIN_BAR_PX = 3.0
"""Bars narrower than this (on screen) are merged into bands."""
BAND_GAP_PX = 2.0
"""Thin bars closer than this join one band; a wider gap (a visible bubble) ends it."""
LABEL_FONT_PX = 10.0
"""Font size of bar labels."""
CHAR_PX = 6.2
"""Width of one label character at ``LABEL_FONT_PX`` (sans-serif digits and capitals: ~0.6 em)."""
LABEL_PAD_PX = 4.0
"""Room a label keeps from its bar's edges (both sides together)."""
MAX_LANES = 16
"""Rank lanes (and memory panels) shown at once; past it the editor scrolls and the static chart
groups memory panels."""


def lod_constants() -> dict:
    """The constants above, as the editor's front end receives them (``data["lod"]``)."""
    return {"min_bar_px": MIN_BAR_PX, "band_gap_px": BAND_GAP_PX, "font_px": LABEL_FONT_PX,
            "char_px": CHAR_PX, "label_pad_px": LABEL_PAD_PX, "max_lanes": MAX_LANES}


def label_px(text: str, char_px: float = CHAR_PX) -> float:
    """On-screen width of a bar label."""
    return len(text) * char_px


def label_fits(bar_px: float, text: str, char_px: float = CHAR_PX, pad_px: float = LABEL_PAD_PX) -> bool:
    """True when ``text`` fits inside a bar ``bar_px`` wide."""
    return bar_px >= label_px(text, char_px) + pad_px


@dataclass(frozen=True)
class Lod:
    """What to draw for one window: indices into the bar arrays, and the bands."""

    bars: np.ndarray
    """Bars drawn one by one (visible and at least ``MIN_BAR_PX`` wide), by lane then start."""
    labels: np.ndarray
    """The subset of ``bars`` whose label fits."""
    band_lane: np.ndarray
    """Per band: its lane, first start and last end (clipped to the window), bars merged."""
    band_start: np.ndarray
    band_end: np.ndarray
    band_count: np.ndarray

    @property
    def shapes(self) -> int:
        """Rectangles drawn (bars and bands)."""
        return len(self.bars) + len(self.band_lane)


def level_of_detail(start, end, lane, window: tuple[float, float], width_px: float,
                    texts: Sequence[str] | None = None, *, min_bar_px: float = MIN_BAR_PX,
                    band_gap_px: float = BAND_GAP_PX, char_px: float = CHAR_PX,
                    pad_px: float = LABEL_PAD_PX) -> Lod:
    """The level of detail of bars (``start``, ``end``, ``lane`` arrays; bars on one lane do not
    overlap) drawn in ``window`` over ``width_px`` pixels (module docstring for the rules)."""
    start, end, lane = (np.asarray(x) for x in (start, end, lane))
    t0, t1 = float(window[0]), float(window[1])
    if not t1 > t0:
        raise ValueError(f"window must have t1 > t0, got {window}")
    scale = float(width_px) / (t1 - t0)
    vis = np.flatnonzero((end > t0) & (start < t1) | ((end == start) & (start >= t0) & (start <= t1)))
    idx = vis[np.lexsort((start[vis], lane[vis]))]
    s, e, ln = np.maximum(start[idx], t0), np.minimum(end[idx], t1), lane[idx]
    px = (e - s) * scale
    thin = px < min_bar_px
    bars = idx[~thin]
    if texts is not None:
        w = px[~thin]
        labels = bars[[label_fits(wi, texts[i], char_px, pad_px) for wi, i in zip(w.tolist(), bars.tolist())]] \
            if len(bars) else bars
    else:
        labels = bars[:0]
    # bands: runs of thin bars, consecutive on their lane, separated by gaps under band_gap_px
    k = np.flatnonzero(thin)
    if not len(k):
        z = np.zeros(0)
        return Lod(bars, labels, z.astype(np.int64), z, z, z.astype(np.int64))
    prev = k - 1
    joins = np.zeros(len(k), bool)
    ok = prev >= 0
    joins[ok] = (thin[prev[ok]] & (ln[prev[ok]] == ln[k[ok]])
                 & ((s[k[ok]] - e[prev[ok]]) * scale < band_gap_px))
    first = np.flatnonzero(~joins)
    last = np.r_[first[1:] - 1, len(k) - 1]
    return Lod(bars, labels, ln[k[first]], s[k[first]], np.maximum.reduceat(e[k], first),
               (last - first + 1).astype(np.int64))


def envelope(times, values, window: tuple[float, float], width_px: int) -> tuple[np.ndarray, np.ndarray]:
    """A step curve (value from each time on) decimated to one column per pixel of the window:
    (x, y) of a polyline drawing each column's lowest and highest value, so the peak survives at
    any zoom. ``times`` ascending; the value before the first time is the first value."""
    times, values = np.asarray(times, float), np.asarray(values, float)
    t0, t1 = map(float, window)
    cols = max(1, int(width_px))
    edges = t0 + (t1 - t0) * np.arange(cols + 1) / cols
    # value in force at each column's start, and every change inside the column
    at = np.clip(np.searchsorted(times, edges[:-1], side="right") - 1, 0, len(times) - 1)
    lo, hi = values[at].copy(), values[at].copy()
    inside = np.flatnonzero((times >= t0) & (times < t1))
    col = np.minimum(((times[inside] - t0) / (t1 - t0) * cols).astype(np.int64), cols - 1)
    np.minimum.at(lo, col, values[inside])
    np.maximum.at(hi, col, values[inside])
    x = np.repeat(edges[:-1], 2)
    y = np.stack([lo, hi], axis=1).ravel()
    return np.r_[x, t1], np.r_[y, values[np.clip(np.searchsorted(times, t1, side="right") - 1, 0, len(times) - 1)]]
