"""Notebook widgets: ``Designer`` (drag-and-edit), ``Compare``, ``AutoPanel``, ``LaunchPanel``.

The plot choice. The editable Gantt is an anywidget front end (``gantt_editor.js``, plain SVG,
bundled, no CDN), not a plotly ``FigureWidget``, for three reasons measured or seen here:
(1) plotly cannot drag bars (plotly.js #7410), so a draggable plotly Gantt draws every action as a
``layout.shapes`` rectangle, and assigning 768 shapes (8 ranks × 32 microbatches × F/I/W) costs
~115 ms of plotly.py validation per redraw on this machine, growing linearly (~1.8 s at 16 × 128),
before the browser redraws them; our editor sends plain arrays (a few ms). (2) plotly reports a
dragged shape only at the drop (plotly.js #7316); our front end shows where the bar will land while
it moves and snaps to the rank's row. (3) The drop arrives as one trait (``drop``: action, rank,
time) instead of a diff of shape coordinates that the kernel must search and write back without
looping. Everything that is a *chart* rather than an editor stays plotly: ``flexpipe_ui.gantt`` (the
static Gantt with hover, per-rank memory panels and exports), the comparison, the auto-search's
best-so-far view and the launch panel's loss curve and predicted/measured Gantts (``FigureWidget``).

State follows DESIGN.md style 10: each widget is a small class whose traitlets are the single source
of truth, callbacks are ``observe(names=...)`` and callback errors land in an ``Output``. Long work
(search, training) runs in a background thread that streams progress, so Stop stays clickable.
Imports are lazy: ``import flexpipe_ui.widgets`` loads no plotly/ipywidgets until a class is used.
"""
from __future__ import annotations

import importlib

__all__ = ["Designer", "Compare", "AutoPanel", "LaunchPanel", "GanttEditor"]

_WHERE = {"Designer": ".designer", "Compare": ".compare", "AutoPanel": ".auto_panel",
          "LaunchPanel": ".launch_panel", "GanttEditor": ".gantt_editor"}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
