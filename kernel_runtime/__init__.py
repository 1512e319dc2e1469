"""kernel_runtime: executes ``flexpipe-plan/1`` plans on torch.distributed (NCCL on GPUs, gloo on CPU).

Importing this package starts nothing and does not import torch; the names below load on first use:
``launch`` (start workers from a notebook cell or the CLI, returns a ``RunHandle``) with
``LaunchConfig``, ``profile`` (measure a model into a ``flexpipe-problem/1``) with
``ProfileConfig``, ``calibrate``/``calibrate_runs`` (fit a problem to measured runs; torch-free, from
``flexpipe_ui.calibrate``), ``tune`` (profile → auto → measure → calibrate → re-plan until the plan
stops changing) with ``TuneConfig``, ``demo_gpt`` and ``timed_model`` (models), ``split_module``
(any module cut into layers by module names), ``from_transformers`` (Hugging Face causal LMs),
``reference_run`` (the single-process check) and ``DEFAULT_HANDLERS`` (the executor's kind handlers).

The package, by what each part does: ``models/`` (what a model is to the runtime), ``run/``
(launching and running plans, the worker process and its one start-up), ``measure/`` (profile and
tune), ``cli/`` and ``gpu_check`` (the commands). Old flat module paths (``kernel_runtime.launcher``,
...) still import, with a DeprecationWarning, for one release (``_moved``, docs/CHANGELOG.md).
"""
from __future__ import annotations

import importlib

from . import _moved

_moved.install()          # old flat module paths answer for one release (docs/CHANGELOG.md)

__all__ = ["launch", "RunHandle", "StepEvent", "WorkerError", "PlanRefused", "profile", "calibrate",
           "demo_gpt", "demo_gpt_problem", "timed_model", "ModelSpec", "reference_run",
           "LaunchConfig", "DEFAULT_HANDLERS", "derive_comm", "models", "tune", "TuneResult",
           "calibrate_runs", "split_module", "SplitError", "from_transformers", "ProfileConfig",
           "TuneConfig"]

_WHERE = {
    "launch": "run.launcher", "RunHandle": "run.launcher", "StepEvent": "run.launcher",
    "WorkerError": "run.launcher", "PlanRefused": "run.launcher", "LaunchConfig": "run.config",
    "DEFAULT_HANDLERS": "run.executor", "derive_comm": "flexpipe_ui.passes",
    "profile": "measure.profiler", "tune": "measure.tuning", "TuneResult": "measure.tuning",
    "ProfileConfig": "measure.config", "TuneConfig": "measure.config",
    "calibrate": "flexpipe_ui.calibrate", "calibrate_runs": "flexpipe_ui.calibrate",
    "demo_gpt": "models", "demo_gpt_problem": "models", "timed_model": "models", "ModelSpec": "models",
    "reference_run": "models.data", "split_module": "models.split", "SplitError": "models.split",
    "from_transformers": "models.hf",
}


def __getattr__(name: str):
    if name in _WHERE:
        where = _WHERE[name]
        mod = where if where.startswith("flexpipe_ui") else f"{__name__}.{where}"
        return getattr(importlib.import_module(mod), name)
    if name in ("models",):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'kernel_runtime' has no attribute {name!r}")
