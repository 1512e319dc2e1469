"""``Compare``: two or more plans (or measured timelines) on one shared time axis, plus a table.

Each entry becomes a Gantt row group in one plotly figure with ``shared_xaxes``, so equal times line
up vertically. The table lists makespan, bubble, speedup over the baseline entry and peak memory per
rank; the best value of each column is green, values worse than the baseline red, a peak over the
memory cap is flagged. Differences are also drawn: actions whose place in their rank's order differs
from the baseline's are outlined in the chart and counted in the table. Plans with other actions
than the baseline (another placement, fused vs split backward) cannot be compared action by action:
the table says "other actions" instead of a count, and nothing is outlined.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import traitlets

from ._panel import PanelBase, show_figure

from ..costmodel import fits
from ..ir import Plan, Schedule
from ..problem import Problem, StageCosts
from ..sim import SimResult, costs_for, simulate
from ..timeline import Metrics, Timeline, compute_metrics

__all__ = ["Compare", "Entry", "compare_entries", "moved_actions", "comparable", "comparison_table",
           "compare_figure"]


@dataclass(frozen=True)
class Entry:
    """One compared item: its label, timeline, metrics and (if known) schedule and costs."""

    name: str
    timeline: Timeline
    metrics: Metrics
    schedule: Schedule | None
    costs: StageCosts | None
    unit_costs: bool = False
    """Simulated without a problem: the numbers are unit costs, not ms/MiB."""


def _entry(name: str, item: Any, problem: Problem | None) -> Entry:
    if isinstance(item, (Plan, Schedule)):
        if problem is None and isinstance(item, Plan):
            from ..planfile import embedded_problem
            problem = embedded_problem(item, name)   # a plan made from a problem carries it
        res = simulate(item, problem)
        return Entry(name, res.timeline, res.metrics, res.timeline.schedule, res.costs, problem is None)
    if isinstance(item, SimResult):
        return Entry(name, item.timeline, item.metrics, item.timeline.schedule, item.costs)
    if isinstance(item, Timeline):
        costs = None
        if item.schedule is not None:
            costs = costs_for(item.schedule, problem) if problem is not None else None
        return Entry(name, item, compute_metrics(item, costs), item.schedule, costs)
    raise TypeError(f"cannot compare {name!r}: a {type(item).__name__}; give a Plan, Schedule, "
                    "SimResult or Timeline")


def compare_entries(items: Mapping[str, Any] | Sequence[tuple[str, Any]],
                    problem: Problem | None = None) -> list[Entry]:
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    if len(pairs) < 2:
        raise ValueError(f"Compare needs at least two entries, got {len(pairs)}")
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"entry names must be distinct, got {names}")
    return [_entry(str(n), it, problem) for n, it in pairs]


def comparable(schedule: Schedule | None, reference: Schedule | None) -> bool:
    """Both known and holding the same actions (so they can be compared one by one)."""
    return schedule is not None and reference is not None and set(schedule.position) == set(reference.position)


def moved_actions(schedule: Schedule | None, reference: Schedule | None) -> list[str]:
    """Actions whose (rank, index among that rank's actions) differs from the reference.

    Empty when either is unknown or they hold different action sets (not comparable one by one).
    """
    if schedule is None or reference is None:
        return []
    mine, ref = schedule.position, reference.position
    if set(mine) != set(ref):
        return []
    return [f"{k[0]}{k[1]}{k[2]}" for k, v in mine.items() if ref[k] != v]


def comparison_table(entries: Sequence[Entry], baseline: int = 0,
                     memory_limit: float | None = None) -> str:
    """HTML table of the entries' metrics with the best and the regressions marked."""
    from ..gantt import fmt_num
    base = entries[baseline].metrics
    R = max(e.timeline.ranks for e in entries)
    unit = any(e.unit_costs for e in entries)
    tu, mu = ("", "") if unit else (" (ms)", " (MiB)")
    cols = [f"makespan{tu}", "bubble", f"speedup vs {entries[baseline].name}", f"max peak mem{mu}"] + \
           [f"peak r{r}{mu}" for r in range(R)] + ["moved vs baseline"]
    rows = []
    for e in entries:
        m = e.metrics
        peaks = list(m.peak_memory) + [np.nan] * (R - len(m.peak_memory))
        ref = entries[baseline].schedule
        moved = len(moved_actions(e.schedule, ref)) if comparable(e.schedule, ref) else np.nan
        rows.append([m.makespan, m.bubble, base.makespan / m.makespan if m.makespan else np.nan,
                     m.max_peak_memory] + peaks + [moved])
    arr = np.array(rows, dtype=float)
    lower_better = [True, True, False, True] + [True] * R + [None]
    th = "".join(f"<th style='padding:2px 8px'>{html.escape(c)}</th>" for c in ["plan"] + cols)
    body = []
    for i, e in enumerate(entries):
        tds = [f"<td style='padding:2px 8px'><b>{html.escape(e.name)}</b>"
               f"{' (baseline)' if i == baseline else ''}</td>"]
        for j, v in enumerate(arr[i]):
            style = "padding:2px 8px;text-align:right"
            lb = lower_better[j]
            col = arr[:, j]
            if lb is not None and np.isfinite(v) and len(entries) > 1 and not np.allclose(col, col[0]):
                best = np.nanmin(col) if lb else np.nanmax(col)
                if np.isclose(v, best):
                    style += ";background:#d8f5d0;font-weight:bold"
                elif (v > arr[baseline, j] + 1e-9) if lb else (v < arr[baseline, j] - 1e-9):
                    style += ";color:#c00"
            if 3 <= j < 4 + R and np.isfinite(v) and not fits(v, memory_limit):
                style += ";outline:2px solid #c00"
            last = j == len(cols) - 1
            txt = ("other actions" if last and not np.isfinite(v) and i != baseline
                   else "" if not np.isfinite(v) else f"{v:.1%}" if j == 1 else f"{v:.3f}×" if j == 2
                   else f"{int(v)}" if last else fmt_num(v))
            tds.append(f"<td style='{style}'>{txt}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    notes = []
    if memory_limit:
        notes.append(f"memory cap {fmt_num(memory_limit)}{mu.strip(' ()') and ' ' + mu.strip(' ()')}")
    if unit:
        notes.append("<b>UNIT COSTS</b> (no problem: F=I=W=1 per rank; not ms or MiB)")
    if any(not comparable(e.schedule, entries[baseline].schedule) for k, e in enumerate(entries) if k != baseline):
        notes.append("moved: actions at another place in their rank's order than in the baseline (outlined "
                     "in the chart); 'other actions': another placement or backward split, not comparable "
                     "one by one")
    cap = f"<caption style='text-align:left'>{' · '.join(notes)}</caption>" if notes else ""
    return (f"<table style='border-collapse:collapse;font:12px sans-serif'>{cap}<thead><tr>{th}</tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table>")


def compare_figure(entries: Sequence[Entry], baseline: int = 0, *, show_moves: bool = True,
                   widget: bool = False):
    """All entries' Gantts stacked on one shared time axis (a FigureWidget if ``widget``; the
    ``Compare`` panel shows a plain figure through ``_panel.show_figure``)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from ..gantt import LABEL_LIMIT, gantt_title, gantt_traces

    n = len(entries)
    heights = [max(2, e.timeline.ranks) for e in entries]
    base = entries[baseline]
    titles = []
    unit = any(e.unit_costs for e in entries)
    for e in entries:
        titles.append(gantt_title(e.metrics, e.name, (base.name, base.metrics.makespan)
                                  if e is not base else None, source=e.timeline.source, unit_costs=unit))
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, row_heights=heights,
                        vertical_spacing=min(0.08, 0.25 / n), subplot_titles=titles)
    seen: set[str] = set()
    for i, e in enumerate(entries):
        hl = moved_actions(e.schedule, base.schedule) if show_moves and e is not base else []
        labels = len(e.timeline.actions) * n <= LABEL_LIMIT
        for tr in gantt_traces(e.timeline, labels=labels, highlight=hl, unit_costs=unit):
            tr.showlegend = tr.legendgroup not in seen
            seen.add(tr.legendgroup)
            fig.add_trace(tr, row=i + 1, col=1)
        R = e.timeline.ranks
        fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(R)),
                         ticktext=[f"r{r}" for r in range(R)], row=i + 1, col=1)
    fig.update_xaxes(title_text="time (unit costs)" if unit else "time (ms)", row=n, col=1)
    fig.update_xaxes(showgrid=True, gridcolor="#eee", tickformat=",~r")
    for ann in fig.layout.annotations:
        ann.font.size = 12
        ann.x, ann.xanchor = 0.0, "left"
    fig.update_layout(barmode="overlay", bargap=0.0, plot_bgcolor="white",
                      height=120 + sum(22 * h + 40 for h in heights), margin=dict(l=50, r=20, t=85, b=40),
                      # the legend on its own band at the very top, above the first entry's title
                      legend=dict(orientation="h", yref="container", y=1.0, yanchor="top", xanchor="left",
                                  x=0.0, font_size=11),
                      uniformtext=dict(minsize=7, mode="hide"))
    return go.FigureWidget(fig) if widget else fig


class Compare(PanelBase, traitlets.HasTraits):
    """Side-by-side plans: ``Compare({"auto": plan_a, "1F1B": plan_b}, problem)``.

    Entries are Plans/Schedules (simulated with ``problem``), SimResults or Timelines (measured);
    ``baseline`` names (or indexes) the entry speedups are relative to (default: the first).
    """

    baseline = traitlets.Int(0)
    """Index of the baseline entry."""

    def __init__(self, items: Mapping[str, Any] | Sequence[tuple[str, Any]], problem: Problem | None = None,
                 *, baseline: int | str = 0, memory_limit: float | None = None):
        super().__init__()
        import ipywidgets as w
        self.problem = problem
        self.entries = compare_entries(items, problem)
        names = [e.name for e in self.entries]
        if isinstance(baseline, str):
            if baseline not in names:
                raise ValueError(f"baseline {baseline!r} is not one of {names}")
            baseline = names.index(baseline)
        if not 0 <= baseline < len(names):
            raise ValueError(f"baseline index {baseline} out of range 0..{len(names) - 1}")
        self.memory_limit = memory_limit if memory_limit is not None else (
            problem.memory_limit if problem is not None else None)
        self.figure = compare_figure(self.entries, baseline)
        """The chart (a plotly Figure), shown through ``chart``."""
        self.chart = w.Output()
        self.table = w.HTML()
        self.out = w.Output()
        self.widget = w.VBox([self.chart, self.table, self.out])
        self.observe(self._on_baseline, names="baseline")
        self.baseline = baseline
        if baseline == 0:
            self._on_baseline({"new": 0})

    def _on_baseline(self, change) -> None:
        try:
            b = change["new"]
            self.table.value = comparison_table(self.entries, b, self.memory_limit)
            self.figure = compare_figure(self.entries, b)
            show_figure(self.chart, self.figure)
        except Exception as e:  # noqa: BLE001 - surface callback errors in the widget
            self.out.append_stderr(f"{type(e).__name__}: {e}\n")

    def metrics(self) -> dict[str, Metrics]:
        return {e.name: e.metrics for e in self.entries}

    def speedups(self) -> dict[str, float]:
        b = self.entries[self.baseline].metrics.makespan
        return {e.name: b / e.metrics.makespan for e in self.entries}

    def __repr__(self) -> str:
        parts = ", ".join(f"{e.name}: {e.metrics.makespan:.4g}" for e in self.entries)
        return f"Compare({parts}; baseline {self.entries[self.baseline].name})"
