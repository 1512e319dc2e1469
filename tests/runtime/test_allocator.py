"""Workers keep freed memory: re-allocating a large block after freeing it faults no pages in again
(``kernel_runtime.run.allocator``; docs/cost_model.md, "Page faults")."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import resource, sys
sys.path.insert(0, {root!r})
import torch
from kernel_runtime.run.allocator import keep_freed_memory
if {keep}:
    assert keep_freed_memory()
def cycle():
    t = torch.ones(48 * 2 ** 20 // 4)       # 48 MiB: above any mmap threshold glibc adapts to
    del t
for _ in range(10):      # the heap grows for a few cycles (an aligned request is a little larger
    cycle()             # than the block freed) until freed blocks coalesce; then it is steady
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(keep: bool) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(root=str(ROOT), keep=keep)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_freed_blocks_are_reused_without_faulting_pages_in_again():
    pages = 48 * 2 ** 20 // 4096
    assert _faults(keep=False) >= 5 * pages          # glibc maps and unmaps each time
    assert _faults(keep=True) < pages // 10          # kept in the heap, reused


def test_it_can_be_turned_off(monkeypatch):
    from kernel_runtime.run.allocator import keep_freed_memory
    monkeypatch.setenv("FLEXPIPE_KEEP_MEMORY", "0")
    assert keep_freed_memory() is False


_PLANS = """
import resource, sys
sys.path.insert(0, {root!r})
import torch
from kernel_runtime.run.allocator import keep_freed_memory
from kernel_runtime.run.procmem import RankMemory
assert keep_freed_memory()
faults = []
for plan in range(3):                  # three plans in one worker, as a launch runs them
    mem = RankMemory(torch.device("cpu"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    mem.plan_start()
    mem.settled()
    with mem.step(0):                  # the plan's first step, under the memory profiler
        t = torch.ones(48 * 2 ** 20 // 4)
        del t
    mem.after_optimizer(0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    for _ in range(40):                # the plan's later steps: the heap settles (``allocator``)
        t = torch.ones(48 * 2 ** 20 // 4)
        del t
print(*faults)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_a_later_plan_keeps_the_heap_its_predecessors_left():
    """Only the process's first plan hands its free heap back (``procmem.RankMemory._free_heap``):
    trimming at every plan's start made every plan's first steps fault its memory in again
    (docs/cost_model.md, "A plan's first steps"). Measured here: the first plan's start and
    first step fault its 48 MiB in; later plans' fault ~nothing (trimming each plan: 12k pages each)."""
    out = subprocess.run([sys.executable, "-c", _PLANS.format(root=str(ROOT))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, *later = (int(v) for v in out.stdout.split())
    pages = 48 * 2 ** 20 // 4096
    assert first >= pages // 2
    assert all(n < pages // 10 for n in later), (first, later)
