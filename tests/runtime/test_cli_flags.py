"""``flexpipe profile`` and ``flexpipe tune`` honour or refuse every flag they accept.

A flag the command never reads is silently ignored (``tune --dp`` and ``--dtype`` were). Each
command runs in this process with the measuring function replaced by a recorder: every flag's
value must be read, and the ones that change the measurement must reach it; ``tune --dp 2`` is
refused with exit 2 and one line before anything starts.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from flexpipe_ui.cli import build_parser, main  # noqa: E402
from flexpipe_ui.library import build_named  # noqa: E402
from flexpipe_ui.problem import Layer, Problem  # noqa: E402

TINY = ["--model", "demo-gpt", "--layers", "4", "--dim", "16", "--seq", "8", "--batch-size", "8"]


class _Reads:
    """An argparse namespace that records which attributes the command reads."""

    def __init__(self, ns):
        object.__setattr__(self, "_ns", ns)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self._ns, name)

    def __setattr__(self, name, value):
        setattr(self._ns, name, value)


def _flags(command: str) -> set[str]:
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    return {a.dest for a in sub._actions if a.dest != "help"}


def _problem(n=4) -> Problem:
    return Problem(ranks=2, microbatches=4, layers=tuple(Layer(f=1.0, b=1.0, w=1.0, act=1.0) for _ in range(n)))


def test_tune_reads_every_flag_and_passes_dtype(monkeypatch, tmp_path):
    import kernel_runtime.measure.tuning as tuning
    got = {}

    class Result:
        plan, problem = build_named("1f1b", _problem()), _problem()

        def table(self):
            return "table"

    def fake_tune(model, **kw):
        got.update(kw, model=model)
        return Result()
    monkeypatch.setattr(tuning, "tune", fake_tune)
    args = build_parser().parse_args(["tune", *TINY, "--ranks", "2", "--microbatches", "4", "--dtype", "float64",
                                      "--rounds", "2", "--steps", "3", "--time-limit", "1", "--shortlist", "2",
                                      "--neighbours", "1", "--devices", "cpu", "-o", str(tmp_path / "p.json"),
                                      "--write-problem", str(tmp_path / "f.json")])
    rec = _Reads(args)
    assert args.func(rec) == 0
    assert _flags("tune") - rec.read == set(), "flags tune never reads"
    assert got["dtype"] == "float64" and got["devices"] == "cpu" and got["ranks"] == 2
    assert (got["rounds"], got["steps"], got["time_limit"], got["shortlist_size"], got["neighbours"]) == (2, 3, 1.0, 2, 1)
    assert got["model"].num_layers == 4 and got["model"].batch_size == 8
    assert (tmp_path / "p.json").exists() and (tmp_path / "f.json").exists()


def test_tune_refuses_dp_at_once(capsys):
    assert main(["tune", *TINY, "--dp", "2", "-o", "x.json"]) == 2
    err = capsys.readouterr().err
    assert "--dp 2: tune measures one pipeline replica" in err and "flexpipe train --plan PLAN --dp 2" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("argv,words", [
    (["tune", "--ranks", "0", "-o", "x.json"], "--ranks: must be >= 1"),
    (["tune", "--rounds", "0", "-o", "x.json"], "--rounds: must be >= 1"),
    (["tune", "--time-limit", "nan", "-o", "x.json"], "--time-limit: must be a finite number"),
    (["tune", "--devices", "tpu", "-o", "x.json"], "--devices: invalid choice"),
    (["tune", "--dim", "10", "-o", "x.json"], "--dim 10"),
])
def test_tune_refuses_bad_flags_with_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_profile_reads_every_flag_and_passes_them_on(monkeypatch, tmp_path):
    import kernel_runtime.measure.profiler as profiler
    got = {}

    def fake_profile(model, **kw):
        got.update(kw, model=model)
        return _problem().with_(overhead={"F": 0.1, "I": 0.1, "W": 0.1, "B": 0.1})
    monkeypatch.setattr(profiler, "profile", fake_profile)
    args = build_parser().parse_args(["profile", *TINY, "--ranks", "2", "--microbatches", "4", "--dtype", "float64",
                                      "--repeats", "3", "--dp", "2", "--dp-bandwidth", "5", "-o",
                                      str(tmp_path / "p.json")])
    rec = _Reads(args)
    assert args.func(rec) == 0
    assert _flags("profile") - rec.read == set(), "flags profile never reads"
    assert (got["dtype"], got["repeats"], got["dp"], got["dp_bandwidth"], got["ranks"], got["microbatches"]) == \
        ("float64", 3, 2, 5.0, 2, 4)
    assert got["path"] == str(tmp_path / "p.json") and got["device"] == "cpu"
