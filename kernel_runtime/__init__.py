"""kernel_runtime: executes ``flexpipe-plan/1`` plans on torch.distributed (NCCL on GPUs, gloo on CPU).

Importing this package starts nothing and does not import torch; the names below load on first use:
``launch`` (start workers from a notebook cell or the CLI, returns a ``RunHandle``), ``profile``
and ``calibrate`` (measure a model / a run into a ``flexpipe-problem/1``), ``demo_gpt`` and
``timed_model`` (models), ``reference_run`` (the single-process check), ``LaunchConfig`` (a
launch's settings) and ``DEFAULT_HANDLERS`` (the executor's kind handlers).
"""
from __future__ import annotations

import importlib

__all__ = ["launch", "RunHandle", "StepEvent", "WorkerError", "PlanRefused", "profile", "calibrate",
           "demo_gpt", "demo_gpt_problem", "timed_model", "ModelSpec", "reference_run",
           "LaunchConfig", "DEFAULT_HANDLERS", "derive_comm", "models"]

_WHERE = {
    "launch": "launcher", "RunHandle": "launcher", "StepEvent": "launcher", "WorkerError": "launcher",
    "PlanRefused": "launcher", "profile": "profiler", "calibrate": "profiler", "demo_gpt": "models",
    "demo_gpt_problem": "models", "timed_model": "models", "ModelSpec": "models",
    "reference_run": "data", "DEFAULT_HANDLERS": "executor", "LaunchConfig": "config", "derive_comm": "flexpipe_ui.passes",
}


def __getattr__(name: str):
    if name in _WHERE:
        where = _WHERE[name]
        return getattr(importlib.import_module(where if "." in where else f".{where}", __name__), name)
    if name in ("models",):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'kernel_runtime' has no attribute {name!r}")
