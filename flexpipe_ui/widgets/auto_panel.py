"""``AutoPanel``: set up a problem, run the auto-scheduler in a thread, watch it, open a result.

Inputs: a preset model (``flexpipe_ui.presets``) or a ``flexpipe-problem/1`` profile file, ranks,
microbatches, memory cap, time limit and seed. Run starts ``flexpipe_ui.search.auto_search`` in a
background thread (a foreground loop would hold widget events until it ends, so Stop would not be
seen). It is the same search as ``auto_search`` at nearly the same cost: the progress callback only
records the event; the progress bar and status are refreshed at most every ``status_every`` seconds
and the best-so-far Gantt (drawn from the search's own ``SimResult``, never re-simulated) at the
first plan and then at most every ``redraw_every`` seconds. Like ``auto_search`` it never returns
a plan worse than the best library schedule, whatever the time limit (the library seeds are all
tried first). Stop sets the search's cancel event; the best plan so far is kept. The top candidates
are listed by what differs (placement, chunks, backward split/fused, rules, layer split, makespan
in ms, peak in MiB); "open in editor" shows a ``Designer`` of the selected one in the panel's own
output area, and "compare" shows it against 1F1B and the best library seed there too.
"""
from __future__ import annotations

import html
import re
import threading
import time
from pathlib import Path
from typing import Any

import traitlets

from ._panel import PanelBase

from ..problem import Problem, load_problem

__all__ = ["AutoPanel", "candidate_label"]


def candidate_label(rank: int, plan, sim, desc: str) -> str:
    """One line per candidate saying what differs: makespan (ms), peak (MiB), placement and chunks,
    backward split/fused, priority rules, layer split."""
    from ..gantt import fmt_num
    sched = plan.schedule
    chunks = sched.num_stages // max(1, sched.ranks)
    m = re.match(r"library (\S+)", desc)
    if m:
        shape = f"library {m.group(1)}"
    else:
        pm = re.search(r"placement=(\w+)\(", desc)
        shape = f"{pm.group(1) if pm else 'custom'} placement"
    split = any(a.kind.name == "W" for row in sched.order for a in row)
    parts = [f"{rank}. {fmt_num(sim.makespan)} ms", f"peak {fmt_num(sim.metrics.max_peak_memory)} MiB", shape,
             f"{chunks} stage{'s' if chunks != 1 else ''}/rank", "split backward (I, W)" if split else "fused backward (B)"]
    pr = re.search(r"priority=\(([^)]*)\)", desc)
    if pr:
        parts.append("priority " + ">".join(x.strip(" '\"") for x in pr.group(1).split(",") if x.strip()))
    if plan.partition is not None:
        sizes = [len(p) for p in plan.partition]
        parts.append(("refined " if "refined" in desc else "") + "layers " + "|".join(map(str, sizes)))
    return " · ".join(parts)


