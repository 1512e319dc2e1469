"""The edit steps the Designer applies, and their JSON form for the autosave file.

Edits go through ``flexpipe_ui.edits`` (``Move``, ``Swap``, ``Plan.edit`` recording the replayable
trace that ``plan.to_python()`` prints). A step is saved as ``{"type": "Move", "rank": 0, ...}`` and
rebuilt from the same module, so an autosave replays into the same plan after a kernel restart.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..ir import Action, Plan, parse_action

__all__ = ["edits_module", "apply_step", "step_to_dict", "step_from_dict", "EditUnavailable"]


class EditUnavailable(ImportError):
    """``flexpipe_ui.edits`` is missing: the Designer cannot record edits."""


def edits_module():
    try:
        from .. import edits
    except ImportError as e:
        raise EditUnavailable(f"the Designer records edits through flexpipe_ui.edits, which failed "
                              f"to import: {e}") from e
    return edits


def apply_step(plan: Plan, step: Any) -> Plan:
    """``plan.edit(step)``: a new plan with the step applied and appended to its trace."""
    return plan.edit(step)


def step_to_dict(step: Any) -> dict:
    out: dict[str, Any] = {"type": type(step).__name__}
    for f in dataclasses.fields(step):
        v = getattr(step, f.name)
        out[f.name] = {"action": str(v)} if isinstance(v, Action) else v
    return out


def step_from_dict(d: dict) -> Any:
    mod = edits_module()
    d = dict(d)
    cls = getattr(mod, d.pop("type"), None)
    if cls is None or not dataclasses.is_dataclass(cls):
        raise ValueError(f"autosave names an unknown edit step {cls!r}")
    args = {k: parse_action(v["action"]) if isinstance(v, dict) and "action" in v else v
            for k, v in d.items()}
    return cls(**args)
