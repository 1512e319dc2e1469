"""The static Gantt chart: a ``Timeline`` (simulated or measured) as a plotly figure.

Ranks are rows (rank 0 on top), time runs along x, each kind has its colour (``Kind.color``) and each
bar carries its microbatch number; hover shows action, start, end and the rank's memory while the
action runs. Idle time is drawn as faint grey "idle" bars so bubbles are visible (and hoverable), and
a memory-over-time panel per rank sits under the chart with the memory cap as a dashed line. Metrics
(makespan, bubble, peak memory, speedup over a baseline) go in the title.

Why one trace per kind: plotly draws a trace's bars in one pass; a trace per bar (the naive Gantt)
makes 12k traces at 16 ranks × 128 microbatches and freezes the page. Here the figure has
(#kinds + 1 + #ranks) traces whatever the schedule size. plotly is imported inside the functions,
so the core package stays importable without it.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import gantt_scale as gs
from .costmodel import fits
from .problem import StageCosts
from .timeline import Metrics, Timeline, compute_metrics, memory_at

__all__ = ["gantt_figure", "fmt_num", "units", "TIME_UNIT", "MEM_UNIT", "UNIT_COSTS_TITLE", "gantt_traces",
           "WEBGL_LIMIT", "gantt_title", "baseline_makespan", "idle_intervals",
           "memory_at", "GanttError", "LABEL_LIMIT"]

LABEL_LIMIT = 4000
"""Above this many bars, microbatch labels are off by default ("auto"): they cannot be read at that
density and text layout is the slowest part of plotly's bar drawing."""

WEBGL_LIMIT = 4000
"""Above this many bars ``render="auto"`` draws WebGL: each kind is one ``scattergl`` of thick line
segments plus one of (nearly invisible) markers at the bar centres that carry the hover. Measured on
16 × 128 ZB-V (12,288 bars) in Chromium here: SVG bars take ~1.4 s of main thread per plot, WebGL
~0.2 s (``benchmarks/bench_ui.py``)."""

IDLE_COLOR = "rgba(160,160,160,0.18)"


class GanttError(ValueError):
    """Arguments the Gantt cannot draw (wrong type, mismatched sizes)."""


def _unpack(timeline: Any, costs: StageCosts | None, metrics: Metrics | None):
    """Accept a Timeline or a SimResult (which carries its costs and metrics)."""
    if hasattr(timeline, "timeline") and hasattr(timeline, "metrics"):
        res = timeline
        timeline = res.timeline
        costs = res.costs if costs is None else costs
        metrics = res.metrics if metrics is None else metrics
    if not isinstance(timeline, Timeline):
        raise GanttError(f"gantt_figure needs a Timeline or SimResult, got {type(timeline).__name__}")
    return timeline, costs, metrics


