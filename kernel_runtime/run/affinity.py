"""Pin each CPU worker to its own cores, the same way in profiling and in runs.

A prediction is only as true as the run resembles the profile, so profiling workers and the
launcher's workers are placed by one rule. On the 2-core development machine an interleaved A/B
(4 pinned, 4 unpinned profiles) did not show pinning to make profiles more repeatable: the VM's own
speed drift was larger (docs/cost_model.md, "Noise on this machine"); what pinning gives is that
profile and run share one placement.

Rule: the process's allowed CPUs, split into ``local_world`` equal contiguous shares; local rank r
gets share r. Nothing is pinned on CUDA, when there are more local workers than CPUs, when the
platform has no ``sched_setaffinity``, or when ``FLEXPIPE_PIN_CPUS=0``.

What is pinned is the calling thread (Linux's ``sched_setaffinity(0)``) and the threads it starts
afterwards (torch's intra-op pool): the compute. ``startup.start_process`` calls it after joining
the process group, so gloo's I/O threads, started by the join, keep every allowed CPU. Pinned with
the whole process, a send or receive waited for its I/O thread to get the core from the compute:
on the 2-core machine the conv model's interleaved 1F1B lost ~6 ms before many of its actions and
measured +12.8% and +13.4% over its prediction, against +4.5% and -0.5% with the main thread alone
pinned (interleaved A/B, docs/cost_model.md, "Pinning the compute, not gloo's threads").
"""
from __future__ import annotations

import os

__all__ = ["cpu_share", "pin_worker"]


def cpu_share(local_rank: int, local_world: int, cpus: list[int]) -> list[int] | None:
    """The CPUs of ``local_rank`` among ``local_world`` workers sharing ``cpus`` (None: no pinning)."""
    if local_world < 1 or not 0 <= local_rank < local_world or len(cpus) < local_world:
        return None
    share = len(cpus) // local_world
    return sorted(cpus)[local_rank * share:(local_rank + 1) * share]


def pin_worker(local_rank: int, local_world: int, device: str = "cpu", enabled: bool = True) -> list[int] | None:
    """Restrict the calling thread (and the threads it starts) to its share of the CPUs; the CPUs
    pinned, or None when left alone."""
    if (not enabled or device != "cpu" or os.environ.get("FLEXPIPE_PIN_CPUS", "1") == "0"
            or not hasattr(os, "sched_setaffinity")):
        return None
    mine = cpu_share(local_rank, local_world, list(os.sched_getaffinity(0)))
    if mine is None:
        return None
    try:
        os.sched_setaffinity(0, mine)
    except OSError:                     # a container may forbid it: run unpinned
        return None
    return mine
