"""Exports: standalone HTML, PNG/SVG/PDF images, plan JSON, torch CSV, Chrome/Perfetto trace JSON.

HTML inlines plotly.js, so a file opens offline (~4.8 MB). Images go through kaleido ≥ 1, which drives
a local Chromium (Debian's ``/usr/bin/chromium`` or ``$BROWSER_PATH``); it works offline, but its
browser download (``plotly_get_chrome``) does not, so without a Chromium ``save_image`` raises
``ExportError`` saying so and pointing at HTML. The trace JSON is the Trace Event Format that
``chrome://tracing`` and https://ui.perfetto.dev open: one thread per rank, one complete ("X")
event per action, a memory counter per rank when costs are given.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .ir import Plan, Schedule
from .problem import StageCosts
from .timeline import Timeline, memory_at

__all__ = ["ExportError", "save_html", "save_image", "image_backend", "chrome_trace",
           "save_chrome_trace", "save_plan_json", "save_torch_csv"]


class ExportError(ValueError):
    """An export that cannot be done here (no Chromium for images, unknown format...)."""


def _path(path) -> Path:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    return p


def save_html(fig, path, *, include_plotlyjs: bool | str = True) -> str:
    """Standalone HTML (plotly.js inlined unless ``include_plotlyjs`` says otherwise)."""
    p = _path(path)
    fig.write_html(str(p), include_plotlyjs=include_plotlyjs, full_html=True,
                   config={"displaylogo": False, "toImageButtonOptions": {"format": "svg"}})
    return str(p)


def image_backend() -> str | None:
    """Path of the Chromium kaleido will use, or None when there is none (images cannot work)."""
    for cand in (os.environ.get("BROWSER_PATH"), shutil.which("chromium"),
                 shutil.which("chromium-browser"), shutil.which("google-chrome"), "/usr/bin/chromium"):
        if cand and Path(cand).exists():
            return cand
    return None


def save_image(fig, path, *, format: str | None = None, width: int | None = None,
               height: int | None = None, scale: float = 1.0) -> str:
    """PNG/SVG/PDF/JPEG via kaleido; the format comes from the suffix unless given."""
    p = _path(path)
    fmt = (format or p.suffix.lstrip(".")).lower()
    if fmt not in ("png", "svg", "pdf", "jpeg", "jpg", "webp"):
        raise ExportError(f"cannot write image format {fmt!r} ({p}); use .png, .svg, .pdf or .jpeg, "
                          "or save_html for an interactive file")
    browser = image_backend()
    if browser is None:
        raise ExportError("image export needs a Chromium for kaleido and none was found (install "
                          "Debian's chromium or set BROWSER_PATH); kaleido cannot download one "
                          "offline. Use save_html instead (opens offline, has an SVG download button).")
    os.environ.setdefault("BROWSER_PATH", browser)
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise ExportError("image export needs the 'kaleido' package (pip install 'kaleido>=1'); "
                          "or use save_html") from None
    fig.write_image(str(p), format="jpeg" if fmt == "jpg" else fmt, width=width, height=height,
                    scale=scale)
    return str(p)


def chrome_trace(timeline: Any, costs: StageCosts | None = None, *, scale: float = 1000.0,
                 name: str = "flexpipe") -> dict:
    """Trace Event Format dict of a timeline (a ``Timeline`` or ``SimResult``).

    ``scale`` converts the timeline's time unit to the format's microseconds (1000 for ms, the
    profiler's unit; uniform reference costs are unit-less, shown as ms). With ``costs`` a memory
    counter track per rank is added.
    """
    if hasattr(timeline, "timeline") and hasattr(timeline, "costs"):
        costs = timeline.costs if costs is None else costs
        timeline = timeline.timeline
    if not isinstance(timeline, Timeline):
        raise ExportError(f"chrome_trace needs a Timeline or SimResult, got {type(timeline).__name__}")
    tl = timeline
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                           "args": {"name": f"{name} ({tl.source})"}}]
    for r in range(tl.ranks):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": r, "args": {"sort_index": r}})
    for a, r, s, e in zip(tl.actions, tl.rank.tolist(), tl.start.tolist(), tl.end.tolist()):
        events.append({"name": str(a), "cat": a.kind.name, "ph": "X", "pid": 0, "tid": int(r),
                       "ts": s * scale, "dur": max(0.0, (e - s) * scale),
                       "args": {"stage": a.stage, "microbatch": a.microbatch, "kind": a.kind.name}})
    if costs is not None and len(tl.actions):
        _, curves = memory_at(tl, costs)
        for r, (times, vals) in enumerate(curves):
            for t, v in zip(times.tolist(), vals.tolist()):
                events.append({"name": f"memory rank {r}", "ph": "C", "pid": 0, "tid": r,
                               "ts": t * scale, "args": {"memory": v}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": tl.source, "ranks": tl.ranks, "makespan": tl.makespan}}


def save_chrome_trace(timeline: Any, path, costs: StageCosts | None = None, **kw) -> str:
    """Write ``chrome_trace`` as JSON (open in chrome://tracing or ui.perfetto.dev)."""
    p = _path(path)
    p.write_text(json.dumps(chrome_trace(timeline, costs, **kw), default=_np_default))
    return str(p)


def _np_default(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def save_plan_json(plan: Plan | Schedule, path) -> str:
    """``flexpipe-plan/1`` JSON (atomic write)."""
    from .planfile import save_plan
    p = _path(path)
    save_plan(plan, p)
    return str(p)


def save_torch_csv(plan: Plan | Schedule, path) -> str:
    """The CSV torch's ``_PipelineScheduleRuntime._load_csv`` reads."""
    from .torch_interop import export_torch_csv
    p = _path(path)
    export_torch_csv(plan.schedule if isinstance(plan, Plan) else plan, p)
    return str(p)
