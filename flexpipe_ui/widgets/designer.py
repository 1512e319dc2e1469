"""``Designer``: edit a plan by dragging its Gantt bars; every edit is validated, simulated, redrawn.

State lives in traitlets on one small class (``plan``, ``selected``, ``valid``, ``message``,
``makespan``); the widgets are views of it. An edit is a ``flexpipe_ui.edits`` step applied with
``Plan.edit`` (so ``designer.plan.to_python()`` prints the replayable history). An edit that breaks
a dependency or deadlocks is applied to the history but shown as such: the chart draws the order as
asked (packed, not simulated), the validator's actions are outlined in red, its message and grid are
shown, and Undo takes it back. Every change is written to ``<name>.autosave.json`` in the working
directory (the notebook's folder under Jupyter) and replayed from there after a kernel restart.
"""
from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import traitlets

from ._panel import PanelBase

from ..costmodel import fits
from ..graph import locate
from ..ir import Plan, Schedule
from ..planfile import load_plan, plan_to_dict, save_plan
from ..problem import Problem, StageCosts
from ..sim import SimResult, costs_for, duration_table, simulate
from ..timeline import Timeline
from ..validate import ScheduleError, validate
from . import _edits, autosave
from .. import edits
from ._legend import legend_html as _legend_html

__all__ = ["Designer", "AUTOSAVE_FORMAT", "packed_timeline", "baseline_result"]

AUTOSAVE_FORMAT = autosave.AUTOSAVE_FORMAT


def packed_timeline(schedule: Schedule, costs: StageCosts) -> Timeline:
    """Each rank's actions back to back in list order, ignoring dependencies: how an invalid
    schedule is drawn (it cannot be simulated), so the user sees the order they asked for."""
    from ..kinds import kinds as all_kinds
    acts, ranks, starts, ends = [], [], [], []
    klist = tuple(all_kinds().values())
    kidx = {k.name: i for i, k in enumerate(klist)}
    tab = duration_table(klist, costs)
    for r, row in enumerate(schedule.order):
        t = 0.0
        for a in row:
            d = float(tab[kidx[a.kind.name], a.stage]) if 0 <= a.stage < costs.num_stages else 1.0
            acts.append(a)
            ranks.append(r)
            starts.append(t)
            t += d
            ends.append(t)
    return Timeline(schedule.ranks, tuple(acts), np.array(ranks, dtype=np.int64), np.array(starts),
                    np.array(ends), "unsimulated (invalid)", None)


def baseline_result(plan: Plan, problem: Problem | None, costs: StageCosts) -> tuple[str, SimResult]:
    """1F1B on the same ranks, microbatches and layers: the header's speedup reference."""
    from ..library import build_named
    from ..problem import Layer
    if problem is None:
        # the uniform reference (F = I = W = 1 per rank, act 1): one layer per rank
        problem = Problem(ranks=plan.ranks, microbatches=plan.microbatches,
                          layers=tuple(Layer(f=1.0, b=1.0, w=1.0, act=1.0) for _ in range(plan.ranks)),
                          comm=costs.comm)
    elif problem.ranks != plan.ranks or problem.microbatches != plan.microbatches:
        problem = problem.with_(ranks=plan.ranks, microbatches=plan.microbatches)
    base = build_named("1f1b", problem)
    return "1F1B", simulate(base, problem)


