"""Per-action memory levels of a real run, for ``diagnose_memory --trace`` (diagnostics only).

Imported in each worker through the handlers it provides (a worker unpickles them, so imports
this module): every action's handler runs inside ``record_function("fp::<action>")``, and the
procmem peak finder also writes, for the profiled first step, each action's (level before, highest
level inside, level after) in bytes live in the allocator, to ``$FLEXPIPE_MEMTRACE/rank<r>.<n>.json``
(one file per plan, in plan order). Receives are made before the handler runs: a level before
includes the action's received messages.
"""
from __future__ import annotations

import itertools
import json
import os

from kernel_runtime.run import procmem
from kernel_runtime.run.executor import DEFAULT_HANDLERS

_PREFIX = "fp::"
_count = itertools.count()


class Traced:
    """A default handler run inside a named profiler range (picklable: module level)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self, ex, a, st):
        from torch.autograd.profiler import record_function
        with record_function(f"{_PREFIX}{a}"):
            return DEFAULT_HANDLERS[self.kind](ex, a, st)


def handlers() -> dict:
    return {k: Traced(k) for k in DEFAULT_HANDLERS}


_original = procmem._cpu_peak


def _ranges(prof) -> list:
    """(action, level before, highest inside, level after) of every action range, in start order."""
    from kernel_runtime.measure.profile_memory import _cpu_ranges
    tree = prof.profiler.kineto_results.experimental_event_tree()
    ranges = sorted((nd for nd in procmem._walk(tree) if nd.name.startswith(_PREFIX)), key=lambda n: n.start_time_ns)
    got = _cpu_ranges(prof, {nd.name for nd in ranges})
    return [(nd.name[len(_PREFIX):], *vals) for nd, vals in zip(ranges, got)]


def _traced_peak(prof):
    got = _original(prof)
    where = os.environ.get("FLEXPIPE_MEMTRACE")
    if where:
        import torch.distributed as dist
        rank = dist.get_rank() if dist.is_initialized() else os.getpid()
        with open(os.path.join(where, f"rank{rank}.{next(_count)}.json"), "w") as f:
            json.dump({"ranges": _ranges(prof), "peak": got}, f)
    return got


procmem._cpu_peak = _traced_peak
