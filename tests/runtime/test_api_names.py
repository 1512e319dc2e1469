"""The public API keeps its names whatever has been imported: no submodule shadows a function.

``kernel_runtime.calibrate`` was both the documented function and a submodule; once the submodule
was imported (the profiler did), ``kr.calibrate(timelines, plan)`` was the module and failed as
"module not callable". Each check runs in a fresh interpreter that first imports every module of
the package (and every old flat path), then uses the documented API.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow            # a fresh interpreter that imports torch


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)


def test_the_documented_calibrate_works_after_every_submodule_is_imported():
    r = _run('''
        import importlib, pkgutil, types, warnings
        from dataclasses import replace
        import kernel_runtime
        from kernel_runtime._moved import MOVED
        names = [m.name for m in pkgutil.walk_packages(kernel_runtime.__path__, "kernel_runtime.")]
        assert "kernel_runtime.run.launcher" in names and "kernel_runtime.measure.profiler" in names
        for name in names:
            importlib.import_module(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for old in MOVED:
                importlib.import_module("kernel_runtime." + old)

        import kernel_runtime as kr
        from flexpipe_ui.library import build_named
        from flexpipe_ui.problem import Layer, Problem
        from flexpipe_ui.sim import simulate
        problem = Problem(ranks=2, microbatches=4, layers=tuple(Layer(f=1.0, b=1.0, w=1.0) for _ in range(4)))
        plan = build_named("1f1b", problem)
        timelines = [replace(simulate(plan, problem).timeline, source="measured")]
        fitted = kr.calibrate(timelines, plan, problem)            # docs/runtime.md
        assert isinstance(fitted, Problem) and fitted.num_layers == 4
        assert isinstance(kr.calibrate_runs([(plan, timelines)], problem), Problem)
        # no public name of a package is a module (except the models package itself)
        for pkg in (kr, kr.models, importlib.import_module("kernel_runtime.cli")):
            for name in pkg.__all__:
                value = getattr(pkg, name)
                assert name == "models" or not isinstance(value, types.ModuleType), (pkg.__name__, name)
        print("ok")
    ''')
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_old_flat_paths_are_the_moved_modules_and_warn():
    r = _run('''
        import importlib, warnings
        from kernel_runtime._moved import MOVED, REMOVED
        for old, new in MOVED.items():
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                mod = importlib.import_module("kernel_runtime." + old)
            assert mod is importlib.import_module(new), old
            assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in got), old
        from kernel_runtime.launcher import launch                 # from-imports too
        from kernel_runtime.run.launcher import launch as new_launch
        assert launch is new_launch
        for old, why in REMOVED.items():
            try:
                importlib.import_module("kernel_runtime." + old)
            except ImportError as e:
                assert why in str(e), e
            else:
                raise AssertionError(f"kernel_runtime.{old} imported")
        import kernel_runtime
        assert callable(kernel_runtime.calibrate)                  # still the function
        print("ok")
    ''')
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