class Designer(PanelBase, traitlets.HasTraits):
    """Drag-and-edit designer for one plan. ``display(designer)`` (or leave it last in a cell).

    ``problem`` gives the costs (else the uniform reference costs); ``memory_limit`` defaults to
    the problem's. ``autosave`` is a path, True (``<name>.autosave.json`` in the working
    directory) or False; with ``restore`` an autosave of the same starting plan is replayed.
    ``baseline`` is "1f1b" (built by ``flexpipe_ui.library``), a SimResult, a makespan or None.
    """

    plan = traitlets.Instance(Plan)
    """The current plan (the history's current entry); assigning it records nothing."""
    selected = traitlets.Unicode("")
    """Selected action text, e.g. ``"2F0"``; the buttons act on it."""
    valid = traitlets.Bool(True)
    message = traitlets.Unicode("")
    makespan = traitlets.Float(0.0)

    def __init__(self, plan: Plan | Schedule, problem: Problem | None = None, *,
                 costs: StageCosts | None = None, memory_limit: float | None = None,
                 name: str = "design", autosave: bool | str | Path = True, restore: bool = True,
                 baseline: Any = "1f1b", title: str | None = None):
        super().__init__()
        import ipywidgets as w
        from .gantt_editor import GanttEditor

        plan = plan if isinstance(plan, Plan) else Plan(plan)
        validate(plan.schedule)  # the starting point must be valid: say so before drawing anything
        if problem is None and costs is None:
            from ..planfile import embedded_problem
            problem = embedded_problem(plan, name)   # a plan made from a problem carries it
        self.problem = problem
        self.unit_costs = problem is None and costs is None
        """No problem and no costs: the chart shows unit costs (said in the header and the figure)."""
        self.costs = costs if costs is not None else costs_for(plan, problem)
        self.memory_limit = memory_limit if memory_limit is not None else (
            problem.memory_limit if problem is not None else None)
        self.name = name
        self.title = title or str(plan.meta.get("name", name))
        self.autosave_path = (Path(f"{name}.autosave.json") if autosave is True else
                              Path(autosave) if autosave else None)
        self.errors: list[str] = []
        self.result: SimResult | None = None
        self.error: ScheduleError | None = None
        self.last_edit_ms = float("nan")
        self._base = plan
        # one history: the edits live in each plan's trace (``plan.edit``); the Designer keeps the
        # sequence of plans it showed, so undo/redo also step over a reset or a loaded file
        self._history: list[Plan] = [plan]
        self._pos = 0
        self._refreshes = 0
        self._sweeps = 0                  # the most sweeps one of its simulations took
        self._baseline = self._make_baseline(baseline)

        self.editor = GanttEditor()
        self.editor.unit_costs = self.unit_costs
        self.header = w.HTML()
        self.legend = w.HTML(_legend_html(plan.schedule, self.unit_costs))
        self.status = w.HTML()
        self.out = w.Output(layout=w.Layout(max_height="160px", overflow="auto"))
        self.sel_box = w.Text(description="action", placeholder="e.g. 2F0 (or click a bar)",
                              layout=w.Layout(width="210px"), continuous_update=False)
        b = lambda desc, tip, icon="": w.Button(description=desc, tooltip=tip, icon=icon,
                                                layout=w.Layout(width="auto"))
        self.btn_earlier = b("earlier", "move the selected action one place earlier (←)", "arrow-left")
        self.btn_later = b("later", "move the selected action one place later (→)", "arrow-right")
        self.btn_swap = b("swap next", "swap the selected action with the next one on its rank (s)", "exchange")
        self.btn_undo = b("undo", "undo the last edit (z)", "undo")
        self.btn_redo = b("redo", "redo (y)", "repeat")
        self.btn_reset = b("reset", "back to the starting plan (undoable)", "home")
        self.path_box = w.Text(value=f"{name}.plan.json", description="file", layout=w.Layout(width="260px"))
        self.btn_save = b("save", "save the current plan as flexpipe-plan/1 JSON", "save")
        self.btn_load = b("load", "load a flexpipe-plan/1 file (undoable)", "folder-open")
        self.btn_html = b("export HTML", "standalone Gantt HTML next to the plan file", "file-code-o")
        self.btn_csv = b("torch CSV", "export for torch's _PipelineScheduleRuntime", "table")
        self.btn_trace = b("trace JSON", "Chrome/Perfetto trace of the simulated timeline", "clock-o")
        for btn, fn in ((self.btn_earlier, lambda: self.nudge(-1)), (self.btn_later, lambda: self.nudge(+1)),
                        (self.btn_swap, self.swap_next), (self.btn_undo, self.undo), (self.btn_redo, self.redo),
                        (self.btn_reset, self.reset), (self.btn_save, lambda: self.save()),
                        (self.btn_load, lambda: self.load()), (self.btn_html, lambda: self.export("html")),
                        (self.btn_csv, lambda: self.export("csv")), (self.btn_trace, lambda: self.export("trace"))):
            btn.on_click(self._guard(lambda _b, fn=fn: fn()))
        traitlets.link((self, "selected"), (self.editor, "selected"))
        traitlets.link((self, "selected"), (self.sel_box, "value"))
        self.editor.observe(self._guard(self._on_drop), names="drop")
        self.editor.observe(self._guard(self._on_command), names="command")
        self.observe(self._guard(self._on_plan), names="plan")
        self.widget = w.VBox([
            self.header, self.legend, self.editor,
            w.HBox([self.sel_box, self.btn_earlier, self.btn_later, self.btn_swap, self.btn_undo,
                    self.btn_redo, self.btn_reset]),
            w.HBox([self.path_box, self.btn_save, self.btn_load, self.btn_html, self.btn_csv, self.btn_trace]),
            self.status, self.out])
        note = self._restore() if (restore and self.autosave_path is not None) else None
        if not self._refreshes:
            self._set_plan(plan)  # validate, simulate, draw
        if note:
            self._set_message(note)

    # -- public API (buttons and keys call these; so can code) ---------------------------------
    def apply(self, step: Any) -> Plan:
        """Apply one ``flexpipe_ui.edits`` step as the next history entry; returns the new plan."""
        return self._push(self.plan.edit(step))

    def _push(self, plan: Plan) -> Plan:
        """Show ``plan`` as the next history entry (what was undone past is dropped)."""
        del self._history[self._pos + 1:]
        self._history.append(plan)
        self._pos += 1
        self._set_plan(plan)
        return plan

    def move(self, action: str, index: int) -> Plan:
        """Move ``action`` to position ``index`` in its rank's order."""
        r, i = self._locate(action)
        n = len(self.plan.schedule.order[r])
        if not 0 <= index < n:
            raise IndexError(f"rank {r} has {n} actions; cannot move {action} to position {index}")
        self.selected = str(action)
        if index == i:
            self._set_message(f"{action} is already at position {i} on rank {r}: nothing to do")
            return self.plan
        return self.apply(edits.Move(r, i, index))

    def nudge(self, delta: int) -> Plan | None:
        """Move the selected action ``delta`` places (buttons, arrow keys)."""
        act = self._need_selection()
        r, i = self._locate(act)
        j = i + delta
        if not 0 <= j < len(self.plan.schedule.order[r]):
            self._set_message(f"{act} is already {'first' if j < 0 else 'last'} on rank {r}")
            return None
        return self.move(act, j)

    def swap_next(self) -> Plan | None:
        act = self._need_selection()
        r, i = self._locate(act)
        if i + 1 >= len(self.plan.schedule.order[r]):
            self._set_message(f"{act} is last on rank {r}: nothing to swap with")
            return None
        return self.apply(edits.Swap(r, i, i + 1))

    def undo(self) -> None:
        if self._pos == 0:
            self._set_message("nothing to undo")
            return
        self._pos -= 1
        self._set_plan(self._history[self._pos])

    def redo(self) -> None:
        if self._pos + 1 >= len(self._history):
            self._set_message("nothing to redo")
            return
        self._pos += 1
        self._set_plan(self._history[self._pos])

    def reset(self) -> None:
        """Back to the starting plan as a new history entry (so it can be undone)."""
        self._push(self._base)

    @property
    def can_undo(self) -> bool:
        return self._pos > 0

    @property
    def can_redo(self) -> bool:
        return self._pos + 1 < len(self._history)

    @property
    def history(self) -> tuple[Plan, ...]:
        return tuple(self._history[: self._pos + 1])

    def save(self, path: str | Path | None = None) -> Path:
        p = Path(path or self.path_box.value)
        save_plan(self.plan, p, problem=self.problem)   # the file carries its costs
        self._set_message(f"saved {p} ({self.plan.schedule.num_actions} actions)")
        return p

    def load(self, path: str | Path | None = None) -> Plan:
        """Load a plan file as a new starting point (the previous state stays undoable)."""
        p = Path(path or self.path_box.value)
        new = load_plan(p)
        if new.partition is None and self._base.partition is not None:
            new = Plan(new.schedule, self._base.partition, new.meta)
        return self._push(new)

    def figure(self, **kw):
        """The current state as a static plotly Gantt (for export or a notebook's own layout)."""
        from ..gantt import gantt_figure
        if self.result is not None and self.valid:
            return gantt_figure(self.result, title=self.title, memory_limit=self.memory_limit,
                                baseline=self._baseline, unit_costs=self.unit_costs, **kw)
        tl = packed_timeline(self.plan.schedule, self.costs)
        return gantt_figure(tl, title=f"{self.title} (INVALID: not simulated)", unit_costs=self.unit_costs,
                            highlight=self.error.actions if self.error else (), **kw)

    def export(self, what: str, path: str | Path | None = None) -> Path:
        """Write ``html`` (Gantt), ``png``/``svg`` (kaleido), ``csv`` (torch) or ``trace`` JSON."""
        from .. import export as ex
        stem = Path(path) if path else Path(self.path_box.value).with_suffix("")
        if what == "html":
            p = ex.save_html(self.figure(), Path(path or f"{stem}.html"))
        elif what in ("png", "svg", "pdf"):
            p = ex.save_image(self.figure(), Path(path or f"{stem}.{what}"))
        elif what == "csv":
            p = ex.save_torch_csv(self.plan, Path(path or f"{stem}.csv"))
        elif what == "trace":
            if self.result is None or not self.valid:
                raise ValueError("the current plan is invalid, so it has no simulated timeline to "
                                 "export; undo the edit first")
            p = ex.save_chrome_trace(self.result, Path(path or f"{stem}.trace.json"))
        elif what == "plan":
            p = str(self.save(path))
        else:
            raise ValueError(f"unknown export {what!r}: use html, png, svg, pdf, csv, trace or plan")
        self._set_message(f"wrote {p}")
        return Path(p)

    # -- events ---------------------------------------------------------------------------------
    def _on_drop(self, change) -> None:
        d = change["new"] or {}
        name = d.get("name")
        if not name:
            return
        t0 = time.perf_counter()
        r, i = self._locate(name)
        self.selected = name
        if int(d.get("rank", r)) != r:
            stage = self.plan.schedule.order[r][i].stage
            self._set_message(f"{name} runs on rank {r} (its stage {stage} is placed there), not on "
                              f"rank {d.get('rank')}: drag it along its own row; moving a stage to "
                              f"another rank is a placement change, not a reorder")
            self._redraw()
            return
        t = float(d["time"])
        others = [nm for nm, c in self.editor.bar_centers(r) if nm != name and c < t]
        dst = len(others)
        if dst == i:
            self._set_message(f"{name} dropped at its own place (position {i} on rank {r})")
            self._redraw()
            return
        self.move(name, dst)
        self.last_edit_ms = (time.perf_counter() - t0) * 1e3

    def _on_command(self, change) -> None:
        cmd = (change["new"] or {}).get("cmd")
        fn = {"earlier": lambda: self.nudge(-1), "later": lambda: self.nudge(+1),
              "swap": self.swap_next, "undo": self.undo, "redo": self.redo}.get(cmd)
        if fn is None:
            raise ValueError(f"unknown editor command {cmd!r}")
        fn()

    def _on_plan(self, change) -> None:
        plan: Plan = change["new"]
        self._refreshes += 1
        try:
            try:
                # converged sweeps prove it deadlock-free (``validate.proven_by_simulation``);
                # warm: from the shown plan's ends, a drag re-solves only what it moved
                res = simulate(plan, self.costs, check_after=2 * self._sweeps + 32, warm=self.result)
                self._sweeps = max(self._sweeps, res.rounds)
            except ScheduleError:
                validate(plan.schedule)        # the validator's own report, of what simulate found
                raise
            validate(plan.schedule)            # cached by the simulation
        except ScheduleError as e:
            self.error, self.valid = e, False
            self.editor.show(packed_timeline(plan.schedule, self.costs), highlight=e.actions)
            self.makespan = float("nan")
            self.header.value = self._header(None)
            self._set_message(self._error_html(e), html_=True, keep=True)
        else:
            self.result, self.error, self.valid = res, None, True
            self.makespan = res.makespan
            self.editor.show(res.timeline, res.costs, memory_limit=self.memory_limit)
            self.header.value = self._header(res)
            last = self._last_step()
            self._set_message(f"step {self._pos}: {last} → valid, makespan "
                              f"{res.makespan:.4g}", keep=True)
        self.btn_undo.disabled = not self.can_undo
        self.btn_redo.disabled = not self.can_redo
        self._autosave()

    # -- helpers ----------------------------------------------------------------------------------
    def _set_plan(self, plan: Plan) -> None:
        """Make ``plan`` current and redraw, even when it compares equal to the current one
        (traitlets only notifies on a change, and undo can return to an equal order)."""
        before = self._refreshes
        self.plan = plan
        if self._refreshes == before:
            self._trait_values["plan"] = plan
            self._on_plan({"new": plan})

    def _report_error(self, e: Exception) -> None:
        msg = f"{type(e).__name__}: {e}"
        self.errors.append(msg)
        self._set_message(f"error: {msg}")

    def _need_selection(self) -> str:
        if not self.selected:
            raise ValueError("select an action first: click a bar or type its name (e.g. 2F0)")
        return self.selected

    def _locate(self, action: str) -> tuple[int, int]:
        key = str(action).strip()
        found = locate(self.plan.schedule, key)
        if found is not None:
            return found
        raise ValueError(f"{key} is not in this schedule ({self.plan.ranks} ranks, "
                         f"{self.plan.microbatches} microbatches); action text is <stage><KIND><mb>, e.g. 2F0")

    def _redraw(self) -> None:
        if self.valid and self.result is not None:
            self.editor.show(self.result.timeline, self.result.costs, memory_limit=self.memory_limit)
        else:
            self.editor.show(packed_timeline(self.plan.schedule, self.costs),
                             highlight=self.error.actions if self.error else ())

    def _set_message(self, text: str, html_: bool = False, keep: bool = False) -> None:
        self.message = text
        body = text if html_ else html.escape(text)
        self.status.value = f"<div style='font:12px monospace'>{body}</div>"

    def _last_step(self) -> str:
        """How the shown plan was reached: start, reset, the edit step, or a loaded plan."""
        if not self._pos:
            return "start"
        how = self._how(self.plan)
        if how == "edit":
            return repr(self.plan.trace[-1])
        return f"load {self.plan.meta.get('name', 'plan file')}" if how == "load" else how

    def _error_html(self, e: ScheduleError) -> str:
        probs = "".join(f"<li>{html.escape(p.message)}</li>" for p in e.problems)
        grid = ""
        if e.schedule is not None and e.cells:
            from ..validate import render_grid
            grid = f"<pre style='font-size:11px'>{html.escape(render_grid(e.schedule, e.cells))}</pre>"
        return (f"<b style='color:#c00'>invalid after step {self._pos} "
                f"({html.escape(self._last_step())}): "
                f"not applied to the timeline; press undo (z) to take it back</b><ul>{probs}</ul>{grid}")

    def _make_baseline(self, baseline: Any):
        if isinstance(baseline, str):
            if baseline.lower() != "1f1b":
                raise ValueError(f"baseline {baseline!r}: use '1f1b', a SimResult, a makespan or None")
            return baseline_result(self._base, self.problem, self.costs)
        return baseline

    def _header(self, res: SimResult | None) -> str:
        from ..gantt import baseline_makespan, fmt_num
        if res is None:
            return (f"<b>{html.escape(self.title)}</b> · <span style='color:#c00'>INVALID schedule: "
                    f"not simulated</span> · {self.plan.ranks} ranks × {self.plan.microbatches} microbatches")
        m = res.metrics
        tu, mu = ("", "") if self.unit_costs else (" ms", " MiB")
        parts = [f"<b>{html.escape(self.title)}</b>", f"{self.plan.ranks} ranks × {self.plan.microbatches} mb",
                 f"makespan <b>{fmt_num(m.makespan)}{tu}</b>", f"bubble <b>{m.bubble:.1%}</b>"]
        if self.unit_costs:
            parts.insert(0, "<b style='color:#c00'>UNIT COSTS</b> (no problem: F=I=W=1 per rank)")
        peak = f"peak memory <b>{fmt_num(m.max_peak_memory)}{mu}</b>"
        if self.memory_limit is not None:
            over = not fits(m.max_peak_memory, self.memory_limit)
            peak += f" / cap {fmt_num(self.memory_limit)}{mu}" + (" <b style='color:#c00'>OVER</b>" if over else "")
        parts.append(peak)
        base = baseline_makespan(self._baseline)
        if base is not None:
            parts.append(f"speedup over {html.escape(base[0])} <b>{base[1] / m.makespan:.3f}×</b>"
                         f" ({fmt_num(base[1])} → {fmt_num(m.makespan)}{tu})")
        return "<div style='font:13px sans-serif'>" + " · ".join(parts) + "</div>"

    # -- autosave (file format, checks, claims and replay: widgets/autosave.py) -------------------
    def _autosave(self) -> None:
        store = self._autosave_store()
        if store is None:
            return
        records = [self._step_record(p) for p in self._history[1:]]   # redo entries too
        doc = autosave.document(self.name, self._base, records, self._pos, self.plan, self.valid)
        try:
            note = store.write(doc)
        except (OSError, ValueError) as e:
            self.errors.append(f"autosave to {store.path} failed: {e}")
            return
        self.autosave_path = store.path
        if note:
            self._set_message(note)

    def _autosave_store(self):
        if self.autosave_path is None:
            return None
        store = self.__dict__.get("_store")
        if store is None:
            store = self.__dict__["_store"] = autosave.Autosave(self.autosave_path)
        return store

    def _how(self, plan: Plan) -> str:
        """How the history reached ``plan`` (after the start): "reset" to the starting plan, an
        "edit" (the last step of its trace) or a "load"ed plan."""
        if plan is self._base:
            return "reset"
        return "edit" if plan.trace and isinstance(plan.trace[-1], edits.EDIT_STEPS) else "load"

    def _step_record(self, plan: Plan) -> dict:
        """The autosave record of a history entry (a loaded plan is saved whole)."""
        how = self._how(plan)
        if how == "edit":
            return _edits.step_to_dict(plan.trace[-1])
        return {"type": "reset"} if how == "reset" else {"type": "load", "plan": plan_to_dict(plan)}

    def _restore(self) -> str | None:
        """Replay the autosave of the same starting plan; a corrupt one is set aside, never raised."""
        store = self._autosave_store()
        if store is None:
            return None
        got = autosave.restore(store, self._base)
        self.autosave_path = store.path if store.enabled else None
        if got.history:
            self._history, self._pos = got.history, got.pos
            self._set_plan(got.history[got.pos])
        return got.note

    # -- display ----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        state = f"makespan={self.makespan:.4g}" if self.valid else "INVALID"
        return (f"Designer({self.title!r}, {self.plan.ranks}x{self.plan.microbatches}, step {self._pos}"
                f"/{len(self._history) - 1}, {state})")
