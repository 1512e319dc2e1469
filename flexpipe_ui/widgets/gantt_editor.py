"""``GanttEditor``: the draggable Gantt (an anywidget; front end in ``gantt_editor.js``, bundled).

At scale the front end draws only the time window in view (zoom and pan on the time axis), merges
bars too thin to see into "occupied" bands, labels a bar only when its label fits, and scrolls
the rank lanes and memory panels past ``gantt_lod.MAX_LANES`` ranks: the rules of
``flexpipe_ui.gantt_lod``, whose constants travel in ``data["lod"]``.

The Python side packs a timeline into plain arrays (the ``data`` trait) and receives what the
user did as traits the front end sets: ``drop`` (a bar let go at a time and rank), ``selected``
(a clicked bar), ``command`` (a key: earlier/later/swap/undo/redo). It never interprets them: the
``Designer`` observes these traits. ``rendered`` and ``frontend_latency_ms`` come back from the
browser after each redraw. Tests act as the front end by setting ``drop``/``selected``/``command``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import anywidget
import numpy as np
import traitlets

from ..gantt import units
from ..gantt_lod import lod_constants
from ..graph import action_names, flat_arrays, positions_within
from ..problem import StageCosts
from ..timeline import Timeline, memory_at

__all__ = ["GanttEditor", "pack_timeline", "data_to_wire"]

_CSS = """
.fp-editor { outline: none; width: 100%; font: 11px sans-serif; user-select: none; }
.fp-editor:focus-visible { box-shadow: 0 0 0 2px #4a90d9; }
.fp-bar { stroke: #fff; stroke-width: 0.5; cursor: grab; }
.fp-bar:hover { stroke: #000; stroke-width: 1; }
.fp-bar.fp-sel { stroke: #000; stroke-width: 2; }
.fp-bar.fp-bad { stroke: #ff0000; stroke-width: 3; }
.fp-bar.fp-dragging { opacity: 0.75; cursor: grabbing; stroke: #000; stroke-width: 1.5; }
.fp-label { fill: #fff; font-size: 10px; pointer-events: none; }
.fp-band { fill: #9aa3ad; opacity: 0.85; }
.fp-band:hover { fill: #6b7580; }
.fp-axis-strip { fill: #f6f6f6; cursor: ew-resize; }
.fp-axis-hint { fill: #888; font-size: 9px; }
.fp-lanes-box, .fp-mem-box { overflow-x: hidden; }
.fp-rank, .fp-axis text, .fp-memlab { fill: #444; font-size: 10px; }
.fp-memlab { font-size: 9px; }
.fp-cap { stroke: #d62728; stroke-dasharray: 4 3; stroke-width: 1; }
.fp-marker { stroke: #000; stroke-width: 2; stroke-dasharray: 3 2; }
"""


def pack_timeline(tl: Timeline, costs: StageCosts | None = None, *, positions: Sequence[int] | None = None,
                  memory_limit: float | None = None, version: int = 0, unit_costs: bool = False) -> dict:
    """The ``data`` trait for a timeline: per-bar arrays, memory curves per rank, scale, and the
    units the page writes on the axis, the hover and the peaks (none for unit costs)."""
    return _pack(tl, costs, positions=positions, memory_limit=memory_limit, version=version,
                 unit_costs=unit_costs)[0]


def _pack(tl: Timeline, costs: StageCosts | None, *, positions, memory_limit, version, unit_costs
          ) -> tuple[dict, dict]:
    """(``pack_timeline``'s dict, its numeric bar columns as arrays for the wire)."""
    n = len(tl.actions)
    if positions is None:                 # each action's place among its rank's, in list order
        positions = positions_within(tl.rank)
    arrays = {"rank": np.asarray(tl.rank), "start": np.round(tl.start, 9), "end": np.round(tl.end, 9),
              "index": np.asarray(positions, dtype=np.int64)}
    cols = _text_columns(tl)
    for key in ("stage", "side", "palette", "color_index"):
        if key in cols:
            arrays[key] = cols.pop(key)
    bars = {"name": cols["name"], "rank": arrays["rank"].astype(int).tolist(),
            "start": arrays["start"].tolist(), "end": arrays["end"].tolist(), "color": cols["color"],
            "label": cols["label"], "stage": arrays["stage"].tolist(), "index": arrays["index"].tolist(),
            # actions on another stream (a copy engine: offload/reload) overlap compute: thin, low
            "side": arrays["side"].tolist()}
    memory = []
    if costs is not None and n:
        at, curves = memory_at(tl, costs)
        arrays["mem"] = np.round(at, 6)
        bars["mem"] = arrays["mem"].tolist()
        for times, vals in curves:
            keep = np.r_[times[1:] != times[:-1], True] if len(times) > 1 else np.ones(len(times), bool)
            memory.append({"t": np.round(times[keep], 9).tolist(), "v": np.round(vals[keep], 6).tolist()})
    tu, mu = units(unit_costs)
    data = {"ranks": int(tl.ranks), "makespan": float(tl.makespan), "bars": bars, "memory": memory,
            "memory_limit": memory_limit, "version": int(version),
            "units": {"time": tu.strip(), "memory": mu.strip()}, "lod": lod_constants()}
    return data, arrays


def _text_columns(tl: Timeline) -> dict:
    """Name, colour, label (microbatch), stage and side (0: compute, 1: another stream) per bar.
    A simulated timeline is in its schedule's flat order: the columns come from the schedule's
    flat arrays and its names (made once, and carried through an edit's reorder), not from a
    pass over 100k action objects per redraw."""
    s = tl.schedule
    flat = flat_arrays(s) if s is not None else None
    if flat is not None and flat[0] is tl.actions and len(tl.actions):
        acts, klist, _, _, kid, stage, mb = flat
        colors = np.array([k.color for k in klist], dtype=object)
        side = np.array([0 if k.occupies_compute else 1 for k in klist], dtype=np.int64)
        labels = np.array([str(m) for m in range(int(mb.max()) + 1)], dtype=object)
        palette = list(dict.fromkeys(colors.tolist()))
        where = np.array([palette.index(c) for c in colors.tolist()], dtype=np.int64)
        return {"name": list(action_names(s)), "color": colors[kid].tolist(), "label": labels[mb].tolist(),
                "stage": np.asarray(stage, dtype=np.int64), "side": side[kid],
                "palette": palette, "color_index": where[kid]}
    acts = tl.actions
    return {"name": [str(a) for a in acts], "color": [a.kind.color for a in acts],
            "label": [str(a.microbatch) for a in acts],
            "stage": np.array([a.stage for a in acts], dtype=np.int64),
            "side": np.array([0 if a.kind.occupies_compute else 1 for a in acts], dtype=np.int64)}


_COLUMNS = {"rank": "<i4", "start": "<f8", "end": "<f8", "stage": "<i4", "index": "<i4", "side": "<u1",
            "mem": "<f8"}


def data_to_wire(data: dict, widget=None) -> dict:
    """The ``data`` trait as it travels to the page: numeric bar columns and memory curves as
    little-endian binary buffers (ipywidgets sends them as they are: no JSON for 100k numbers, and
    its buffer search does not walk 100k-element lists), names and labels as one newline-joined
    string each, colours as a palette and a per-bar index. The page decodes it once per version;
    the Python side keeps the plain lists (``pack_timeline``)."""
    bars = (data or {}).get("bars")
    if not bars or "name" not in bars:
        return data
    wire = {k: v for k, v in data.items() if k not in ("bars", "memory")}
    b: dict = {"packed": 1, "n": len(bars["name"]), "name": "\n".join(bars["name"]),
               "label": "\n".join(map(str, bars["label"]))}
    # the arrays ``show`` packed for this very version, if any (no second pass over the lists)
    made = getattr(widget, "_arrays", None)
    arrays = made[1] if made is not None and made[0] is bars else {}
    for key, dtype in _COLUMNS.items():
        if key in bars:
            b[key] = memoryview(np.asarray(arrays.get(key, bars[key]), dtype=dtype).tobytes())
    if "palette" in arrays:
        palette, index = arrays["palette"], arrays["color_index"]
    else:
        palette = list(dict.fromkeys(bars["color"]))
        where = {c: i for i, c in enumerate(palette)}
        index = [where[c] for c in bars["color"]]
    b["palette"] = palette
    b["color"] = memoryview(np.asarray(index, "<u2").tobytes())
    wire["bars"] = b
    wire["memory"] = [{"t": memoryview(np.asarray(c["t"], "<f8").tobytes()),
                       "v": memoryview(np.asarray(c["v"], "<f8").tobytes())} for c in data.get("memory", [])]
    return wire


class GanttEditor(anywidget.AnyWidget):
    """Draggable Gantt: ranks as rows, time on x, per-rank memory panels; see module docstring."""

    _esm = Path(__file__).with_name("gantt_editor.js")
    _css = _CSS

    data = traitlets.Dict().tag(sync=True, to_json=data_to_wire)
    """What to draw (``pack_timeline``); Python → browser (binary on the wire: ``data_to_wire``)."""
    highlight = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Action names outlined in red (a validator error's actions)."""
    selected = traitlets.Unicode("").tag(sync=True)
    """The selected action (clicked in the browser or set from Python)."""
    drop = traitlets.Dict().tag(sync=True)
    """Browser → Python: ``{name, rank, time, seq}`` when a dragged bar is let go."""
    command = traitlets.Dict().tag(sync=True)
    """Browser → Python: ``{cmd, seq}`` from the keyboard (earlier, later, swap, undo, redo)."""
    rendered = traitlets.Int(-1).tag(sync=True)
    """Browser → Python: the ``data`` version last drawn."""
    frontend_latency_ms = traitlets.Float(-1.0).tag(sync=True)
    """Browser → Python: drop → redraw time of the last drag, measured in the page."""
    width = traitlets.Int(0).tag(sync=True)
    """Fallback width in px when the page has not laid the widget out yet (0: 900)."""

    unit_costs = False
    """Python side only: the timelines shown come from unit costs (no problem), so no units."""

    def show(self, tl: Timeline, costs: StageCosts | None = None, *, positions=None,
             memory_limit: float | None = None, highlight: Sequence[str] = ()) -> None:
        """Draw a timeline (bumps the version, so the browser redraws even if nothing moved)."""
        version = int(self.data.get("version", 0)) + 1 if self.data else 1
        with self.hold_trait_notifications():
            self.highlight = list(map(str, highlight))
            data, arrays = _pack(tl, costs, positions=positions, memory_limit=memory_limit,
                                 version=version, unit_costs=self.unit_costs)
            self._arrays = (data["bars"], arrays)      # for the wire and ``bar_centers``
            self.data = data

    @traitlets.observe("rendered")
    def _on_rendered(self, change) -> None:
        # the page drew an EMPTY chart (rendered 0) although there is data: its view missed the data
        # update (seen in JupyterLab when the view is created while the kernel is busy): send it again
        if change["new"] == 0 and self.version > 0:
            self.send_state(["data", "highlight"])

    @property
    def version(self) -> int:
        return int(self.data.get("version", 0)) if self.data else 0

    def bar_centers(self, rank: int) -> list[tuple[str, float]]:
        """(name, center time) of the drawn bars of one rank, left to right."""
        b = self.data.get("bars", {}) if self.data else {}
        made = getattr(self, "_arrays", None)
        a = made[1] if made is not None and b and made[0] is b else \
            {k: np.asarray(b.get(k, []), dtype=float) for k in ("rank", "start", "end")}
        idx = np.flatnonzero(a["rank"] == rank)
        mid = (a["start"][idx] + a["end"][idx]) / 2
        o = np.argsort(mid, kind="stable")
        names = b.get("name", [])
        return [(names[i], float(c)) for i, c in zip(idx[o].tolist(), mid[o].tolist())]
