"""Old import paths of the modules that moved into ``models/``, ``run/`` and ``measure/`` (0.2).

``import kernel_runtime.launcher`` (and ``from kernel_runtime.profiler import profile``, ...)
still work for one release: a small import hook answers the old name with the module at its new
place -- the same module object, so its private names and monkeypatching behave as before -- and
warns (``DeprecationWarning``) naming the new path. No file sits at an old path, so a package
attribute never shadows a public function (``kernel_runtime.calibrate`` is only the function:
its module moved to ``flexpipe_ui.calibrate``). The list is docs/CHANGELOG.md's.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MOVED", "REMOVED", "install"]

MOVED = {
    "affinity": "kernel_runtime.run.affinity",
    "allocator": "kernel_runtime.run.allocator",
    "config": "kernel_runtime.run.config",
    "dp": "kernel_runtime.run.dp",
    "executor": "kernel_runtime.run.executor",
    "launcher": "kernel_runtime.run.launcher",
    "memory": "kernel_runtime.run.memory",
    "peer": "kernel_runtime.run.peer",
    "split_backward": "kernel_runtime.run.split_backward",
    "transport": "kernel_runtime.run.transport",
    "data": "kernel_runtime.models.data",
    "hf": "kernel_runtime.models.hf",
    "mlp": "kernel_runtime.models.mlp",
    "model_arg": "kernel_runtime.models.model_arg",
    "split": "kernel_runtime.models.split",
    "profile_comm": "kernel_runtime.measure.profile_comm",
    "profile_time": "kernel_runtime.measure.profile_time",
    "profiler": "kernel_runtime.measure.profiler",
    "tuning": "kernel_runtime.measure.tuning",
    "procmem": "kernel_runtime.run.procmem",
    "profile_memory": "kernel_runtime.measure.profile_memory",
}
"""Old submodule name (under ``kernel_runtime.``) → the module's full new name."""

REMOVED = {
    "calibrate": "kernel_runtime.calibrate is the function calibrate(timelines, plan, problem); the "
                 "module moved to flexpipe_ui.calibrate (from flexpipe_ui.calibrate import calibrate_runs)",
    "costfields": "kernel_runtime.costfields was removed: a problem's cost fields are its Problem and Layer "
                  "attributes (flexpipe_ui.problem.PROBLEM_TERMS, LAYER_TERMS); the overhead per kind is "
                  "flexpipe_ui.calibrate.kind_overhead(problem)",
}
"""Old submodule names that cannot be kept (they would shadow a public function), with the why."""


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``kernel_runtime.<old>`` and loads it as the moved module (``exec_module`` puts the
    real module in ``sys.modules``; the import system returns what is there)."""

    def find_spec(self, fullname, path, target=None):
        pkg, _, name = fullname.partition(".")
        if pkg != "kernel_runtime" or "." in name:
            return None
        if name in REMOVED:
            raise ModuleNotFoundError(f"No module named {fullname!r}: {REMOVED[name]}", name=fullname)
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        old = module.__name__
        new = MOVED[old.partition(".")[2]]
        warnings.warn(f"{old} moved to {new} (the old path works until 0.3; docs/CHANGELOG.md)",
                      DeprecationWarning, stacklevel=2)
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    """Put the old-path finder on ``sys.meta_path`` once (it only answers ``kernel_runtime.<old>``)."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.append(_OldPaths())
