"""Memory as the process's allocator counts it (``kernel_runtime.run.procmem``), and the profiler's
workspace probe (``kernel_runtime.measure.profile_memory``): known allocations come out to the byte,
drift between plans of one process does not leak into the next plan's figure, and a run's figure
is not the executor's own count."""
from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from kernel_runtime.run.procmem import RankMemory

MIB = 2 ** 20


def _plan(mem: RankMemory, weights_mib: int, temp_mib: int, kept_mib: int) -> tuple:
    mem.plan_start()
    w = torch.ones(weights_mib * MIB // 4)                 # built inside the session: the plan's
    mem.settled()
    with mem.step(0):
        t = torch.ones(temp_mib * MIB // 4)
        del t
        kept = torch.ones(kept_mib * MIB // 4)
    mem.after_optimizer(0)
    return w, kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_cpu_peak_is_the_allocator_peak_of_the_step():
    before = torch.ones(16 * MIB // 4)                      # allocated before: not the plan's
    mem = RankMemory(torch.device("cpu"))
    w, kept = _plan(mem, 4, 8, 2)
    assert mem.peak_mib() == pytest.approx(4 + 8, abs=0.01)
    # later steps report the first step's figure; a second plan in the same process starts afresh
    # (the profiler's own running total does not take off blocks freed between sessions)
    del w, kept, before
    mem2 = RankMemory(torch.device("cpu"))
    _plan(mem2, 1, 3, 1)
    assert mem2.peak_mib() == pytest.approx(1 + 3, abs=0.01)
    assert mem2.rss_mib() is not None


def test_action_temps_see_the_fresh_weight_gradient():
    """A Linear's backward computes its weight gradient afresh before adding it to ``.grad``: the
    B workspace is at least one weight, and F's is what the forward frees before it ends."""
    from kernel_runtime.measure.profile_memory import unit_temps

    class Wide(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(512, 512)

        def forward(self, x):
            return self.lin(x.repeat(1, 1) * 1.0)

    torch.manual_seed(0)
    layers = [Wide(), nn.Linear(512, 4)]
    x = torch.randn(8, 512)
    target = torch.randint(0, 4, (8,))
    got = unit_temps(layers, [(0,), (1,)], x, target, nn.functional.cross_entropy, torch.device("cpu"))
    weight = 512 * 512 * 4
    assert got[(0,)]["B"] >= weight
    assert got[(0,)]["W"] >= weight
    assert got[(0,)]["F"] >= 8 * 512 * 4                    # the copy made by repeat, not saved
    assert set(got[(1,)]) == {"F", "B", "I", "W"}
