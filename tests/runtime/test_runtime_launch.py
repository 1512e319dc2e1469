"""launch() from the calling process: returns at once, streams step events with measured timelines
(the simulator's Timeline type), calibrates back into a problem, and the package imports lazily."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process


def test_import_starts_nothing_and_needs_no_torch():
    code = ("import sys, kernel_runtime; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert callable(kernel_runtime.launch)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.timeout(120)
def test_timed_run_streams_measured_timelines():
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import build_named
    from flexpipe_ui.problem import Layer, Problem, even_partition
    from flexpipe_ui.sim import simulate
    from flexpipe_ui.timeline import Timeline

    from kernel_runtime import launch
    from flexpipe_ui.calibrate import calibrate
    prob = Problem(ranks=2, microbatches=4, layers=tuple(Layer(f=8, b=8, w=4, act=1) for _ in range(4)))
    sched = build_named("zb-h1", None, ranks=2, microbatches=4).schedule
    plan = Plan(sched, even_partition(4, sched.num_stages))
    t0 = time.monotonic()
    h = launch(plan, timed=prob, steps=3)
    assert time.monotonic() - t0 < 2.0          # returns at once; workers start in the background
    assert not h.done
    seen = []
    for ev in h.events(timeout=90):
        seen.append(ev)
        assert isinstance(ev.timeline, Timeline) and ev.timeline.source == "measured"
        assert ev.step_time > 0 and ev.loss is not None
    assert [e.step for e in seen] == [0, 1, 2]
    assert h.done and h.error is None and len(h.losses) == len(h.step_times) == len(h.timelines) == 3
    sim = simulate(plan, prob)
    assert sorted(map(str, sim.timeline.actions)) == sorted(map(str, h.timelines[-1].actions))
    measured = h.timelines[-1].makespan
    assert 0.97 * sim.makespan <= measured < 1.3 * sim.makespan, (measured, sim.makespan)
    # measured F, I and W durations come back as the prescribed costs
    cal = calibrate(h.timelines[1:], plan, prob)
    for lc, lp in zip(cal.layers, prob.layers):
        for k in "fbw":
            assert getattr(lp, k) - 0.5 <= getattr(lc, k) < getattr(lp, k) + 2.0, (k, lc)
    assert 0.0 <= cal.comm < 5.0


@pytest.mark.timeout(120)
def test_torchrun_entry_point(tmp_path):
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import build_named
    from flexpipe_ui.planfile import save_plan
    from flexpipe_ui.problem import even_partition
    import json
    import os
    import socket
    sched = build_named("zb-v", None, ranks=2, microbatches=4).schedule
    save_plan(Plan(sched, even_partition(6, sched.num_stages)), tmp_path / "plan.json")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(port), "-m", "kernel_runtime.worker",
                          "--plan", str(tmp_path / "plan.json"), "--steps", "2", "--out", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    assert [s["step"] for s in steps] == [0, 1] and all(s["loss"] > 0 for s in steps)
    recs = [json.loads(l) for l in (tmp_path / "rank1.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and len(recs[0]["records"]) == len(sched.order[1])


def test_gpu_check_guard_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: run scripts/gpu_check.sh")
    out = subprocess.run([sys.executable, "-m", "kernel_runtime.gpu_check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "GPU check skipped" in out.stdout
    out = subprocess.run([sys.executable, "-m", "kernel_runtime.gpu_check", "--require"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    out = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "PYTHON": sys.executable})
    assert out.returncode == 1 and out.stdout.strip().endswith("gpu_check=fail")


@pytest.mark.timeout(150)
def test_launch_from_a_jupyter_kernel():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import kernel_runtime as kr\n"
        "from flexpipe_ui.library import build_named\n"
        "h = kr.launch(build_named('zb-v', None, ranks=2, microbatches=4), steps=2)\n"
        "evs = list(h.events(timeout=90))\n"
        "print('steps', [e.step for e in evs], 'done', h.done, 'error', h.error)"),
        nbformat.v4.new_code_cell(
        "import torch\n"
        "class Mine(torch.nn.Module):\n"
        "    def forward(self, x): return x\n"
        "try:\n"
        "    kr.launch(build_named('gpipe', None, ranks=2, microbatches=2), model=[Mine(), Mine()],\n"
        "              loss_fn=torch.nn.functional.mse_loss)\n"
        "except ValueError as e:\n"
        "    print('refused', 'notebook' in str(e))")]
    from nbrun import execute  # channels polled in slices (tests/nbrun.py)
    execute(nbclient.NotebookClient(nb, timeout=120, kernel_name="python3"))
    text = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    assert "steps [0, 1] done True error None" in text[0], text
    assert "refused True" in text[1], text
