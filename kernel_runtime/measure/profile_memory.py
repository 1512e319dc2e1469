"""How far each action's memory rises above what it holds: the workspace a layer's F, I, W and B
allocate while they run (``temp``, MiB per kind), measured by the tensor allocator.

A layer's F holds its activation (``act``) after it ends, and its backward frees it, but while
either runs it also holds temporaries: the tensors between two ops that nothing saves, the
gradient of each intermediate, a weight gradient computed afresh before it is added to ``.grad``,
the loss's softmax and its gradient. A rank's peak falls inside such an action, so a prediction of
peaks from ``act`` alone runs short (bench_truth: +6 to +30% on the ranks holding an LM head).
Per unit and kind: the allocator's highest live total while the action runs, less the higher of
its totals at the action's start and end (what the cost model already counts). Measured in steady
state, after one F → B (gradients exist, as in every step but a rank's first backward): on CPU
from torch's profiler's allocation events (every block of the CPU allocator, with its address and
size, inside ``record_function`` ranges), on CUDA from ``max_memory_allocated`` around each action.
The actions run through the executor's own handlers (``profile_time._Probe``).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..run.executor import DEFAULT_HANDLERS as HANDLERS, MBState

__all__ = ["action_temps", "unit_temps", "SEQUENCE"]

SEQUENCE = ("F", "B", "F", "I", "W")
"""The measured actions, after an unmeasured F → B: fused backward, then split."""


def _walk(nodes):
    for nd in nodes:
        yield nd
        yield from _walk(nd.children)


def _cpu_ranges(prof, names: Sequence[str]) -> list[tuple[float, float, float]]:
    """(start level, peak, end level) of each named range, in bytes allocated inside the session."""
    from torch._C._profiler import _EventType
    tree = prof.profiler.kineto_results.experimental_event_tree()
    ranges = sorted((nd for nd in _walk(tree) if nd.name in names), key=lambda n: n.start_time_ns)
    allocs = sorted((nd for nd in _walk(tree) if nd.tag == _EventType.Allocation), key=lambda n: n.start_time_ns)
    live: dict[int, int] = {}
    cur = 0
    out = []
    k = 0
    for rg in ranges:
        while k < len(allocs) and allocs[k].start_time_ns < rg.start_time_ns:
            cur = _apply(live, cur, allocs[k].extra_fields)
            k += 1
        start = peak = cur
        while k < len(allocs) and allocs[k].start_time_ns <= rg.end_time_ns:
            cur = _apply(live, cur, allocs[k].extra_fields)
            peak = max(peak, cur)
            k += 1
        out.append((float(start), float(peak), float(cur)))
    return out


def _apply(live: dict, cur: int, f) -> int:
    if f.alloc_size > 0:
        live[f.ptr] = f.alloc_size
        return cur + f.alloc_size
    return cur - live.pop(f.ptr, 0)


def action_temps(probe, device) -> dict[str, float]:
    """Bytes each kind rises above the higher of its start and end totals (the median of the
    kind's measured occurrences is not needed: allocation is deterministic)."""
    st = MBState()
    for k in "FB":                                   # warm: gradients exist, as in steady state
        _run(probe, k, st)
    names = [f"flexpipe::temp:{i}:{k}" for i, k in enumerate(SEQUENCE)]
    if device.type == "cuda":
        got = _cuda_run(probe, device)
    else:
        from torch.autograd.profiler import record_function
        from torch.profiler import ProfilerActivity, profile
        from ..run.procmem import _quiet_stderr
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _quiet_stderr():
            prof.__enter__()
        try:
            st = MBState()
            for name, k in zip(names, SEQUENCE):
                if k == "F":
                    st = MBState()
                with record_function(name):
                    _run(probe, k, st)
        finally:
            with _quiet_stderr():
                prof.__exit__(None, None, None)
        got = _cpu_ranges(prof, names)
    out: dict[str, float] = {}
    for k, (start, peak, end) in zip(SEQUENCE, got):
        out[k] = max(out.get(k, 0.0), max(0.0, peak - max(start, end)))
    for q in probe.params:
        q.grad = None
    return out


def _run(probe, kind: str, st) -> None:
    if kind == "F":
        with probe.saved.hooks():
            HANDLERS["F"](probe, probe.action("F"), st)
    else:
        HANDLERS[kind](probe, probe.action(kind), st)


def _cuda_run(probe, device) -> list[tuple[float, float, float]]:
    out = []
    st = MBState()
    for k in SEQUENCE:
        if k == "F":
            st = MBState()
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        _run(probe, k, st)
        torch.cuda.synchronize(device)
        out.append((float(start), float(torch.cuda.max_memory_allocated(device)),
                    float(torch.cuda.memory_allocated(device))))
    return out


def unit_temps(layers, units, x, target, loss_fn, device) -> dict[tuple, dict[str, float]]:
    """``action_temps`` (bytes) of every unit (a tuple of layer indices), each through a probe
    built as ``profile_time`` builds its timing probes."""
    from .profile_time import _Probe, unit_inputs
    units = [tuple(u) for u in units]
    n = len(layers)
    ins, gys = unit_inputs(layers, units, x, loss_fn, target)
    out = {}
    for u in units:
        probe = _Probe([layers[i] for i in u], loss_fn, ins[u], target, gys[u],
                       first_on_data=(u[0] == 0 and not x.is_floating_point()), last=(u[-1] == n - 1))
        out[u] = action_temps(probe, device)
    return out
