"""The bad-input corpus: every bad plan, problem, flag and DSL program ends in exit 2 with a message
naming the file or flag (never a traceback, never minutes); the good ones exit 0 with finite JSON.

The corpus is generated (``tests/bad_corpus.py``) and run in-process through
``flexpipe_ui.cli.main``; a few cases also go through the real ``flexpipe`` command.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import bad_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    return folder, bad_corpus.build(folder)


def test_corpus_refused_with_a_message_or_accepted(corpus, capsys):
    folder, cases = corpus
    files = {p for p in folder.iterdir() if p.suffix == ".json" and p.name != "out.json"}
    assert len(files) >= 300, len(files)
    outcomes = [bad_corpus.run(c) for c in cases]
    counts = collections.Counter(o.verdict for o in outcomes)
    refused = [o for o in outcomes if o.verdict == "refused"]
    slowest = max(refused, key=lambda o: o.seconds)
    with capsys.disabled():
        print(f"\nbad-input corpus: {len(files)} files, tried {len(outcomes)}, exit 2 with message "
              f"{counts['refused']}, right exit 0 {counts['ok']}, anything else {counts['other']}; "
              f"slowest refusal {slowest.seconds:.2f} s ({' '.join(slowest.case.argv[:2])})")
    others = [f"{' '.join(o.case.argv)[:160]} -> rc {o.rc}: {o.stderr[:300]}" for o in outcomes
              if o.verdict == "other"]
    assert others == [], "\n".join(others)
    assert counts["refused"] >= 600 and counts["ok"] >= 20
    # every class of the issue is in the corpus
    kinds = {c.kind for c in cases}
    for k in ("depth", "action text", "plan microbatches", "plan ranks", "encoding", "empty plan", "size",
              "problem layer cost", "non-finite", "flag", "dsl program", "plan vs problem", "zero cost",
              "auto size", "schedule"):
        assert k in kinds, k
    assert not (folder / "ESCAPED").exists(), "a DSL program ran code"
    assert not (folder / "zero_out.json").exists(), "auto wrote a plan for an all-zero-cost problem"


def test_messages_say_the_limit_and_the_field(corpus):
    folder, cases = corpus
    by = {(c.argv[0], Path(c.argv[1]).name if len(c.argv) > 1 else ""): c for c in cases}

    def err(cmd, name):
        return bad_corpus.run(by[(cmd, name)]).stderr

    assert "nested deeper than 32 levels" in err("validate", "plan_deep_list.json")
    assert "field meta.x" in err("validate", "plan_deep_meta.json")
    assert "at most 9 digits" in err("simulate", "plan_action_0.json")
    assert "limit of 1024 ranks" in err("show", "plan_ranks_12.json")            # ranks 1e6
    assert "limit of 65536 microbatches" in err("show", "plan_microbatches_0.json")
    assert "2**53" in err("validate", "plan_microbatches_2.json")                  # 400 digits
    assert "not UTF-8" in err("validate", "plan_ff_byte.json") and "plan_ff_byte.json" in err("validate", "plan_ff_byte.json")
    assert "no actions" in err("validate", "plan_empty_plan.json")
    assert "MiB is larger than the limit of 16 MiB" in err("validate", "plan_over_size_limit.json")
    assert "NaN is not allowed" in err("validate", "plan_meta_nan.json")
    dup = err("validate", "plan_dup_200k.json")
    assert "appears 200001 times" in dup and len(dup) < 20000
    split = err("validate", "plan_4_stages_no_layers.json")
    assert "cannot split 3 layers into 4 stages" in split and "problem_three_layers.json" in split
    p = bad_corpus.run(by[("simulate", "plan_good.json")]) if ("simulate", "plan_good.json") in by else None
    assert p is None or p.verdict != "other"


def test_problem_messages_name_file_layer_key_and_limit(tmp_path):
    from flexpipe_ui.problem import ProblemError, load_problem
    d = bad_corpus._problem()
    d["layers"][2]["w"] = 1e308
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError, match=r"p\.json: layer 2, key 'w': 1e\+308 is beyond the limit of 1e\+12"):
        load_problem(tmp_path / "p.json")
    (tmp_path / "q.json").write_text(json.dumps(d).replace("1e+308", "9" * 400))
    with pytest.raises(ProblemError, match=r"q\.json: field layers\[2\]\.w: integer with 400 digits"):
        load_problem(tmp_path / "q.json")


@pytest.mark.parametrize("argv,needle", [
    (["validate", "{folder}/plan_deep_list.json"], "nested deeper than 32 levels"),
    (["simulate", "{folder}/plan_good.json", "--comm", "nan"], "argument --comm: must be a finite number"),
    (["plan", "--ranks", "2", "--microbatches", "4", "-o", "{folder}/x.json", "--program",
      bad_corpus.ESCAPE.format(marker="{folder}/ESCAPED_SUBPROCESS")], "only calls of the DSL's own names"),
    (["plan", "1f1b", "--ranks", "100000", "--microbatches", "8", "-o", "{folder}/x.json"], "MAX_RANKS"),
])
def test_real_command_refuses_in_one_line(corpus, argv, needle):
    folder, _ = corpus
    argv = [a.replace("{folder}", str(folder)) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", *argv], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (folder / "ESCAPED_SUBPROCESS").exists()


def test_output_json_is_finite_and_write_json_refuses_nan(tmp_path):
    from flexpipe_ui.jsonio import write_json
    from flexpipe_ui.limits import LimitError
    with pytest.raises(LimitError, match=r"makespan: nan is not a finite number"):
        write_json({"makespan": float("nan")}, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
