"""Multi-process checks against the single-process reference step (float64, gloo):
Hugging Face Llama and GPT-2 (tiny configs) under every library schedule on 2 and 4 ranks, and
pipeline x data parallel (2 ranks x 2 replicas) against one step on the whole batch.

One launch per case runs all its plans in turn (process start-up is the expensive part)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plans import library_plans  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process

TOL = 1e-10
CONFIGS = {
    "llama": dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=64),
    "gpt2": dict(n_embd=32, n_head=4, vocab_size=64, n_positions=16),
}


def _check(h, ref, names, plans):
    worst = {}
    for ev in h.step_events:
        name = names[ev.plan_index]
        assert ev.loss == pytest.approx(ref.losses[ev.step], abs=TOL), (name, ev.step)
        g = ref.grads[ev.step]
        assert set(ev.grads) == set(g), sorted(set(ev.grads) ^ set(g))[:5]
        worst[name] = max(worst.get(name, 0.0), max(float(np.abs(ev.grads[k] - g[k]).max()) for k in g))
        assert len(ev.timeline.actions) == plans[name].schedule.num_actions
    print("max grad diff per plan:", {n: f"{d:.1e}" for n, d in worst.items()})
    bad = {n: d for n, d in worst.items() if d > TOL}
    assert not bad, f"max abs gradient difference above {TOL}: {bad}"
    return worst


@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind,ranks", [("llama", 2), ("gpt2", 2), ("llama", 4), ("gpt2", 4)])
def test_hf_model_matches_reference(kind, ranks):
    pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")
    from kernel_runtime import from_transformers, launch
    from kernel_runtime.models.data import reference_run
    blocks = 2 if ranks == 2 else 6                   # V / interleaved schedules: 2 stages per rank
    key = "num_hidden_layers" if kind == "llama" else "n_layer"
    spec = from_transformers(kind, config={**CONFIGS[kind], key: blocks}, seq=8, batch_size=2 * ranks)
    plans = library_plans(ranks, 2 * ranks, spec.num_layers)
    assert {"gpipe", "1f1b", "zb-h1", "zb-v", "interleaved-1f1b"} <= set(plans), sorted(plans)
    names = list(plans)
    ref = reference_run(spec, steps=1, seed=5, lr=0.05, dtype=torch.float64)
    h = launch([plans[n] for n in names], model=spec, steps=1, seed=5, lr=0.05, dtype="float64",
               capture_grads=True, timeout=120)
    h.wait(timeout=360)
    assert len(h.step_events) == len(names)
    _check(h, ref, names, plans)


@pytest.mark.timeout(300)
def test_pipeline_x_data_parallel_matches_whole_batch_step():
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.problem import even_partition
    from kernel_runtime import launch
    from kernel_runtime.models.data import reference_run
    from kernel_runtime.models import demo_gpt
    spec = demo_gpt(vocab=64, seq=8, dim=16, heads=2, n_blocks=2, batch_size=16)
    every = library_plans(2, 4, spec.num_layers)
    plans = {n: every[n] for n in ("1f1b", "zb-h1", "zb-v")}
    names = list(plans)
    steps = 2                                         # step 1 checks the replicas stepped alike
    ref = reference_run(spec, steps=steps, seed=2, lr=0.1, dtype=torch.float64)
    h = launch([plans[n] for n in names], model=spec, steps=steps, seed=2, lr=0.1, dtype="float64",
               capture_grads=True, timeout=120, dp=2)
    h.wait(timeout=280)
    assert h.world == 4 and len(h.step_events) == steps * len(names)
    for ev in h.step_events:
        assert ev.replica_grad_diff == 0.0            # the all-reduce made every replica's step the same
        assert set(ev.timeline.rank.tolist()) == {0, 1}   # the timeline is replica 0's pipeline
    _check(h, ref, names, plans)


@pytest.mark.timeout(150)
def test_torchrun_with_dp(tmp_path):
    """The README's torchrun line with --dp: ranks x dp processes, both replicas train each step."""
    import json
    import os
    import socket
    import subprocess
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import build_named
    from flexpipe_ui.planfile import save_plan
    from flexpipe_ui.problem import even_partition
    root = Path(__file__).resolve().parents[2]
    sched = build_named("zb-v", None, ranks=2, microbatches=4).schedule
    save_plan(Plan(sched, even_partition(6, sched.num_stages)), tmp_path / "plan.json")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-port", str(port),
           "-m", "kernel_runtime.worker", "--plan", str(tmp_path / "plan.json"), "--dp", "2", "--steps", "2",
           "--out", str(tmp_path)]
    out = subprocess.run(cmd, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True,
                         text=True, timeout=420)   # 4 cold torch imports on a fresh venv
    assert out.returncode == 0, out.stderr[-2000:]
    # four processes share stdout and print() writes a line's text and its newline separately, so
    # two objects can land on one line: read every JSON object in the text
    dec, steps, i = json.JSONDecoder(), [], 0
    while (j := out.stdout.find("{", i)) != -1:
        try:
            obj, i = dec.raw_decode(out.stdout, j)
            steps.append(obj)
        except json.JSONDecodeError:
            i = j + 1
    assert sorted((s["replica"], s["step"]) for s in steps) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    reports = {p.name for p in tmp_path.glob("rank*.jsonl")}
    assert reports == {f"rank{g}.jsonl" for g in range(4)}
    # global rank g is pipeline rank g % 2 of replica g // 2
    for g in range(4):
        first = json.loads((tmp_path / f"rank{g}.jsonl").read_text().splitlines()[0])
        assert (first["prank"], first["replica"]) == (g % 2, g // 2)
    bad = subprocess.run(cmd[:4] + ["2"] + cmd[5:], cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                         capture_output=True, text=True, timeout=100)
    assert bad.returncode != 0 and "x --dp 2 replicas = 4 processes but torchrun started 2" in bad.stderr
