"""``benchmarks/bench_truth.py`` end to end on tiny models: every family is built through the code
path a user calls, the draw is printed and replayable, the output ends with one line per family
and then ``max_rel_error=... auto_speedup_measured=...`` with nothing after it (no leaked
semaphore warning from a process's resource tracker either)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_families_are_drawn_from_the_seed_and_built_by_the_users_code_paths():
    from truth_models import FAMILIES, describe, families
    a, b, c = families(5, small=True), families(5, small=True), families(6, small=True)
    assert [f.name for f in a] == list(FAMILIES)
    assert [describe(f) for f in a] == [describe(f) for f in b]                 # replayable
    assert [describe(f) for f in a[2:]] != [describe(f) for f in c[2:]]         # drawn per seed
    by = {f.name: f for f in a}
    assert by["llama-hf"].spec.name == "hf:llama"                                # from_transformers
    assert by["conv-transformer"].spec.meta["layer_names"][0] == ["stem.0"]     # split_module
    assert by["recsys-heavy-tail"].spec.meta["layer_names"][0] == ["lookup"]
    for f in a:
        assert f.spec.num_layers >= 2 * f.ranks and f.microbatches % f.ranks == 0
        assert f.spec.batch_size % f.microbatches == 0


@pytest.mark.slow
def test_bench_truth_output_ends_with_the_figures():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_truth.py"), "--quick", "--small",
                          "--seed", "3", "--families", "gpt-heavy-head,recsys-heavy-tail"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("bench_truth: seed=3 ")
    assert re.fullmatch(r"max_rel_error=\d+\.\d{4} auto_speedup_measured=\d+\.\d{4}", lines[-1])
    fam = [l for l in lines if l.startswith("family=")]
    assert [l.split()[0] for l in fam] == ["family=gpt-heavy-head", "family=recsys-heavy-tail"]
    assert all(re.fullmatch(r"family=\S+ max_rel_error=\d+\.\d{4} auto_vs_best=\d+\.\d{4}", l) for l in fam)
    assert "leaked" not in out.stderr and "resource_tracker" not in out.stderr
    table = [l for l in lines if l.startswith(("gpt-heavy-head ", "recsys-heavy-tail ")) and " round " not in l]
    assert len(table) == 10                                   # 4 library plans + auto, per family
    machine = [l for l in lines if " machine (reference kernels" in l]
    assert [l.split()[0] for l in machine] == ["gpt-heavy-head", "recsys-heavy-tail"]   # one per round
    assert all(re.search(r"runs vs profile matmul [+-]\d+\.\d%, copy [+-]\d+\.\d%$", l) for l in machine)


def test_the_machine_probe_brackets_profile_and_runs():
    from bench_truth import machine_moved
    from machine_probe import MachineSpeed, drift, probe
    before, between, after = MachineSpeed(1.0, 10.0), MachineSpeed(1.0, 12.0), MachineSpeed(1.2, 14.0)
    m = machine_moved(before, between, after)
    assert m["matmul_ms"] == pytest.approx(1.1 / 1.0 - 1)          # runs' bracket (1.0, 1.2) vs profile's (1.0, 1.0)
    assert m["copy_ms"] == pytest.approx(13.0 / 11.0 - 1)
    assert m["ms"] == [(1.0, 10.0), (1.0, 12.0), (1.2, 14.0)]
    assert drift(before, after) == pytest.approx({"matmul": 0.2, "copy": 0.4})
    s = probe(seconds=0.05)
    assert s.matmul_ms > 0 and s.copy_ms > 0
