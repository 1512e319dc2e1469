"""The CLI (`flexpipe train ... --check-reference`), recompute (a user kind) against the reference,
the profiler, and calibration from a measured timeline."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plans import assert_steps_match_reference, one_f_one_b  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_cli_train_check_reference(tmp_path):
    from flexpipe_ui.problem import save_problem

    from kernel_runtime.models import demo_gpt, demo_gpt_problem
    prob = tmp_path / "p.json"       # memory figures of the same 6-layer model, for the predicted peak
    save_problem(demo_gpt_problem(demo_gpt(seq=8, dim=16, n_blocks=4, batch_size=8), ranks=2,
                                  microbatches=4), prob)
    out = subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", "train", "--model", "demo-gpt",
                          "--schedule", "gpipe", "--ranks", "2", "--microbatches", "4", "--steps", "2",
                          "--dim", "16", "--seq", "8", "--batch-size", "8", "--check-reference",
                          "--problem", str(prob)],
                         cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert sum(l.startswith("step ") for l in lines) == 2
    peak = [l for l in lines if l.startswith("peak memory (MiB): ")]
    assert len(peak) == 1 and "rank 0 measured" in peak[0] and "rank 1 measured" in peak[0]
    assert peak[0].count("predicted") == 2
    assert lines[-1].startswith("max_grad_diff=")
    assert float(lines[-1].split("=")[1]) <= 1e-10
    # no silent start: progress while the workers start (stderr), before the first step
    assert "starting 2 worker processes..." in out.stderr


def test_cli_refuses_bad_input():
    out = subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", "train", "--schedule", "nope",
                          "--ranks", "2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "unknown schedule 'nope'" in out.stderr


def _with_extra(base, before_backward, after_forward=None):
    """Insert ``before_backward`` kinds right before each B (even microbatches) and
    ``after_forward`` right after each F of those microbatches."""
    from flexpipe_ui.ir import Schedule
    rows = []
    for row in base.order:
        out = []
        for a in row:
            if a.kind.name == "B" and a.microbatch % 2 == 0:
                out += [f"{a.stage}{k}{a.microbatch}" for k in before_backward]
            out.append(str(a))
            if after_forward and a.kind.name == "F" and a.microbatch % 2 == 0:
                out += [f"{a.stage}{k}{a.microbatch}" for k in after_forward]
        rows.append(out)
    return Schedule.from_rows(rows, base.microbatches, base.placement)


@pytest.mark.timeout(120)
def test_recompute_and_offload_match_reference():
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.ops import register_offload, register_recompute
    from flexpipe_ui.problem import even_partition
    from flexpipe_ui.validate import validate

    from kernel_runtime.models.data import reference_run
    from kernel_runtime.run.launcher import launch
    from kernel_runtime.models import demo_gpt
    register_recompute()
    register_offload()
    base = one_f_one_b(2, 4)
    recompute = validate(_with_extra(base, ["R"]))
    offload = validate(_with_extra(base, ["LOAD"], ["OFF"]))
    spec = demo_gpt(vocab=32, seq=8, dim=16, heads=2, n_blocks=2, batch_size=8)
    plans = [Plan(s, even_partition(4, 2)) for s in (recompute, offload)]
    h = launch(plans, model=spec, steps=2, dtype="float64", capture_grads=True, seed=1, lr=0.1)
    h.wait(100)
    ref = reference_run(spec, steps=2, seed=1, lr=0.1, dtype=torch.float64)
    assert_steps_match_reference(h, ref, steps=2, plans=2)
    kinds = [{a.kind.name for a in h.timelines[i].actions} for i in (0, 2)]
    assert "R" in kinds[0] and {"OFF", "LOAD"} <= kinds[1]


def test_profile_writes_problem(tmp_path):
    from flexpipe_ui.problem import Layer, Problem, load_problem

    from kernel_runtime.models import demo_gpt, timed_model
    from kernel_runtime.measure.profiler import profile
    spec = demo_gpt(vocab=32, seq=8, dim=16, heads=2, n_blocks=2, batch_size=8)
    path = tmp_path / "p.json"
    prob = profile(spec, ranks=2, microbatches=4, repeats=2, path=path)
    back = load_problem(path)
    assert back.num_layers == spec.num_layers == 4 and back.ranks == 2 and back.microbatches == 4
    assert all(l.f > 0 for l in back.layers) and back.layers[0].b == 0.0   # embedding: no input grad
    assert all(l.b > 0 and l.w > 0 for l in back.layers[1:])
    assert all(l.act > 0 and l.mem > 0 for l in back.layers)
    # the sleeping model's prescribed durations are what the profiler measures
    want = Problem(ranks=1, microbatches=1, layers=(Layer(f=8, b=4, w=2), Layer(f=6, b=6, w=3)))
    got = profile(timed_model(want), repeats=2)
    for lw, lg in zip(want.layers, got.layers):
        for k in "fbw":
            assert getattr(lw, k) - 0.5 <= getattr(lg, k) < getattr(lw, k) + 3.0, (k, lg)


def test_calibrate_recovers_costs():
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.problem import Layer, Problem, even_partition
    from flexpipe_ui.sim import simulate
    from flexpipe_ui.timeline import Timeline

    from flexpipe_ui.calibrate import calibrate
    sys.path.insert(0, str(Path(__file__).parent))
    from plans import zb_h1
    truth = Problem(ranks=4, microbatches=8, comm=0.5,
                    layers=tuple(Layer(f=2.0 + i % 3, b=2.0, w=1.0 + i % 2, act=1, mem=2) for i in range(8)))
    plan = Plan(zb_h1(4, 8), even_partition(8, 4))
    tl = simulate(plan, truth).timeline
    measured = Timeline(tl.ranks, tl.actions, tl.rank, tl.start, tl.end, "measured", tl.schedule)
    got = calibrate(measured, plan, truth)
    assert got.comm == pytest.approx(0.5)
    for s, lay in enumerate(plan.partition):
        for k in "fbw":
            assert sum(getattr(got.layers[i], k) for i in lay) == pytest.approx(
                sum(getattr(truth.layers[i], k) for i in lay))
    assert simulate(plan, got).makespan == pytest.approx(simulate(plan, truth).makespan)


@pytest.mark.timeout(120)
def test_sequential_model_with_given_data():
    """A model given as an nn.Sequential + loss function + (inputs, targets), cut by the plan."""
    from torch import nn

    from flexpipe_ui.library import build_named

    from kernel_runtime import launch
    from kernel_runtime.models.data import reference_run
    from kernel_runtime.models import as_spec
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)])
    data = [(torch.randn(8, 8), torch.randn(8, 8)) for _ in range(2)]
    loss = nn.functional.mse_loss
    plan = build_named("zb-h1", None, ranks=2, microbatches=4)
    h = launch(plan, model=model, loss_fn=loss, data=data, steps=2, dtype="float64", capture_grads=True)
    h.wait(100)
    ref = reference_run(as_spec(model, loss), data=data, steps=2, dtype=torch.float64)
    assert h.losses == pytest.approx(ref.losses, abs=1e-12)
    for ev in h.step_events:
        g = ref.grads[ev.step]
        assert set(ev.grads) == set(g)
        assert max(float(np.abs(ev.grads[k] - g[k]).max()) for k in g) <= 1e-10
