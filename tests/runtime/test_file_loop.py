"""The measure → re-fit loop from the shell, through files only:

    flexpipe profile → flexpipe auto → flexpipe train --save-timeline → flexpipe calibrate → flexpipe auto

on a tiny demo GPT over 2 gloo processes, a few steps. Each command is a fresh process reading the
previous one's file, as a user runs them.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process

ROOT = Path(__file__).resolve().parents[2]
MODEL = ["--model", "demo-gpt", "--layers", "4", "--dim", "16", "--seq", "8", "--batch-size", "8"]


def _flexpipe(*args: str, cwd: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", *args], cwd=cwd, capture_output=True,
                       text=True, timeout=280)
    assert r.returncode == 0, f"flexpipe {args[0]} failed:\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.timeout(600)
def test_profile_auto_train_calibrate_auto_from_files(tmp_path):
    from flexpipe_ui.planfile import embedded_problem, load_plan
    from flexpipe_ui.problem import load_problem
    from flexpipe_ui.timelinefile import load_timelines
    from flexpipe_ui.validate import validate

    _flexpipe("profile", *MODEL, "--ranks", "2", "--microbatches", "4", "--repeats", "2", "-o", "problem.json",
              cwd=tmp_path)
    profiled = load_problem(tmp_path / "problem.json")
    assert profiled.num_layers == 4 and profiled.ranks == 2 and profiled.meta["profiled"]

    _flexpipe("auto", "problem.json", "-o", "plan.json", "-q", "--time-limit", "2", cwd=tmp_path)
    plan = load_plan(tmp_path / "plan.json")
    validate(plan.schedule)

    out = _flexpipe("train", *MODEL, "--plan", "plan.json", "--steps", "3", "--save-timeline", "run.json",
                    cwd=tmp_path)
    assert "wrote run.json (3 measured steps)" in out
    run = load_timelines(tmp_path / "run.json")
    assert run.plan.partition == plan.partition and run.plan.schedule.order == plan.schedule.order
    assert [tl.meta["step"] for tl in run.timelines] == [0, 1, 2]
    assert all(tl.peak_memory_measured and len(tl.peak_memory_measured) == 2 for tl in run.timelines)
    assert run.meta["model"] == "demo-gpt" and run.meta["dtype"] == "float32"

    out = _flexpipe("calibrate", "problem.json", "run.json", "-o", "fitted.json", cwd=tmp_path)
    assert "wrote fitted.json" in out and "measured ms" in out
    fitted = load_problem(tmp_path / "fitted.json")
    cal = fitted.meta["calibration"]
    assert fitted.meta["calibrated_from"] == 2 and cal["plans"] == 1          # step 0 left out (--warmup 1)
    assert [l.name for l in fitted.layers] == [l.name for l in profiled.layers]
    assert [l.out for l in fitted.layers] == [l.out for l in profiled.layers]   # carried over
    assert fitted.data_input == profiled.data_input and "executor_probe" not in fitted.meta

    _flexpipe("auto", "fitted.json", "-o", "plan2.json", "-q", "--time-limit", "2", cwd=tmp_path)
    replanned = load_plan(tmp_path / "plan2.json")
    validate(replanned.schedule)
    assert replanned.num_layers == 4
    assert embedded_problem(replanned).to_dict() == fitted.to_dict()        # planned on the fitted costs
