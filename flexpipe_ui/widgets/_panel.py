"""Plumbing shared by the widgets: callback errors surface in the panel, display shows the widget."""
from __future__ import annotations

import html
import traceback

__all__ = ["PanelBase", "show_figure"]


def show_figure(output, fig) -> None:
    """Show plotly ``fig`` in ipywidgets ``output`` as a plotly mime bundle, replacing what was there.

    Why not a ``FigureWidget``: in JupyterLab a FigureWidget created or updated while the kernel is
    busy (a search or training thread, a following cell) was seen as an empty frame; a mime bundle
    set directly on an Output is plain output the page draws as soon as it arrives, it costs one
    JSON encoding (no per-trace validation and sync), and it works from any thread or cell."""
    import json

    import plotly.io as pio
    spec = json.loads(pio.to_json(fig, validate=False))
    spec["config"] = {"displaylogo": False, "responsive": True}
    title = fig.layout.title.text if fig.layout.title is not None else None
    output.outputs = ({"output_type": "display_data", "metadata": {},
                       "data": {"application/vnd.plotly.v1+json": spec, "text/plain": title or "plotly figure"}},)


class PanelBase:
    """Mixin for the widget classes (they hold ``self.widget`` and an ``Output`` ``self.out``)."""

    def _report_error(self, e: Exception) -> None:
        """Show an error in the panel's status line (the Designer overrides it)."""
        self.status = (f"<span style='color:#c00'>{html.escape(type(e).__name__)}: "
                       f"{html.escape(str(e))}</span>")

    def _guard(self, fn):
        """Run a callback; an error goes to the panel and its Output instead of vanishing."""
        def run(*a, **k):
            try:
                return fn(*a, **k)
            except Exception as e:  # noqa: BLE001 - a widget callback must not die silently
                self._report_error(e)
                self.out.append_stderr(traceback.format_exc() if not isinstance(e, ValueError)
                                       else f"{type(e).__name__}: {e}\n")
        return run

    def _repr_mimebundle_(self, include=None, exclude=None, **kw):
        data = self.widget._repr_mimebundle_(include=include, exclude=exclude, **kw)
        if isinstance(data, tuple):
            data = data[0]
        data = dict(data or {})
        data["text/plain"] = repr(self)  # logs and plain front ends see a summary
        return data
