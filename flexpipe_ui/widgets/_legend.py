"""The Designer's legend (HTML): a swatch per kind in the schedule, idle, the memory cap, the units."""
from __future__ import annotations

import html

from ..ir import Schedule

__all__ = ["legend_html"]


def legend_html(schedule: Schedule, unit_costs: bool) -> str:
    """The editor's legend: a swatch per kind in the schedule, idle, the cap, and the units."""
    kinds = list(dict.fromkeys(a.kind for row in schedule.order for a in row))
    sw = lambda color, label: (f"<span style='display:inline-block;width:11px;height:11px;background:{color};"
                               f"margin:0 4px 0 10px;vertical-align:-1px'></span>{html.escape(label)}")
    items = [sw(k.color, f"{k.name} {k.description or k.role}") for k in kinds]
    items.append(sw("rgba(160,160,160,0.35)", "idle"))
    items.append("<span style='margin-left:10px;color:#d62728'>- - -</span> memory cap")
    unit = "unit costs (no problem)" if unit_costs else "time in ms, memory in MiB"
    return (f"<div class='fp-legend' style='font:12px sans-serif;color:#333'>{''.join(items)}"
            f"<span style='margin-left:14px;color:#666'>· {unit} · bar label: microbatch; hover a bar for "
            "stage, start, end, duration, memory</span></div>")