def fmt_num(v: float) -> str:
    """4 significant digits, but whole numbers with separators from 10,000 up (58,228 MiB, not
    5.823e+04)."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def baseline_makespan(baseline: Any) -> tuple[str, float] | None:
    """(label, makespan) of a baseline given as a number, Metrics, SimResult, Timeline or
    ``(label, any of those)``; None for None."""
    if baseline is None:
        return None
    label = "baseline"
    if isinstance(baseline, tuple) and len(baseline) == 2 and isinstance(baseline[0], str):
        label, baseline = baseline
    if isinstance(baseline, (int, float, np.floating)):
        value = float(baseline)
    elif isinstance(baseline, Metrics):
        value = baseline.makespan
    elif hasattr(baseline, "metrics") and hasattr(baseline, "timeline"):
        value = baseline.metrics.makespan
    elif isinstance(baseline, Timeline):
        value = baseline.makespan
    else:
        raise GanttError(f"baseline must be a makespan, Metrics, SimResult or Timeline (optionally "
                         f"as (label, value)); got {type(baseline).__name__}")
    if not value > 0:
        raise GanttError(f"baseline makespan must be > 0, got {value}")
    return label, value


TIME_UNIT, MEM_UNIT = "ms", "MiB"
"""Units of problem costs (the profiler's and the presets'); unit costs (no problem) have none."""

UNIT_COSTS_TITLE = "UNIT COSTS (no problem: F=I=W=1 per rank)"


def units(unit_costs: bool = False) -> tuple[str, str]:
    """(" ms", " MiB") suffixes, or ("", "") for unit costs."""
    return ("", "") if unit_costs else (" " + TIME_UNIT, " " + MEM_UNIT)


def gantt_title(metrics: Metrics | None, title: str | None = None, baseline: Any = None,
                memory_limit: float | None = None, source: str = "simulated", *,
                unit_costs: bool = False) -> str:
    """One line: name, makespan, bubble %, peak memory (vs the cap) and speedup over the baseline;
    with ``unit_costs`` it says so loudly (no problem attached: the numbers are not ms or MiB)."""
    tu, mu = units(unit_costs)
    parts = ([UNIT_COSTS_TITLE] if unit_costs else []) + [title or f"{source} timeline"]
    if metrics is not None:
        parts.append(f"makespan {fmt_num(metrics.makespan)}{tu}")
        parts.append(f"bubble {metrics.bubble:.1%}")
        if any(metrics.peak_memory):
            peak = f"peak mem {fmt_num(metrics.max_peak_memory)}{mu}"
            if memory_limit is not None:
                peak += f" / cap {fmt_num(memory_limit)}{mu}"
                if not fits(metrics.max_peak_memory, memory_limit):
                    peak += " (OVER)"
            parts.append(peak)
        base = baseline_makespan(baseline)
        if base is not None and metrics.makespan > 0:
            parts.append(f"{base[1] / metrics.makespan:.3f}× vs {base[0]}")
    return " · ".join(parts)


def _measured_peaks(tl: Timeline) -> str:
    """" · measured peak a / b" (per rank) for a measured timeline that carries its peaks."""
    peaks = getattr(tl, "peak_memory_measured", None)
    if not peaks:
        return ""
    return " · measured peak " + " / ".join(fmt_num(p) for p in peaks)


def idle_intervals(tl: Timeline, until: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, start, end) of every gap on each rank's compute stream, from 0 to ``until``."""
    until = tl.makespan if until is None else until
    comp = np.array([a.kind.occupies_compute for a in tl.actions], bool) if len(tl.actions) else np.zeros(0, bool)
    rs, ss, es = [], [], []
    for r in range(tl.ranks):
        sel = comp & (tl.rank == r)
        st, en = tl.start[sel], tl.end[sel]
        o = np.argsort(st, kind="stable")
        st, en = st[o], en[o]
        # running max of ends: a gap is where the next start exceeds everything before it
        prev = np.maximum.accumulate(np.r_[0.0, en]) if len(en) else np.zeros(1)
        gs = prev
        ge = np.r_[st, until]
        keep = ge - gs > 1e-12
        rs.append(np.full(int(keep.sum()), r))
        ss.append(gs[keep])
        es.append(ge[keep])
    if not rs:
        return np.zeros(0, int), np.zeros(0), np.zeros(0)
    return np.concatenate(rs), np.concatenate(ss), np.concatenate(es)


