"""``LaunchPanel``: train a plan from a cell, watch loss and step time, see measured vs predicted.

``model`` is a name ("demo-gpt") or a model object: a ``ModelSpec`` (``split_module``,
``from_transformers``), a Hugging Face causal LM, or a picklable factory.
Start calls ``kernel_runtime.launch(plan, model=..., steps=..., devices=...)`` (CPU/gloo by
default, GPUs when torch sees them) and a background thread polls the run's events, so the
notebook stays responsive and Stop works while it trains. Each step event updates the loss curve
and the step-time curve; an event carrying a measured ``Timeline`` redraws the measured Gantt
beside the predicted one (the simulator's, for the same plan), both on the same time range.
Worker errors (``handle.error`` or an ``error`` event) are shown in the panel.
"""
from __future__ import annotations

import html
import threading
import time
import traceback
from typing import Any

import traitlets

from ._panel import PanelBase, show_figure

from ..ir import Plan
from ..problem import Problem

__all__ = ["LaunchPanel", "available_devices"]


def available_devices() -> list[str]:
    """"cpu", plus "cuda" when torch sees GPUs (imported lazily)."""
    out = ["cpu"]
    try:
        import torch
        if torch.cuda.is_available():
            out.append("cuda")
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return out


def _model_label(model: Any) -> str:
    """What the model box shows for a model object."""
    name = getattr(model, "name", None)                      # a ModelSpec
    if isinstance(name, str) and hasattr(model, "num_layers"):
        return f"{name} ({model.num_layers} layers)"
    cfg = getattr(model, "config", None)                     # a Hugging Face model
    if cfg is not None and getattr(cfg, "model_type", None):
        return f"hf:{cfg.model_type}"
    return getattr(model, "__name__", type(model).__name__)


def _get(ev: Any, key: str, default=None):
    if isinstance(ev, dict):
        return ev.get(key, default)
    return getattr(ev, key, default)


