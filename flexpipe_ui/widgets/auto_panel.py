"""``AutoPanel``: set up a problem, run the auto-scheduler in a thread, watch it, open a result.

Inputs: a preset model (``flexpipe_ui.presets``) or a ``flexpipe-problem/1`` profile file, ranks,
microbatches, memory cap, time limit and seed. Run starts ``flexpipe_ui.search.auto_search`` in a
background thread (a foreground loop would hold widget events until it ends, so Stop would not be
seen); its progress callback updates the progress bar and, when the best makespan improves (at most
every ``redraw_every`` seconds), the best-so-far Gantt. Stop sets the search's cancel event; the best
plan so far is kept. The top candidates are listed; "open in editor" makes a ``Designer`` of the
selected one and "compare" shows it against 1F1B and the best library seed.
"""
from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any

import traitlets

from ._panel import PanelBase

from ..problem import Problem, load_problem

__all__ = ["AutoPanel"]


class AutoPanel(PanelBase, traitlets.HasTraits):
    """Auto-scheduler panel. ``panel.run()`` is what the Run button does; ``panel.wait()`` joins."""

    running = traitlets.Bool(False)
    evaluated = traitlets.Int(0)
    best_makespan = traitlets.Float(float("inf"))
    status = traitlets.Unicode("")

    def __init__(self, problem: Problem | None = None, *, preset: str = "gpt", ranks: int = 4,
                 microbatches: int = 8, time_limit: float = 10.0, seed: int = 0, top: int = 5,
                 redraw_every: float = 0.5, name: str = "auto"):
        super().__init__()
        import ipywidgets as w
        import plotly.graph_objects as go
        from ..presets import list_presets

        self.name = name
        self.redraw_every = redraw_every
        self.fixed_problem = problem
        self.result = None
        self.error: BaseException | None = None
        self.designer = None
        self.events: list[Any] = []
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_draw = 0.0
        self._drawn_best = float("inf")

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
        self.w_candidates = w.Select(options=[], rows=5, description="top plans",
                                     layout=w.Layout(width="720px"))
        self.btn_open = w.Button(description="open in editor", icon="pencil", disabled=True)
        self.btn_compare = w.Button(description="compare with 1F1B", icon="columns", disabled=True)
        self.figure = go.FigureWidget(layout=dict(height=260, title="best so far: (not run yet)",
                                                  margin=dict(l=60, r=20, t=40, b=30)))
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
            w.HBox([self.btn_run, self.btn_stop, self.progress]), self.w_status, self.figure,
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

    def _work(self, problem: Problem, max_evals: int | None) -> None:
        from ..search import auto_search
        try:
            res = auto_search(problem, time_limit=float(self.w_time.value) or None,
                              seed=int(self.w_seed.value), progress=self._on_progress,
                              top=int(self.w_top.value), stop=self._cancel.is_set, max_evals=max_evals,
                              exact=max(0.0, float(self.w_exact.value or 0.0)))
        except Exception as e:  # noqa: BLE001 - shown in the panel (NoFeasiblePlan, cancelled...)
            self.error = e
            self.status = f"<span style='color:#c00'>{html.escape(type(e).__name__)}: {html.escape(str(e))}</span>"
            self.running = False
            return
        self.result = res
        self.w_candidates.options = [
            (f"{i + 1}. makespan {sim.makespan:.4g} · peak {sim.metrics.max_peak_memory:.4g} · {desc}", i)
            for i, (_, sim, desc) in enumerate(res.candidates)]
        self.w_candidates.value = 0
        self._draw(res.candidates[0][0], res.candidates[0][1], final=True)
        st = res.stats
        self.evaluated = int(st.get("evaluated", self.evaluated))
        # finished (budget, time or exhausted): the bar shows done, not the unused budget
        self.progress.max = max(1, self.evaluated)
        self.progress.value = self.progress.max
        self.best_makespan = res.makespan
        self.status = (f"done ({st.get('stopped')}): {st.get('evaluated')} evaluated, {st.get('pruned')} pruned "
                       f"in {st.get('elapsed_s')} s · best {res.makespan:.4g} (lower bound "
                       f"{res.lower_bound:.4g})")
        runs = [x for x in st.get("exact", []) if "bound" in x]
        if runs:
            self.status += " · exact: " + ", ".join(
                f"{x['before']:.4g}→{x['after']:.4g} (≥ {x['bound']:.4g}, {x['status'].lower()})" for x in runs)
        self.running = False

    def _on_progress(self, p) -> None:
        self.events.append(p)
        self.progress.max = int(p.total or max(p.evaluated, 1))
        self.progress.value = min(p.evaluated, self.progress.max)
        self.progress.description = f"{p.evaluated} evals"
        self.evaluated = p.evaluated
        if p.best_plan is not None and p.best_makespan < self._drawn_best - 1e-12:
            now = time.perf_counter()
            if now - self._last_draw >= self.redraw_every:
                from ..sim import simulate
                self._draw(p.best_plan, simulate(p.best_plan, self._problem))
                self._last_draw = now
        if p.best_makespan < self.best_makespan:
            self.best_makespan = p.best_makespan
        self.status = (f"{p.phase}: {p.evaluated}/{p.total} evaluated, best {p.best_makespan:.4g} "
                       f"({html.escape(p.description)}) · {p.elapsed:.1f} s")

    def _draw(self, plan, sim, final: bool = False) -> None:
        from ..gantt import gantt_figure
        # the candidate's description is long: it goes in the list and the status, not the title
        fig = gantt_figure(sim, title="best" if final else "best so far", memory=False,
                           memory_limit=self._problem.memory_limit)
        with self.figure.batch_update():
            self.figure.data = []
            self.figure.add_traces(list(fig.data))
            self.figure.layout.update(fig.layout.to_plotly_json())
            self.figure.layout.height = fig.layout.height
        self._drawn_best = sim.makespan

    # -- results --------------------------------------------------------------------------------
    def _selected(self):
        if self.result is None:
            raise ValueError("no result yet: press Run and wait for it to finish")
        i = self.w_candidates.value if self.w_candidates.value is not None else 0
        return self.result.candidates[i]

    def open_selected(self, **kw):
        """A ``Designer`` for the selected candidate, shown below (and kept as ``designer``)."""
        from IPython.display import display
        from .designer import Designer
        plan, _, desc = self._selected()
        self.designer = Designer(plan, self._problem, name=kw.pop("name", f"{self.name}_edit"),
                                 title=f"auto: {desc}", **kw)
        self.out.clear_output()
        with self.out:
            display(self.designer)
        return self.designer

    def compare_selected(self):
        from IPython.display import display
        from ..library import build_named
        from .compare import Compare
        plan, _, desc = self._selected()
        items = [("1F1B", build_named("1f1b", self._problem)), ("auto", plan)]
        if self.result.best_seed is not None and self.result.best_seed[0] is not plan:
            items.insert(1, (f"best library: {self.result.best_seed[2]}", self.result.best_seed[0]))
        cmp = Compare(items, self._problem)
        self.out.clear_output()
        with self.out:
            display(cmp)
        return cmp

    # -- plumbing -------------------------------------------------------------------------------
    def _on_state(self, change) -> None:
        self.btn_run.disabled = self.running
        self.btn_stop.disabled = not self.running
        self.btn_open.disabled = self.btn_compare.disabled = self.running or self.result is None
        self.w_status.value = f"<div style='font:12px monospace'>{self.status}</div>"

    def __repr__(self) -> str:
        best = f"best {self.best_makespan:.4g}" if self.best_makespan < float("inf") else "not run"
        return f"AutoPanel({'running' if self.running else best}, {self.evaluated} evaluated)"