def _step_xy(times: np.ndarray, vals: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    """Collapse same-instant changes (keep the value after all of them) and extend to ``end``."""
    if len(times) > 1:
        last = np.r_[times[1:] != times[:-1], True]
        times, vals = times[last], vals[last]
    return np.r_[times, max(end, float(times[-1]))], np.r_[vals, vals[-1]]


STAGE_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")
KIND_PATTERN = {"F": "", "I": "/", "W": "x", "B": "+"}
"""With ``color_by="stage"`` the colour says the stage and this hatching says the kind."""

OVERVIEW_MIN_BARS = 600
"""``overview="auto"`` adds the range slider (an overview strip to pick a window) from this many bars."""


def _label_mode(labels: bool | str, tl: Timeline, n: int) -> str:
    """"none", "mb" (microbatch), "action" ("3F1") or "stage" ("s3") for ``labels``.

    "auto": none above ``LABEL_LIMIT`` bars; the full action name when a rank hosts several stages
    (V / interleaved placements: the bar must say which stage); else the microbatch. Labels that do
    not fit a bar are hidden and appear when the user zooms into a window."""
    if labels in ("mb", "action", "stage", "none"):
        return labels
    if labels == "auto":
        if n > LABEL_LIMIT:
            return "none"
        multi = tl.schedule is not None and len(set(tl.schedule.placement)) < len(tl.schedule.placement)
        return "action" if multi else "mb"
    if labels is True:
        return "mb"
    if labels is False or labels is None:
        return "none"
    raise GanttError(f"labels must be True, False, 'auto', 'mb', 'action', 'stage' or 'none', got {labels!r}")


def _memory_panels(fig, go, tl: Timeline, curves, memory_limit, webgl: bool, mu: str,
                   groups: Sequence[range], view: tuple[float, float]) -> None:
    """One memory-over-time step curve per rank under the Gantt (per group of ranks past 16
    ranks: the range of its ranks' memory per pixel column), with the cap dashed."""
    peak = max(max((float(v.max()) for _, v in curves), default=0.0), memory_limit or 0.0)
    low = min(min((float(v.min()) for _, v in curves), default=0.0), memory_limit or np.inf)
    span = max(peak - low, 1e-9)
    bottom, top = max(0.0, low - 0.15 * span), peak + 0.1 * span
    fmt = ",.0f" if top >= 100 else ".3~g"      # 76,480 MiB, never 7.648e+04
    line_cls = go.Scattergl if webgl else go.Scatter   # 16 SVG panels of ~1.5k steps cost ~1 s
    for k, grp in enumerate(groups):
        who = f"rank {grp[0]}" if len(grp) == 1 else f"ranks {grp[0]}-{grp[-1]}"
        if len(grp) == 1:
            times, vals = curves[grp[0]]
            x, y = _step_xy(times, vals, tl.makespan)
            shape = "hv"
        else:
            x, y = gs.group_curve(curves, grp, view)
            shape = "linear"
        over = not fits(max(float(curves[r][1].max()) for r in grp), memory_limit)
        fig.add_trace(line_cls(
            x=x, y=y, mode="lines", line=dict(shape=shape, width=1.2, color="#d62728" if over else "#444"),
            name=f"memory {who}", showlegend=False,
            hovertemplate=f"{who} t=%{{x:,.4g}}: memory %{{y:{fmt}}}{mu}<extra></extra>"), row=2 + k, col=1)
        if memory_limit is not None:
            fig.add_trace(go.Scatter(
                x=[0.0, max(tl.makespan, 1e-9)], y=[memory_limit, memory_limit], mode="lines",
                line=dict(color="#d62728", dash="dash", width=1), showlegend=(k == 0),
                name=f"memory cap {fmt_num(memory_limit)}{mu}", legendgroup="cap",
                hovertemplate=f"cap {fmt_num(memory_limit)}{mu}<extra></extra>"), row=2 + k, col=1)
        title = f"r{grp[0]}{mu}" if len(grp) == 1 else f"r{grp[0]}-{grp[-1]}{mu}"
        fig.update_yaxes(range=[bottom, top], nticks=3, tickformat=fmt, title_text=title,
                         title_standoff=2, title_font_size=9, tickfont_size=8, row=2 + k, col=1)


def gantt_figure(timeline: Any, costs: StageCosts | None = None, *, title: str | None = None,
                 memory_limit: float | None = None, metrics: Metrics | None = None,
                 baseline: Any = None, labels: bool | str = "auto", memory: bool = True,
                 idle: bool = True, highlight: Sequence[str] = (), height: int | None = None,
                 width: int | None = None, x_range: tuple[float, float] | None = None,
                 render: str = "auto", unit_costs: bool = False, color_by: str = "kind",
                 window: tuple[float, float] | None = None, overview: bool | str = "auto",
                 lod: bool | str = "auto"):
    """A plotly ``Figure`` of ``timeline`` (a ``Timeline`` or a ``SimResult``).

    ``costs`` enables the memory panels and memory in hover; ``metrics`` (computed if omitted) and
    ``baseline`` (a makespan, Metrics, SimResult or ``(label, ...)``, e.g. ``("1F1B", res)``) go in
    the title; ``memory_limit`` draws the cap. ``labels``: "auto" (see ``_label_mode``), True/"mb"
    (microbatch), "action" ("3F1"), "stage", False. ``highlight`` outlines actions by name (e.g. a
    ``ScheduleError``'s ``actions``). ``x_range`` fixes the time axis (shared comparisons).
    ``render``: "svg" (bars), "webgl" (segments, for big schedules) or "auto" (webgl above
    ``WEBGL_LIMIT`` bars). Level of detail at scale: ``color_by="stage"`` colours bars by stage and
    hatches them by kind; ``window=(t0, t1)`` opens zoomed on that time window (labels become
    readable; double-click shows all); ``overview`` adds a range slider under the chart ("auto":
    from ``OVERVIEW_MIN_BARS`` SVG bars). ``unit_costs`` says loudly that no problem was attached.
    Axes and hover carry units (ms, MiB) unless ``unit_costs``.

    ``lod`` (level of detail, ``gantt_scale``): "auto" draws, for the window the figure opens on
    (``window``, else the whole schedule) at its ``width``, the bars at least 3 px wide one by one
    and merges thinner ones into grey "occupied" bands (hover: how many actions, from when to
    when), if any bar is that thin; with a ``window`` only what is visible is drawn (draw another
    window with another call). False draws every bar. Past 16 ranks lanes are 12 px and the
    memory panels group ranks (16 panels, each the per-pixel range of its ranks' memory).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tl, costs, metrics = _unpack(timeline, costs, metrics)
    if costs is not None and not isinstance(costs, StageCosts):
        raise GanttError(f"costs must be StageCosts, got {type(costs).__name__}")
    if color_by not in ("kind", "stage"):
        raise GanttError(f"color_by must be 'kind' or 'stage', got {color_by!r}")
    if metrics is None:
        metrics = compute_metrics(tl, costs)
    n = len(tl.actions)
    if render not in ("auto", "svg", "webgl"):
        raise GanttError(f"render must be 'auto', 'svg' or 'webgl', got {render!r}")
    if lod not in ("auto", True, False):
        raise GanttError(f"lod must be 'auto', True or False, got {lod!r}")
    view = tuple(window) if window is not None else (0.0, max(tl.makespan, 1e-9))
    lv = gs.lod_view(tl, view, width) if lod and n else None
    if lv is not None and not (lod is True or len(lv.band_lane) or window is not None):
        lv = None                   # every bar is wide enough: draw them all, as always
    drawn = n if lv is None else lv.shapes
    label_mode = _label_mode(labels, tl, drawn)
    webgl = render == "webgl" or (render == "auto" and drawn > WEBGL_LIMIT)
    tu, mu = units(unit_costs)
    R = tl.ranks
    with_mem = bool(memory and costs is not None and n and R)
    groups = gs.memory_groups(R) if with_mem else []
    rows = 1 + len(groups)
    gantt_h = max(160, gs.lane_height(R) * R + 90)
    mem_h = 55 if len(groups) <= 8 else 38
    show_overview = (not webgl and drawn >= OVERVIEW_MIN_BARS) if overview == "auto" else bool(overview)
    if with_mem:
        row_heights = [gantt_h] + [mem_h] * len(groups)
        fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.012 if R > 4 else 0.03,
                            row_heights=row_heights)
    else:
        fig = make_subplots(rows=1, cols=1)
    top_margin = 95
    total_h = height or (gantt_h + (mem_h * len(groups) + 20 if with_mem else 0) + top_margin + 10
                         + (60 if show_overview else 0))

    mem_now, curves = (memory_at(tl, costs) if costs is not None and n else (np.zeros(n), []))
    lane_px = (gantt_h - 60) / max(R, 1)
    for tr in gantt_traces(tl, mem_now if costs is not None else None, labels=label_mode, idle=idle,
                           highlight=highlight, webgl=webgl, lane_px=lane_px, color_by=color_by,
                           unit_costs=unit_costs, only=None if lv is None else lv.bars,
                           view=None if lv is None else (view, width)):
        fig.add_trace(tr, row=1, col=1)
    if lv is not None and len(lv.band_lane):
        fig.add_trace(gs.band_trace(go, lv, tu), row=1, col=1)
    if with_mem:
        _memory_panels(fig, go, tl, curves, memory_limit, webgl, mu, groups, view)
    fig.update_xaxes(title_text=f"time{' (' + TIME_UNIT + ')' if tu else ' (unit costs)'}", row=rows, col=1)
    if show_overview:
        fig.update_xaxes(rangeslider=dict(visible=True, thickness=0.05), row=rows, col=1)

    fig.update_yaxes(range=[R - 0.5, -0.5], tickmode="array", tickvals=list(range(R)),
                     ticktext=[f"rank {r}" for r in range(R)], row=1, col=1)
    rng = window if window is not None else x_range
    if rng is not None:
        fig.update_xaxes(range=list(rng))
    fig.update_layout(
        barmode="overlay", bargap=0.0, height=total_h, width=width,
        # title on top, the legend on its own band under it (never over the title), left-aligned
        title=dict(text=gantt_title(metrics, title, baseline, memory_limit, tl.source, unit_costs=unit_costs)
                   + _measured_peaks(tl),
                   x=0.01, xanchor="left", y=1.0, yref="container", yanchor="top", pad=dict(t=10),
                   font_size=14),
        margin=dict(l=80, r=20, t=top_margin, b=40), plot_bgcolor="white",
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0.0, font_size=11),
        # a window: every bar in it gets its own label size (uniform sizing counts the slivers outside)
        uniformtext=dict(minsize=7, mode=False if window is not None else "hide"), hoverlabel=dict(namelength=-1))
    fig.update_xaxes(showgrid=True, gridcolor="#eee", zeroline=False, tickformat=",~r")
    return fig


def _bar_labels(mode: str, mbs: np.ndarray, stages: np.ndarray, names: np.ndarray) -> np.ndarray:
    if mode == "action":
        return names
    if mode == "stage":
        return np.char.add("s", stages.astype(str)).astype(object)
    return mbs.astype(str)


def gantt_traces(tl: Timeline, memory: np.ndarray | None = None, *, labels: bool | str = True,
                 idle: bool = True, highlight: Sequence[str] = (), legendgroup_prefix: str = "",
                 showlegend: bool = True, yaxis_label: str = "rank", webgl: bool = False,
                 lane_px: float = 22.0, color_by: str = "kind", unit_costs: bool = False,
                 only: np.ndarray | None = None, view: tuple | None = None) -> list:
    """The bar traces of one Gantt: an "idle" trace and one trace per kind (never one per bar).

    ``memory`` (per action, e.g. from ``memory_at``) adds memory to the hover text; ``highlight``
    outlines actions by name in red. ``labels``: True/"mb", "action", "stage" or False/"none".
    ``color_by="stage"`` colours each bar by its stage and hatches it by kind. ``webgl`` draws
    segments ``lane_px`` thick instead of bars (see ``WEBGL_LIMIT``). Used by ``gantt_figure`` and
    by side-by-side comparisons. Hover: action, stage, microbatch, start, end, duration (ms), memory (MiB).
    ``only`` (indices) draws just those bars, ``view`` ((t0, t1), width) just the idle gaps wide
    enough to see there (the level of detail, ``gantt_scale``).
    """
    tu, mu = units(unit_costs)
    keep = None
    if only is not None:
        keep = np.zeros(len(tl.actions), bool)
        keep[np.asarray(only, dtype=np.int64)] = True
    if webgl:
        return _webgl_traces(tl, memory, idle=idle, highlight=highlight, showlegend=showlegend,
                             legendgroup_prefix=legendgroup_prefix, yaxis_label=yaxis_label,
                             lane_px=lane_px, tu=tu, mu=mu, keep=keep, view=view)
    import plotly.graph_objects as go

    mode = labels if isinstance(labels, str) else ("mb" if labels else "none")
    n = len(tl.actions)
    names = np.array([str(a) for a in tl.actions], dtype=object)
    kind_names = np.array([a.kind.name for a in tl.actions], dtype=object)
    mbs = np.array([a.microbatch for a in tl.actions])
    stages = np.array([a.stage for a in tl.actions])
    mem_now = memory if memory is not None else np.zeros(n)
    hl = list(dict.fromkeys(map(str, highlight)))
    out = []
    if idle and n:
        ir, is_, ie = _idle(tl, view)
        if len(ir):
            out.append(go.Bar(
                name="idle", orientation="h", base=is_, x=ie - is_, y=ir, marker_color=IDLE_COLOR,
                marker_line_width=0, width=0.8, customdata=np.stack([is_, ie, ie - is_], axis=1),
                legendgroup=legendgroup_prefix + "idle", showlegend=showlegend,
                hovertemplate=f"idle %{{customdata[2]:,.4g}}{tu}<br>from %{{customdata[0]:,.4g}} to "
                              f"%{{customdata[1]:,.4g}}{tu}<extra>{yaxis_label} %{{y}}</extra>", legendrank=1000))
    hover = ("<b>%{customdata[0]}</b> (stage %{customdata[4]}, mb %{customdata[7]})<br>"
             f"start %{{customdata[1]:,.4g}} · end %{{customdata[2]:,.4g}} · dur %{{customdata[6]:,.4g}}{tu}")
    if memory is not None:
        hover += f"<br>memory %{{customdata[3]:,.4g}}{mu}"
    for kind in dict.fromkeys(a.kind for a in tl.actions):
        sel = kind_names == kind.name
        if keep is not None:
            sel &= keep
            if not sel.any():
                continue
        start, end = tl.start[sel], tl.end[sel]
        # dur from customdata: on a bar with a base, %{x} is the END (plotly adds the base)
        cd = np.stack([names[sel], start, end, mem_now[sel], stages[sel], tl.rank[sel], end - start,
                       mbs[sel]], axis=1)
        marked = np.isin(names[sel], hl) if hl else None
        line_w = np.where(marked, 3.0, 0.4) if hl else 0.4
        line_c = np.where(marked, "#ff0000", "white").tolist() if hl else "white"
        if color_by == "stage":
            color = [STAGE_PALETTE[s % len(STAGE_PALETTE)] for s in stages[sel]]
            pattern = dict(shape=KIND_PATTERN.get(kind.name, "."), fgcolor="white", size=6, solidity=0.3)
        else:
            color, pattern = kind.color, None
        # another stream (copy engine) overlaps compute: a thin bar at the bottom of the lane
        y_off, bar_w = (0.0, 0.8) if kind.occupies_compute else (0.3, 0.2)
        out.append(go.Bar(
            name=f"{kind.name} ({kind.description or kind.role})", orientation="h",
            base=start, x=end - start, y=tl.rank[sel] + y_off, width=bar_w,
            marker=dict(color=color, line=dict(width=line_w, color=line_c),
                        **({"pattern": pattern} if pattern else {})),
            text=_bar_labels(mode, mbs[sel], stages[sel], names[sel]),
            textposition="inside" if mode != "none" else "none",
            insidetextanchor="middle", textangle=0, textfont=dict(size=10, color="white"),
            legendgroup=legendgroup_prefix + kind.name, showlegend=showlegend,
            customdata=cd, hovertemplate=hover + f"<extra>{yaxis_label} %{{customdata[5]}}</extra>"))
    return out


def _segments(start: np.ndarray, end: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x, y of one polyline drawing each interval as its own segment (NaN breaks between)."""
    gap = np.full(len(start), np.nan)
    return (np.stack([start, end, gap], axis=1).ravel(),
            np.stack([rank.astype(float), rank.astype(float), gap], axis=1).ravel())


def _idle(tl: Timeline, view) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``idle_intervals``, keeping (with a level-of-detail ``view``) the gaps visible there."""
    ir, is_, ie = idle_intervals(tl)
    if view is None:
        return ir, is_, ie
    ok = gs.visible_idle(ir, is_, ie, *view)
    return ir[ok], is_[ok], ie[ok]


def _webgl_traces(tl: Timeline, memory, *, idle, highlight, showlegend, legendgroup_prefix,
                  yaxis_label, lane_px, tu="", mu="", keep=None, view=None) -> list:
    import plotly.graph_objects as go

    names = np.array([str(a) for a in tl.actions], dtype=object)
    kind_names = np.array([a.kind.name for a in tl.actions], dtype=object)
    mbs = np.array([a.microbatch for a in tl.actions])
    stages = np.array([a.stage for a in tl.actions])
    mem_now = memory if memory is not None else np.zeros(len(names))
    width = max(1.0, 0.8 * lane_px)
    out = []
    if idle and len(names):
        ir, is_, ie = _idle(tl, view)
        if len(ir):
            x, y = _segments(is_, ie, ir)
            out.append(go.Scattergl(x=x, y=y, mode="lines", name="idle", hoverinfo="skip",
                                    line=dict(color=IDLE_COLOR, width=width), showlegend=showlegend,
                                    legendgroup=legendgroup_prefix + "idle"))
    hover = ("<b>%{customdata[0]}</b> (stage %{customdata[4]}, mb %{customdata[5]})<br>"
             f"start %{{customdata[1]:,.4g}} · end %{{customdata[2]:,.4g}} · dur %{{customdata[6]:,.4g}}{tu}")
    if memory is not None:
        hover += f"<br>memory %{{customdata[3]:,.4g}}{mu}"
    for kind in dict.fromkeys(a.kind for a in tl.actions):
        sel = kind_names == kind.name
        if keep is not None:
            sel &= keep
            if not sel.any():
                continue
        start, end, rank = tl.start[sel], tl.end[sel], tl.rank[sel]
        x, y = _segments(start, end, rank)
        group = legendgroup_prefix + kind.name
        out.append(go.Scattergl(x=x, y=y, mode="lines", name=f"{kind.name} ({kind.description or kind.role})",
                                line=dict(color=kind.color, width=width), hoverinfo="skip",
                                legendgroup=group, showlegend=showlegend))
        cd = np.stack([names[sel], start, end, mem_now[sel], stages[sel], mbs[sel], end - start], axis=1)
        out.append(go.Scattergl(x=(start + end) / 2, y=rank, mode="markers", showlegend=False,
                                marker=dict(color=kind.color, size=max(3.0, 0.5 * width), opacity=0.01),
                                customdata=cd, legendgroup=group, name=kind.name,
                                hovertemplate=hover + f"<extra>{yaxis_label} %{{y}}</extra>"))
    hl = list(dict.fromkeys(map(str, highlight)))
    if hl:
        sel = np.isin(names, hl)
        x, y = _segments(tl.start[sel], tl.end[sel], tl.rank[sel])
        out.append(go.Scattergl(x=x, y=y, mode="lines", name="highlighted", hoverinfo="skip",
                                line=dict(color="#ff0000", width=max(1.0, width * 0.35))))
    return out

