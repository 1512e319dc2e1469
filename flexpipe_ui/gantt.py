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

from .problem import StageCosts
from .timeline import Metrics, Timeline, compute_metrics, memory_at

__all__ = ["gantt_figure", "fmt_num", "gantt_traces", "WEBGL_LIMIT", "gantt_title", "baseline_makespan", "idle_intervals",
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


def gantt_title(metrics: Metrics | None, title: str | None = None, baseline: Any = None,
                memory_limit: float | None = None, source: str = "simulated") -> str:
    """One line: name, makespan, bubble %, peak memory (vs the cap) and speedup over the baseline."""
    parts = [title or f"{source} timeline"]
    if metrics is not None:
        parts.append(f"makespan {fmt_num(metrics.makespan)}")
        parts.append(f"bubble {metrics.bubble:.1%}")
        if any(metrics.peak_memory):
            peak = f"peak mem {fmt_num(metrics.max_peak_memory)}"
            if memory_limit is not None:
                peak += f" / cap {fmt_num(memory_limit)}"
                if metrics.max_peak_memory > memory_limit + 1e-9:
                    peak += " (OVER)"
            parts.append(peak)
        base = baseline_makespan(baseline)
        if base is not None and metrics.makespan > 0:
            parts.append(f"{base[1] / metrics.makespan:.3f}× vs {base[0]}")
    return " · ".join(parts)


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


def gantt_figure(timeline: Any, costs: StageCosts | None = None, *, title: str | None = None,
                 memory_limit: float | None = None, metrics: Metrics | None = None,
                 baseline: Any = None, labels: bool | str = "auto", memory: bool = True,
                 idle: bool = True, highlight: Sequence[str] = (), height: int | None = None,
                 width: int | None = None, x_range: tuple[float, float] | None = None,
                 render: str = "auto"):
    """A plotly ``Figure`` of ``timeline`` (a ``Timeline`` or a ``SimResult``).

    ``costs`` enables the memory panels and memory in hover; ``metrics`` (computed if omitted) and
    ``baseline`` (a makespan, Metrics, SimResult or ``(label, ...)``, e.g. ``("1F1B", res)``) go in
    the title; ``memory_limit`` draws the cap. ``labels`` puts the microbatch number on each bar
    ("auto": when there are at most ``LABEL_LIMIT`` bars). ``highlight`` outlines actions by name
    (e.g. a ``ScheduleError``'s ``actions``). ``x_range`` fixes the time axis (shared comparisons).
    ``render``: "svg" (bars), "webgl" (segments, for big schedules) or "auto" (webgl above
    ``WEBGL_LIMIT`` bars).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tl, costs, metrics = _unpack(timeline, costs, metrics)
    if costs is not None and not isinstance(costs, StageCosts):
        raise GanttError(f"costs must be StageCosts, got {type(costs).__name__}")
    if metrics is None:
        metrics = compute_metrics(tl, costs)
    n = len(tl.actions)
    show_labels = (n <= LABEL_LIMIT) if labels == "auto" else bool(labels)
    if render not in ("auto", "svg", "webgl"):
        raise GanttError(f"render must be 'auto', 'svg' or 'webgl', got {render!r}")
    webgl = render == "webgl" or (render == "auto" and n > WEBGL_LIMIT)
    R = tl.ranks
    with_mem = bool(memory and costs is not None and n and R)
    rows = 1 + (R if with_mem else 0)
    gantt_h = max(160, 28 * R + 90)
    mem_h = 55 if R <= 8 else 38
    if with_mem:
        row_heights = [gantt_h] + [mem_h] * R
        fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.012 if R > 4 else 0.03,
                            row_heights=row_heights)
    else:
        fig = make_subplots(rows=1, cols=1)
    total_h = height or (gantt_h + (mem_h * R + 20 if with_mem else 0) + 60)

    mem_now, curves = (memory_at(tl, costs) if costs is not None and n else (np.zeros(n), []))
    lane_px = (gantt_h - 60) / max(R, 1)
    for tr in gantt_traces(tl, mem_now if costs is not None else None, labels=show_labels, idle=idle,
                           highlight=highlight, webgl=webgl, lane_px=lane_px):
        fig.add_trace(tr, row=1, col=1)

    if with_mem:
        # from just under the lowest value (static memory often dominates) to above peak and cap
        peak = max(max((float(v.max()) for _, v in curves), default=0.0), memory_limit or 0.0)
        low = min(min((float(v.min()) for _, v in curves), default=0.0), memory_limit or np.inf)
        span = max(peak - low, 1e-9)
        bottom, top = max(0.0, low - 0.15 * span), peak + 0.1 * span
        line_cls = go.Scattergl if webgl else go.Scatter   # 16 SVG panels of ~1.5k steps cost ~1 s
        for r, (times, vals) in enumerate(curves):
            x, y = _step_xy(times, vals, tl.makespan)
            over = memory_limit is not None and float(vals.max()) > memory_limit + 1e-9
            fig.add_trace(line_cls(
                x=x, y=y, mode="lines", line=dict(shape="hv", width=1.2,
                                                  color="#d62728" if over else "#444"),
                name=f"memory rank {r}",
                showlegend=False, hovertemplate=f"rank {r}" + " t=%{x:.4g}: memory %{y:.4g}<extra></extra>"),
                row=2 + r, col=1)
            if memory_limit is not None:
                fig.add_trace(go.Scatter(
                    x=[0.0, max(tl.makespan, 1e-9)], y=[memory_limit, memory_limit], mode="lines",
                    line=dict(color="#d62728", dash="dash", width=1), showlegend=(r == 0),
                    name=f"memory cap {fmt_num(memory_limit)}", legendgroup="cap",
                    hovertemplate=f"cap {memory_limit:.4g}<extra></extra>"), row=2 + r, col=1)
            fig.update_yaxes(range=[bottom, top], nticks=3, title_text=f"r{r}", title_standoff=2,
                             title_font_size=9, tickfont_size=8, row=2 + r, col=1)
        fig.update_xaxes(title_text="time", row=rows, col=1)
    else:
        fig.update_xaxes(title_text="time", row=1, col=1)

    fig.update_yaxes(range=[R - 0.5, -0.5], tickmode="array", tickvals=list(range(R)),
                     ticktext=[f"rank {r}" for r in range(R)], row=1, col=1)
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    fig.update_layout(
        barmode="overlay", bargap=0.0, height=total_h, width=width,
        title=dict(text=gantt_title(metrics, title, baseline, memory_limit, tl.source), x=0.01,
                   font_size=14),
        margin=dict(l=60, r=20, t=50, b=40), plot_bgcolor="white",
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        uniformtext=dict(minsize=7, mode="hide"), hoverlabel=dict(namelength=-1))
    fig.update_xaxes(showgrid=True, gridcolor="#eee", zeroline=False)
    return fig


def gantt_traces(tl: Timeline, memory: np.ndarray | None = None, *, labels: bool = True,
                 idle: bool = True, highlight: Sequence[str] = (), legendgroup_prefix: str = "",
                 showlegend: bool = True, yaxis_label: str = "rank", webgl: bool = False,
                 lane_px: float = 22.0) -> list:
    """The bar traces of one Gantt: an "idle" trace and one trace per kind (never one per bar).

    ``memory`` (per action, e.g. from ``memory_at``) adds memory to the hover text; ``highlight``
    outlines actions by name in red. ``webgl`` draws segments ``lane_px`` thick instead of bars
    (see ``WEBGL_LIMIT``). Used by ``gantt_figure`` and by side-by-side comparisons.
    """
    if webgl:
        return _webgl_traces(tl, memory, idle=idle, highlight=highlight, showlegend=showlegend,
                             legendgroup_prefix=legendgroup_prefix, yaxis_label=yaxis_label,
                             lane_px=lane_px)
    import plotly.graph_objects as go

    n = len(tl.actions)
    names = np.array([str(a) for a in tl.actions], dtype=object)
    kind_names = np.array([a.kind.name for a in tl.actions], dtype=object)
    mbs = np.array([a.microbatch for a in tl.actions])
    stages = np.array([a.stage for a in tl.actions])
    mem_now = memory if memory is not None else np.zeros(n)
    hl = list(dict.fromkeys(map(str, highlight)))
    out = []
    if idle and n:
        ir, is_, ie = idle_intervals(tl)
        if len(ir):
            out.append(go.Bar(
                name="idle", orientation="h", base=is_, x=ie - is_, y=ir, marker_color=IDLE_COLOR,
                marker_line_width=0, width=0.8, customdata=np.stack([is_, ie], axis=1),
                legendgroup=legendgroup_prefix + "idle", showlegend=showlegend,
                hovertemplate="idle %{x:.4g}<br>from %{customdata[0]:.4g} to %{customdata[1]:.4g}"
                              f"<extra>{yaxis_label} %{{y}}</extra>", legendrank=1000))
    for kind in dict.fromkeys(a.kind for a in tl.actions):
        sel = kind_names == kind.name
        start, end = tl.start[sel], tl.end[sel]
        cd = np.stack([names[sel], start, end, mem_now[sel], stages[sel], tl.rank[sel]], axis=1)
        marked = np.isin(names[sel], hl) if hl else None
        line_w = np.where(marked, 3.0, 0.4) if hl else 0.4
        line_c = np.where(marked, "#ff0000", "white").tolist() if hl else "white"
        hover = ("<b>%{customdata[0]}</b> (stage %{customdata[4]}, mb %{text})<br>"
                 "start %{customdata[1]:.4g} · end %{customdata[2]:.4g} · dur %{x:.4g}")
        if memory is not None:
            hover += "<br>memory %{customdata[3]:.4g}"
        # another stream (copy engine) overlaps compute: a thin bar at the bottom of the lane
        y_off, bar_w = (0.0, 0.8) if kind.occupies_compute else (0.3, 0.2)
        out.append(go.Bar(
            name=f"{kind.name} ({kind.description or kind.role})", orientation="h",
            base=start, x=end - start, y=tl.rank[sel] + y_off, width=bar_w,
            marker=dict(color=kind.color, line=dict(width=line_w, color=line_c)),
            text=mbs[sel].astype(str), textposition="inside" if labels else "none",
            insidetextanchor="middle", textangle=0, textfont=dict(size=10, color="white"),
            legendgroup=legendgroup_prefix + kind.name, showlegend=showlegend,
            customdata=cd, hovertemplate=hover + f"<extra>{yaxis_label} %{{customdata[5]}}</extra>"))
    return out


def _segments(start: np.ndarray, end: np.ndarray, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x, y of one polyline drawing each interval as its own segment (NaN breaks between)."""
    gap = np.full(len(start), np.nan)
    return (np.stack([start, end, gap], axis=1).ravel(),
            np.stack([rank.astype(float), rank.astype(float), gap], axis=1).ravel())


def _webgl_traces(tl: Timeline, memory, *, idle, highlight, showlegend, legendgroup_prefix,
                  yaxis_label, lane_px) -> list:
    import plotly.graph_objects as go

    names = np.array([str(a) for a in tl.actions], dtype=object)
    kind_names = np.array([a.kind.name for a in tl.actions], dtype=object)
    mbs = np.array([a.microbatch for a in tl.actions])
    stages = np.array([a.stage for a in tl.actions])
    mem_now = memory if memory is not None else np.zeros(len(names))
    width = max(1.0, 0.8 * lane_px)
    out = []
    if idle and len(names):
        ir, is_, ie = idle_intervals(tl)
        if len(ir):
            x, y = _segments(is_, ie, ir)
            out.append(go.Scattergl(x=x, y=y, mode="lines", name="idle", hoverinfo="skip",
                                    line=dict(color=IDLE_COLOR, width=width), showlegend=showlegend,
                                    legendgroup=legendgroup_prefix + "idle"))
    hover = ("<b>%{customdata[0]}</b> (stage %{customdata[4]}, mb %{customdata[5]})<br>"
             "start %{customdata[1]:.4g} · end %{customdata[2]:.4g}")
    if memory is not None:
        hover += "<br>memory %{customdata[3]:.4g}"
    for kind in dict.fromkeys(a.kind for a in tl.actions):
        sel = kind_names == kind.name
        start, end, rank = tl.start[sel], tl.end[sel], tl.rank[sel]
        x, y = _segments(start, end, rank)
        group = legendgroup_prefix + kind.name
        out.append(go.Scattergl(x=x, y=y, mode="lines", name=f"{kind.name} ({kind.description or kind.role})",
                                line=dict(color=kind.color, width=width), hoverinfo="skip",
                                legendgroup=group, showlegend=showlegend))
        cd = np.stack([names[sel], start, end, mem_now[sel], stages[sel], mbs[sel]], axis=1)
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

