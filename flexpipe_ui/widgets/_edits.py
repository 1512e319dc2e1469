"""The JSON form of the Designer's edit steps, for the autosave file.

Edits are ``flexpipe_ui.edits`` steps recorded in the plan's trace by ``plan.edit`` (the trace
``plan.to_python()`` prints). A step is saved as ``{"type": "Move", "rank": 0, ...}`` and rebuilt
from the same module, so an autosave replays into the same plan after a kernel restart.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import edits
from ..ir import Action, parse_action

__all__ = ["step_to_dict", "step_from_dict"]


def step_to_dict(step: Any) -> dict:
    out: dict[str, Any] = {"type": type(step).__name__}
    for f in dataclasses.fields(step):
        v = getattr(step, f.name)
        out[f.name] = {"action": str(v)} if isinstance(v, Action) else v
    return out


def step_from_dict(d: dict) -> Any:
    d = dict(d)
    cls = getattr(edits, d.pop("type"), None)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise ValueError(f"autosave names an unknown edit step {cls!r}")
    args = {k: parse_action(v["action"]) if isinstance(v, dict) and "action" in v else v
            for k, v in d.items()}
    return cls(**args)
