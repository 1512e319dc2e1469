"""Against the peer: the same plans exported to torch's CSV and run by torch.distributed.pipelining's
``_PipelineScheduleRuntime`` give the same loss and gradients as ours (float64, 2 gloo ranks)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plans import library_plans  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process


@pytest.mark.timeout(200)
def test_same_gradients_as_torch_runtime():
    from kernel_runtime.models import demo_gpt
    from kernel_runtime.run.peer import compare
    spec = demo_gpt(vocab=32, seq=8, dim=16, heads=2, n_blocks=2, batch_size=8)
    plans = library_plans(2, 4, spec.num_layers)
    for name in ("1f1b", "zb-h1", "zb-v"):
        if name not in plans:
            continue
        r = compare(plans[name], spec, reps=0, dtype="float64", seed=2)
        assert r.ours_loss == pytest.approx(r.torch_loss, abs=1e-12), name
        assert set(r.ours_grads) == set(r.torch_grads)
        assert r.max_grad_diff <= 1e-10, (name, r.max_grad_diff)