class LaunchPanel(PanelBase, traitlets.HasTraits):
    """Start/stop training of ``plan``; ``panel.start(wait=True)`` runs it from code."""

    running = traitlets.Bool(False)
    step = traitlets.Int(0)
    loss = traitlets.Float(float("nan"))
    step_time = traitlets.Float(float("nan"))
    status = traitlets.Unicode("")

    def __init__(self, plan: Plan, problem: Problem | None = None, *, model: Any = "demo-gpt",
                 steps: int = 10, devices: str | None = None, poll_s: float = 0.25, **launch_kwargs):
        super().__init__()
        import ipywidgets as w
        import plotly.graph_objects as go

        from ..gantt import gantt_figure
        from ..sim import simulate

        self.plan = plan if isinstance(plan, Plan) else Plan(plan)
        self.problem = problem
        self.launch_kwargs = launch_kwargs
        self.poll_s = poll_s
        self.handle = None
        self.error: Any = None
        self.events: list[Any] = []
        self.measured = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.predicted = simulate(self.plan, problem)

        devs = available_devices()
        # model: a name typed in the box ("demo-gpt"), or an object shown by its label: a
        # kernel_runtime ModelSpec (split_module, from_transformers), a Hugging Face model, a factory
        self.model = None if isinstance(model, str) else model
        self.w_model = w.Text(value=model if isinstance(model, str) else _model_label(model),
                              description="model", disabled=not isinstance(model, str),
                              layout=w.Layout(width="220px"))
        self.w_steps = w.BoundedIntText(value=steps, min=1, max=1_000_000, description="steps",
                                        layout=w.Layout(width="160px"))
        self.w_devices = w.Dropdown(options=devs, value=devices or ("cuda" if "cuda" in devs else "cpu"),
                                    description="devices", layout=w.Layout(width="180px"))
        self.btn_start = w.Button(description="Start", icon="play", button_style="success")
        self.btn_stop = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.btn_refit = w.Button(description="Re-fit from this run", icon="sliders", disabled=True,
                                  tooltip="calibrate the cost model on this run's measured timelines")
        self.fitted: Problem | None = None
        self.w_status = w.HTML()
        self.loss_fig = go.Figure(
            data=[go.Scatter(x=[], y=[], mode="lines+markers", name="loss"),
                  go.Scatter(x=[], y=[], mode="lines+markers", name="step time", yaxis="y2")],
            layout=dict(height=280, title=dict(text="loss and step time", x=0.01, xanchor="left"),
                        xaxis=dict(title="step", tickformat="d", dtick=1, rangemode="tozero"),
                        yaxis=dict(title="loss"), yaxis2=dict(title="step time (s)", overlaying="y", side="right"),
                        margin=dict(l=60, r=60, t=70, b=40),
                        # the legend on its own band under the title, never over it
                        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1.0)))
        # predicted above measured, each as wide as the cell (side by side at a fixed width they were
        # wider than the cell and their titles clipped); the same time range, set when measured
        pred = gantt_figure(self.predicted, title="predicted (simulated)", memory=False,
                            unit_costs=problem is None)
        self.pred_fig = pred
        self.meas_fig = go.Figure(layout=dict(height=pred.layout.height,
                                                    title="measured: waiting for the first step",
                                                    margin=pred.layout.margin))
        # the charts are plain plotly figures shown through Outputs (see _panel.show_figure)
        self.loss_chart, self.pred_chart, self.meas_chart = w.Output(), w.Output(), w.Output()
        self.out = w.Output()
        self.btn_start.on_click(self._guard(lambda _b: self.start()))
        self.btn_stop.on_click(self._guard(lambda _b: self.stop()))
        self.btn_refit.on_click(self._guard(lambda _b: self.refit()))
        self.observe(self._on_state, names=["running", "step", "loss", "step_time", "status"])
        self.widget = w.VBox([
            w.HBox([self.w_model, self.w_steps, self.w_devices, self.btn_start, self.btn_stop, self.btn_refit]),
            self.w_status, self.loss_chart, self.pred_chart, self.meas_chart, self.out])
        for out, fig in ((self.loss_chart, self.loss_fig), (self.pred_chart, self.pred_fig),
                         (self.meas_chart, self.meas_fig)):
            show_figure(out, fig)
        self._on_state(None)

    def start(self, *, wait: bool = False, timeout: float | None = None) -> None:
        """Launch training and follow it in a thread (``wait`` joins it)."""
        if self.running:
            raise ValueError("already running: press Stop first")
        from kernel_runtime import launch
        self._stop.clear()
        self.error, self.events, self.measured = None, [], None
        with self.loss_fig.batch_update():
            for tr in self.loss_fig.data:
                tr.x, tr.y = [], []
        show_figure(self.loss_chart, self.loss_fig)
        self.status = f"launching {self.w_model.value} for {self.w_steps.value} steps on {self.w_devices.value}…"
        self.handle = launch(self.plan, model=self.model if self.model is not None else self.w_model.value,
                             steps=int(self.w_steps.value),
                             devices=self.w_devices.value, **self.launch_kwargs)
        self.running = True
        self._thread = threading.Thread(target=self._follow, daemon=True, name="flexpipe-launch")
        self._thread.start()
        if wait:
            self.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self.handle is not None:
            self.handle.stop()
        self.status = "stopping…"

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    # -- following the run ----------------------------------------------------------------------
    def _done(self) -> bool:
        h = self.handle
        for name in ("done", "finished"):
            v = getattr(h, name, None)
            if v is not None:
                return bool(v() if callable(v) else v)
        alive = getattr(h, "is_alive", None) or getattr(h, "running", None)
        if alive is not None:
            return not bool(alive() if callable(alive) else alive)
        return False

    def _follow(self) -> None:
        try:
            while True:
                evs = self.handle.poll(self.poll_s)
                for ev in ([] if evs is None else evs if isinstance(evs, (list, tuple)) else [evs]):
                    self._on_event(ev)
                if self._done():
                    rest = self.handle.poll(0)
                    for ev in ([] if rest is None else rest if isinstance(rest, (list, tuple)) else [rest]):
                        self._on_event(ev)
                    break
            err = getattr(self.handle, "error", None)
            if err:
                self.error = err
                self.status = f"<span style='color:#c00'>worker error: {html.escape(str(err))}</span>"
            elif self._stop.is_set():
                self.status = f"stopped at step {self.step}"
            else:
                n = sum(1 for e in self.events if _get(e, "step") is not None)
                self.status = (f"finished {n} steps · last loss {self.loss:.4g} · "
                               f"step time {self.step_time:.4g} s")
        except Exception as e:  # noqa: BLE001 - shown in the panel
            self.error = e
            self.status = f"<span style='color:#c00'>{html.escape(type(e).__name__)}: {html.escape(str(e))}</span>"
            self.out.append_stderr(traceback.format_exc())
        finally:
            self.running = False

    def _on_event(self, ev: Any) -> None:
        self.events.append(ev)
        err = _get(ev, "error")
        if err:
            self.error = err
            self.status = f"<span style='color:#c00'>worker error: {html.escape(str(err))}</span>"
            return
        step = _get(ev, "step")
        if step is None:
            return
        loss, st = _get(ev, "loss"), _get(ev, "step_time")
        with self.loss_fig.batch_update():
            if loss is not None:
                tr = self.loss_fig.data[0]
                tr.x, tr.y = tuple(tr.x or ()) + (step,), tuple(tr.y or ()) + (float(loss),)
            if st is not None:
                tr = self.loss_fig.data[1]
                tr.x, tr.y = tuple(tr.x or ()) + (step,), tuple(tr.y or ()) + (float(st),)
        show_figure(self.loss_chart, self.loss_fig)
        self.step = int(step)
        if loss is not None:
            self.loss = float(loss)
        if st is not None:
            self.step_time = float(st)
        tl = _get(ev, "timeline")
        if tl is not None:
            self._draw_measured(tl, step)
        self.status = f"step {self.step}: loss {self.loss:.4g}, step time {self.step_time:.4g} s"

    def _draw_measured(self, tl, step) -> None:
        from ..gantt import gantt_figure
        from ..timeline import compute_metrics
        tl = tl.shifted() if len(tl.start) else tl
        self.measured = tl
        m = compute_metrics(tl)
        pred = self.predicted.metrics.makespan
        # a speedup against the prediction only means something in the same unit (a profiled
        # problem, in ms); the uniform reference costs have no unit
        base = ("predicted", pred) if self.problem is not None else None
        title = f"measured, step {step}"
        if tl.peak_memory_measured and self.problem is not None:
            title += " · predicted peak " + " / ".join(f"{p:,.4g}" for p in self.predicted.metrics.peak_memory) + " MiB"
        fig = gantt_figure(tl, metrics=m, memory=False, baseline=base, title=title)
        span = max(pred, m.makespan)
        fig.update_xaxes(range=[0, span])
        self.meas_fig = fig
        self.pred_fig.update_xaxes(range=[0, span])
        show_figure(self.meas_chart, self.meas_fig)
        show_figure(self.pred_chart, self.pred_fig)

    def refit(self) -> Problem:
        """Calibrate the cost model on this run's measured timelines (``flexpipe_ui.calibrate``,
        the first step left out as warm-up) and redraw the prediction with the fitted problem."""
        from ..calibrate import calibrate

        from ..gantt import gantt_figure
        from ..sim import simulate
        tls = [t for t in (_get(e, "timeline") for e in self.events) if t is not None]
        if not tls:
            raise ValueError("no measured step yet: run the plan first")
        before = self.predicted.makespan
        self.fitted = calibrate(tls[1:] or tls, self.plan, self.problem)
        self.predicted = simulate(self.plan, self.fitted)
        self.pred_fig = gantt_figure(self.predicted, title="predicted (re-fitted from the run)", memory=False)
        show_figure(self.pred_chart, self.pred_fig)
        self.status = (f"re-fitted from {len(tls)} step(s): predicted makespan {before:.4g} → "
                       f"{self.predicted.makespan:.4g} (panel.fitted holds the problem)")
        return self.fitted

    # -- plumbing -------------------------------------------------------------------------------
    def _on_state(self, change) -> None:
        self.btn_start.disabled = self.running
        self.btn_stop.disabled = not self.running
        self.btn_refit.disabled = self.running or self.measured is None
        self.w_status.value = f"<div style='font:12px monospace'>{self.status}</div>"

    def __repr__(self) -> str:
        return (f"LaunchPanel({'running' if self.running else 'idle'}, step {self.step}, "
                f"loss {self.loss:.4g}, predicted makespan {self.predicted.makespan:.4g})")
