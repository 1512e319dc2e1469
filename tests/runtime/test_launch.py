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
    from kernel_runtime.profiler import calibrate
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
    assert sim.makespan <= measured < 1.3 * sim.makespan, (measured, sim.makespan)
    # measured F, I and W durations come back as the prescribed costs
    cal = calibrate(h.timelines[1:], plan, prob)
    for lc, lp in zip(cal.layers, prob.layers):
        for k in "fbw":
            assert getattr(lp, k) <= getattr(lc, k) < getattr(lp, k) + 2.0, (k, lc)
    assert 0.0 <= cal.comm < 5.0