class AutoPanel(PanelBase, traitlets.HasTraits):
    """Auto-scheduler panel. ``panel.run()`` is what the Run button does; ``panel.wait()`` joins."""

    running = traitlets.Bool(False)
    evaluated = traitlets.Int(0)
    best_makespan = traitlets.Float(float("inf"))
    status = traitlets.Unicode("")

    def __init__(self, problem: Problem | None = None, *, preset: str = "gpt", ranks: int = 4,
                 microbatches: int = 8, time_limit: float = 10.0, seed: int = 0, top: int = 5,
                 redraw_every: float = 2.0, redraw_first: float = 1.0, status_every: float = 0.25,
                 name: str = "auto"):
        super().__init__()
        import ipywidgets as w
        import plotly.graph_objects as go

        from ..presets import list_presets

        self.name = name
        self.redraw_every = redraw_every
        self.status_every = status_every
        self.redraw_first = redraw_first
        self._last_status = 0.0
        self._exact_line = ""
        self.fixed_problem = problem
        self.result = None
        self.memory_line = ""   # under a cap: recomputes, offloads and ms against full recompute
        self.error: BaseException | None = None
        self.designer = None
        self.events: list[Any] = []
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_draw = 0.0
        self._drawn_best = float("inf")
        self._spec: dict | None = None
        self._drawn_plan = None

        names = [n for n, _ in list_presets()]
        self.w_preset = w.Dropdown(options=names, value=preset if preset in names else names[0],
                                   description="preset", layout=w.Layout(width="230px"))
        self.w_profile = w.Text(value="", placeholder="or a flexpipe-problem/1 file (profile)",
                                description="profile", layout=w.Layout(width="330px"))
        self.w_ranks = w.BoundedIntText(value=problem.ranks if problem else ranks, min=1, max=256,
                                        description="ranks", layout=w.Layout(width="150px"))
        self.w_mbs = w.BoundedIntText(value=problem.microbatches if problem else microbatches, min=1,
                                      max=4096, description="microbatches", layout=w.Layout(width="190px"))
        cap = problem.memory_limit if problem is not None and problem.memory_limit else 0.0
        self.w_cap = w.FloatText(value=cap, description="mem cap", tooltip="0: the problem's own",
                                 layout=w.Layout(width="170px"))
        self.w_time = w.FloatText(value=time_limit, description="time (s)", layout=w.Layout(width="150px"))
        self.w_seed = w.IntText(value=seed, description="seed", layout=w.Layout(width="130px"))
        self.w_top = w.BoundedIntText(value=top, min=1, max=50, description="top", layout=w.Layout(width="120px"))
        from ..search.exact import available as exact_available
        self.w_exact = w.FloatText(value=0.0, description="exact (s)", layout=w.Layout(width="150px"),
                                   disabled=not exact_available(),
                                   tooltip="seconds of CP-SAT re-ordering on the best structures (0: off)"
                                   if exact_available() else "needs OR-Tools: pip install ortools")
        self.btn_run = w.Button(description="Run", icon="play", button_style="success")
        self.btn_stop = w.Button(description="Stop", icon="stop", disabled=True, button_style="danger")
        self.progress = w.IntProgress(value=0, min=0, max=100, description="0 evals",
                                      layout=w.Layout(width="420px"))
        self.w_status = w.HTML()
        self.w_candidates = w.Select(options=[], rows=max(2, min(top, 8)), description="top plans",
                                     layout=w.Layout(width="98%"), style={"description_width": "70px"})
        self.btn_open = w.Button(description="open in editor", icon="pencil", disabled=True)
        self.btn_compare = w.Button(description="compare with 1F1B", icon="columns", disabled=True)
        self.figure = go.Figure(layout=dict(height=200, title="best so far: (not run yet)",
                                            margin=dict(l=80, r=20, t=95, b=40)))
        """The chart last drawn (a plain plotly Figure; shown through ``chart``)."""
        self.chart = w.Output(layout=w.Layout(min_height="120px"))
        """Where the best-so-far Gantt is shown: a plotly mime bundle set directly on the Output,
        cheaper than syncing a FigureWidget's traces and drawn by the page as soon as it arrives."""
        self.out = w.Output()
        self.btn_run.on_click(self._guard(lambda _b: self.run()))
        self.btn_stop.on_click(self._guard(lambda _b: self.stop()))
        self.btn_open.on_click(self._guard(lambda _b: self.open_selected()))
        self.btn_compare.on_click(self._guard(lambda _b: self.compare_selected()))
        self.observe(self._on_state, names=["running", "evaluated", "best_makespan", "status"])
        if problem is not None:
            self.w_preset.disabled = True
            self.w_profile.value = "(problem given in code)"
            self.w_profile.disabled = True
        self.widget = w.VBox([
            w.HBox([self.w_preset, self.w_profile]),
            w.HBox([self.w_ranks, self.w_mbs, self.w_cap, self.w_time, self.w_seed, self.w_top, self.w_exact]),
            w.HBox([self.btn_run, self.btn_stop, self.progress]), self.w_status, self.chart,
            self.w_candidates, w.HBox([self.btn_open, self.btn_compare]), self.out])

    # -- inputs ---------------------------------------------------------------------------------
    def problem(self) -> Problem:
        """The problem the inputs describe (profile file > given problem > preset)."""
        from ..presets import preset
        ranks, mbs = int(self.w_ranks.value), int(self.w_mbs.value)
        path = self.w_profile.value.strip()
        if self.fixed_problem is not None:
            p = self.fixed_problem.with_(ranks=ranks, microbatches=mbs)
        elif path:
            if not Path(path).exists():
                raise ValueError(f"profile file {path!r} does not exist (give a flexpipe-problem/1 JSON, "
                                 f"e.g. from `flexpipe profile`, or clear the field to use the preset)")
            p = load_problem(path).with_(ranks=ranks, microbatches=mbs)
        else:
            p = preset(self.w_preset.value, ranks=ranks, microbatches=mbs)
        cap = float(self.w_cap.value or 0.0)
        if cap < 0:
            raise ValueError(f"memory cap must be >= 0 (0 keeps the problem's own), got {cap}")
        return p.with_(memory_limit=cap) if cap > 0 else p

    # -- running --------------------------------------------------------------------------------
    def run(self, *, wait: bool = False, max_evals: int | None = None) -> None:
        """Start the search in a background thread (``wait`` joins it, for scripts and tests)."""
        if self.running:
            raise ValueError("a search is already running: press Stop first")
        problem = self.problem()
        self._cancel.clear()
        self.result, self.error, self.events = None, None, []
        self._drawn_best = float("inf")
        self._spec = None
        self.evaluated, self.best_makespan = 0, float("inf")
        self.running = True
        self.status = f"searching {problem.ranks} ranks × {problem.microbatches} microbatches…"
        self._problem = problem
        self._thread = threading.Thread(target=self._work, args=(problem, max_evals), daemon=True,
                                        name=f"flexpipe-auto-{self.name}")
        self._thread.start()
        if wait:
            self.wait()

    def stop(self) -> None:
        """Ask the search to stop after its current evaluation (keeps the best so far)."""
        self._cancel.set()
        self.status = "stopping after the current evaluation…"

    def wait(self, timeout: float | None = None) -> bool:
        """Join the search thread; True when it has finished."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def search_options(self, max_evals: int | None = None) -> dict:
        """The keywords the panel passes to ``auto_search`` (the one place it is called from)."""
        return dict(time_limit=float(self.w_time.value) or None, seed=int(self.w_seed.value),
                    progress=self._on_progress, top=int(self.w_top.value), stop=self._cancel.is_set,
                    max_evals=max_evals, exact=max(0.0, float(self.w_exact.value or 0.0)))

    def _work(self, problem: Problem, max_evals: int | None) -> None:
        from ..search import auto_search
        try:
            res = auto_search(problem, **self.search_options(max_evals))
        except Exception as e:  # noqa: BLE001 - shown in the panel (NoFeasiblePlan, cancelled...)
            self.error = e
            self.status = f"<span style='color:#c00'>{html.escape(type(e).__name__)}: {html.escape(str(e))}</span>"
            self.running = False
            return
        self.result = res
        self.w_candidates.options = [(candidate_label(i + 1, plan, sim, desc), i)
                                     for i, (plan, sim, desc) in enumerate(res.candidates)]
        self.w_candidates.value = 0
        self._draw(res.candidates[0][0], res.candidates[0][1], final=True)
        st = res.stats
        self.evaluated = int(st.get("evaluated", self.evaluated))
        # finished (budget, time or exhausted): the bar shows done, not the unused budget
        self.progress.max = max(1, self.evaluated)
        self.progress.value = self.progress.max
        self.progress.description = f"{self.evaluated} evals"
        self.best_makespan = res.makespan
        seed = ""
        if res.best_seed is not None:
            seed = f" · best library {res.best_seed[1].makespan:,.4g} ms ({html.escape(res.best_seed[2])})"
        status = (f"done ({st.get('stopped')}): {st.get('evaluated')} evaluated, {st.get('pruned')} pruned "
                  f"in {st.get('elapsed_s')} s · best {res.makespan:,.4g} ms (lower bound "
                  f"{res.lower_bound:,.4g} ms){seed}")
        runs = [x for x in st.get("exact", []) if "bound" in x]
        # the exact polish: ONE line, whatever the number of structures it ran on
        self._exact_line = ("exact polish: " + "; ".join(
            f"{x['before']:,.4g} → {x['after']:,.4g} ms (no order of that structure beats {x['bound']:,.4g}, "
            f"{x['status'].lower()})" for x in runs)) if runs else ""
        self.memory_line = ""
        if problem.memory_limit is not None:   # what recompute/offload bought under the cap
            from ..memory_fit import memory_summary
            self.memory_line = memory_summary(res.best, problem, res.makespan)
        self.status = status + "".join(f"<br>{html.escape(x)}" for x in (self.memory_line,) if x) + (
            f"<br>{self._exact_line}" if self._exact_line else "")
        self.running = False

    def _on_progress(self, p) -> None:
        """Runs in the search thread after every evaluation: keep it cheap (records the event; the
        widgets at most every ``status_every`` s, the chart at most every ``redraw_every`` s)."""
        self.events.append(p)
        now = time.perf_counter()
        improved = p.best_plan is not None and p.best_makespan < self._drawn_best - 1e-12
        # the first chart after ``redraw_first`` s (a short search just gets its final chart),
        # then at most every ``redraw_every`` s: each draw costs the search ~0.1 s
        due = (p.elapsed >= self.redraw_first and
               (self._drawn_best == float("inf") or now - self._last_draw >= self.redraw_every))
        if improved and p.best_result is not None and due:
            self._draw(p.best_plan, p.best_result)
            self._last_draw = now = time.perf_counter()
        if now - self._last_status < self.status_every:
            return
        self._last_status = now
        self.progress.max = int(p.total or max(p.evaluated, 1))
        self.progress.value = min(p.evaluated, self.progress.max)
        self.progress.description = f"{p.evaluated} evals"
        self.evaluated = p.evaluated
        if p.best_makespan < self.best_makespan:
            self.best_makespan = p.best_makespan
        left = getattr(p, "estimate", None)
        self.status = (f"{p.phase}: {p.evaluated}/{p.total} evaluated, best {p.best_makespan:,.4g} ms "
                       f"({html.escape(p.description)}) · {p.elapsed:.1f} s"
                       + (f" · about {left:.0f} s to go" if left is not None else ""))

    def _draw(self, plan, sim, final: bool = False) -> None:
        import json

        import plotly.io as pio

        from ..gantt import gantt_figure
        drawn = self._drawn_plan
        same = (drawn is not None and plan.partition == drawn.partition
                and plan.schedule.placement == drawn.schedule.placement and plan.schedule.order == drawn.schedule.order)
        if final and self._spec is not None and same:
            # the live chart already shows this plan: only its title changes ("best so far" → "best")
            text = self.figure.layout.title.text.replace("best so far", "best", 1)
            self.figure.layout.title.text = text
            spec = dict(self._spec, layout={**self._spec["layout"], "title": {**self._spec["layout"]["title"], "text": text}})
        else:
            # the candidate's description is long: it goes in the list and the status, not the title
            fig = gantt_figure(sim, title="best" if final else "best so far", memory=False,
                               memory_limit=self._problem.memory_limit)
            self.figure = fig
            spec = json.loads(pio.to_json(fig, validate=False))
            spec["config"] = {"displaylogo": False, "responsive": True}
        self._spec, self._drawn_plan = spec, plan
        fig = self.figure
        self.chart.outputs = ({"output_type": "display_data", "metadata": {},
                               "data": {"application/vnd.plotly.v1+json": spec,
                                        "text/plain": fig.layout.title.text or "best so far"}},)
        self._drawn_best = sim.makespan

    # -- results --------------------------------------------------------------------------------
    def _selected(self):
        if self.result is None:
            raise ValueError("no result yet: press Run and wait for it to finish")
        i = self.w_candidates.value if self.w_candidates.value is not None else 0
        return self.result.candidates[i]

    def open_selected(self, **kw):
        """A ``Designer`` for the selected candidate, shown below (and kept as ``designer``)."""
        from .designer import Designer
        plan, _, desc = self._selected()
        self.designer = Designer(plan, self._problem, name=kw.pop("name", f"{self.name}_edit"),
                                 title=kw.pop("title", "auto " + candidate_label(self.w_candidates.value + 1 if self.w_candidates.value is not None else 1, plan, _, desc).split(" · ", 1)[1]), **kw)
        self._show(self.designer)
        return self.designer

    def compare_selected(self):
        from ..library import build_named
        from .compare import Compare
        plan, _, desc = self._selected()
        items = [("1F1B", build_named("1f1b", self._problem)), ("auto", plan)]
        if self.result.best_seed is not None and self.result.best_seed[0] is not plan:
            items.insert(1, (f"best library: {self.result.best_seed[2]}", self.result.best_seed[0]))
        cmp = Compare(items, self._problem)
        self._show(cmp)
        return cmp

    def _show(self, obj) -> None:
        """Put ``obj`` in the panel's own output area, wherever this was called from (a button, a
        later cell, a thread): set the Output's contents directly instead of capturing a display."""
        self.out.outputs = ()
        self.out.append_display_data(obj)

    # -- plumbing -------------------------------------------------------------------------------
    def _on_state(self, change) -> None:
        self.btn_run.disabled = self.running
        self.btn_stop.disabled = not self.running
        self.btn_open.disabled = self.btn_compare.disabled = self.running or self.result is None
        self.w_status.value = f"<div style='font:12px monospace'>{self.status}</div>"

    def __repr__(self) -> str:
        best = f"best {self.best_makespan:.4g}" if self.best_makespan < float("inf") else "not run"
        return f"AutoPanel({'running' if self.running else best}, {self.evaluated} evaluated)"
