"""How fast the machine itself is right now: a fixed reference workload, not the user's model.

bench_truth compares a prediction made from a profile with a run taken minutes later. On a shared
VM the host's speed moves in between (docs/cost_model.md, "The machine moves while it is
measured": a fixed conv F + B went 11.5 -> 15.3 ms and back in 40 s), and no term of the cost model
can see that. This probe times two fixed kernels, one compute-bound (a 384 x 384 matmul, in cache)
and one memory-bound (a 64 MiB copy, far beyond the caches), in the calling process on one thread,
so a benchmark can bracket its profile and its runs and print how far the machine moved between
them. It measures the machine, never a plan: nothing it prints enters a prediction.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

__all__ = ["MachineSpeed", "probe", "drift"]


@dataclass(frozen=True)
class MachineSpeed:
    """Medians of one probe, in ms per kernel call."""
    matmul_ms: float
    copy_ms: float


def _median_ms(fn, seconds: float) -> float:
    fn()                                            # first call: allocation, caches
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def probe(seconds: float = 0.6) -> MachineSpeed:
    """Time both kernels for about ``seconds`` each, on one torch thread (the workers' own setting)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(384, 384, generator=g), torch.randn(384, 384, generator=g)
        src, dst = torch.ones(16 * 2 ** 20), torch.empty(16 * 2 ** 20)      # 64 MiB each
        mm = _median_ms(lambda: torch.mm(a, b), seconds)
        cp = _median_ms(lambda: dst.copy_(src), seconds)
    finally:
        torch.set_num_threads(threads)
    return MachineSpeed(matmul_ms=mm, copy_ms=cp)


def drift(before: MachineSpeed, after: MachineSpeed) -> dict:
    """How much slower (+) or faster (-) each kernel ran ``after`` than ``before``."""
    return {"matmul": after.matmul_ms / before.matmul_ms - 1, "copy": after.copy_ms / before.copy_ms - 1}
