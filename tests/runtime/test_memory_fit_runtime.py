"""Plans that recompute some microbatches and offload others (``memory_fit``, what auto writes under
a cap) train on gloo with the reference's losses and gradients, split and fused backward."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plans import assert_steps_match_reference  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process


@pytest.mark.timeout(150)
def test_per_microbatch_recompute_and_offload_match_reference():
    from flexpipe_ui.library import build_named
    from flexpipe_ui.memory_fit import AddMemoryOps, fit_memory
    from flexpipe_ui.sim import simulate
    from dataclasses import replace

    from kernel_runtime.models import demo_gpt, demo_gpt_problem
    from kernel_runtime.models.data import reference_run
    from kernel_runtime.run.launcher import launch
    spec = demo_gpt(vocab=32, seq=8, dim=16, heads=2, n_blocks=2, batch_size=8)
    prob = demo_gpt_problem(spec, ranks=2, microbatches=4)
    # a split-backward plan with mixed choices, and the fit's own choice under a cap
    mixed = build_named("zb-h1", prob).edit(AddMemoryOps(recompute=((0, 1), (1, 2)), offload=((0, 2),)))
    base = build_named("gpipe", prob)         # holds all 4 microbatches on rank 0
    sim = simulate(base, prob)
    pk, st = sim.metrics.peak_memory, sim.metrics.static_memory
    cap = 0.8 * max(pk)                  # both ranks must drop some of their four microbatches
    assert all(cap < x for x in pk) and cap > max(st)
    fitted = fit_memory(base, replace(prob, memory_limit=cap, copy_bandwidth=1e6))
    assert fitted.fits and fitted.recompute + fitted.offload
    h = launch([mixed, fitted.plan], model=spec, steps=2, dtype="float64", capture_grads=True, seed=1, lr=0.1)
    h.wait(120)
    ref = reference_run(spec, steps=2, seed=1, lr=0.1, dtype=torch.float64)
    assert_steps_match_reference(h, ref, steps=2, plans=2)
    ran = {a.kind.name for a in h.timelines[0].actions}
    assert {"R", "OFF", "LOAD", "I", "W"} <= ran
