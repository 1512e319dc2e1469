"""Measured timelines as files (``flexpipe-timeline/1``) and ``flexpipe calibrate`` reading them.

Torch-free and fast: the "measured" timelines are the simulator's of a known problem, so a file's
round trip and the calibration from files can be checked exactly.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from flexpipe_ui.calibrate import calibrate_runs
from flexpipe_ui.cli import main
from flexpipe_ui.library import build_named
from flexpipe_ui.planfile import save_plan
from flexpipe_ui.problem import Layer, Problem, load_problem, save_problem
from flexpipe_ui.sim import simulate
from flexpipe_ui.timelinefile import (TIMELINE_FORMAT, TimelineFileError, load_timelines, save_timelines,
                                      timelines_to_dict)


def _problem(scale: float = 1.0) -> Problem:
    return Problem(ranks=2, microbatches=4, comm=0.1,
                   layers=tuple(Layer(f=scale * (1.0 + i % 2), b=1.0, w=0.5, act=1.0 + i, mem=2.0, name=f"l{i}")
                                for i in range(6)))


def _measured(plan, truth, steps=3):
    out = []
    m = simulate(plan, truth).metrics
    for k in range(steps):
        tl = replace(simulate(plan, truth).timeline, source="measured",
                     peak_memory_measured=tuple(p + k for p in m.peak_memory))
        tl.meta["step"] = k
        out.append(tl)
    return out


def test_a_run_round_trips_through_its_file(tmp_path):
    base = _problem()
    plan = build_named("zb-h1", base)
    tls = _measured(plan, _problem(1.5))
    path = tmp_path / "run.json"
    save_timelines(path, plan, tls, meta={"model": "toy"},
                   steps=[{"loss": 1.0, "step_time": 0.01}, {"loss": float("nan")}, {}])
    d = json.loads(path.read_text())
    assert d["format"] == TIMELINE_FORMAT and d["meta"]["model"] == "toy" and d["meta"]["units"] == "ms, MiB"
    assert "loss" not in d["steps"][1]                     # no NaN in a file we write
    run = load_timelines(path)
    assert run.plan.partition == plan.partition and run.plan.schedule.order == plan.schedule.order
    assert [tl.records() for tl in run.timelines] == [tl.records() for tl in tls]
    assert [tl.peak_memory_measured for tl in run.timelines] == [tl.peak_memory_measured for tl in tls]
    assert [tl.meta["step"] for tl in run.steps(warmup=1)] == [1, 2]
    # calibrating from the file is calibrating from the timelines
    from_file = calibrate_runs([(run.plan, list(run.steps(1)))], base)
    direct = calibrate_runs([(plan, tls[1:])], base)
    assert from_file.to_dict() == direct.to_dict()


def _write(tmp_path, d) -> str:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    return str(path)


@pytest.mark.parametrize("edit,words", [
    (lambda d: d.update(format="flexpipe-plan/1"), "format is 'flexpipe-plan/1'"),
    (lambda d: d.pop("steps"), "missing key 'steps'"),
    (lambda d: d.update(steps=[]), "'steps' must be a non-empty list"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [0, "0F0", 1.0]), "steps[0].actions[1]: expected [rank"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [0, "0Q9x", 0.0, 1.0]), "steps[0].actions[1]"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [7, "0F0", 0.0, 1.0]), "rank 7 is not one of"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [1, "0F0", 0.0, 1.0]), "is this the plan that ran?"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [0, "0F9", 0.0, 1.0]), "outside the plan"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [0, "0F0", 2.0, 1.0]), "ends (1) before it starts (2)"),
    (lambda d: d["steps"][0]["actions"].__setitem__(1, [0, "0F0", "a", 1.0]), "start: expected a finite number"),
    (lambda d: d["steps"][1].update(step=-1), "steps[1].step: expected an integer"),
    (lambda d: d["steps"][0].update(peak_memory=[1.0]), "steps[0].peak_memory: expected a list of 2"),
    (lambda d: d["plan"].pop("order"), "plan: missing key 'order'"),
])
def test_a_bad_file_is_refused_naming_the_file_and_the_field(tmp_path, edit, words):
    plan = build_named("1f1b", _problem())
    d = timelines_to_dict(plan, _measured(plan, _problem(), steps=2))
    edit(d)
    path = _write(tmp_path, d)
    with pytest.raises(TimelineFileError) as e:
        load_timelines(path)
    assert words in str(e.value) and str(e.value).startswith(path)


def test_flexpipe_calibrate_fits_a_problem_from_run_files(tmp_path, capsys):
    base, truth = _problem(), _problem(1.5).with_(comm=0.4)
    save_problem(base, tmp_path / "problem.json")
    files = []
    for name in ("1f1b", "zb-h1", "interleaved-1f1b"):
        plan = build_named(name, base)
        files.append(str(tmp_path / f"{name}.json"))
        save_timelines(files[-1], plan, _measured(plan, truth))
    out = tmp_path / "fitted.json"
    assert main(["calibrate", str(tmp_path / "problem.json"), *files, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1f1b" in text and "comm 0.100 -> 0.400 ms" in text and f"wrote {out}" in text
    fitted = load_problem(out)
    for lf, lt in zip(fitted.layers, truth.layers):
        assert lf.f == pytest.approx(lt.f) and lf.b == pytest.approx(lt.b)
    other = build_named("zb-v", base)
    assert simulate(other, fitted).makespan == pytest.approx(simulate(other, truth).makespan)


def test_flexpipe_calibrate_refuses_bad_input_with_one_line(tmp_path, capsys):
    base = _problem()
    save_problem(base, tmp_path / "problem.json")
    plan = build_named("1f1b", base)
    save_timelines(tmp_path / "run.json", plan, _measured(plan, base, steps=1))
    save_plan(plan, tmp_path / "plan.json")
    other = base.with_(layers=base.layers[:4])
    save_problem(other, tmp_path / "four.json")
    cases = [
        (["calibrate", str(tmp_path / "problem.json"), str(tmp_path / "run.json"), "-o", "x.json"],
         "all within --warmup 1"),
        (["calibrate", str(tmp_path / "problem.json"), str(tmp_path / "plan.json"), "-o", "x.json"],
         "format is 'flexpipe-plan/1'"),
        (["calibrate", str(tmp_path / "four.json"), str(tmp_path / "run.json"), "--warmup", "0", "-o", "x.json"],
         "has 6 layers but"),
        (["calibrate", str(tmp_path / "problem.json"), "-o", "x.json"], "the following arguments are required"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and "Traceback" not in err, err
