"""A rank's memory as the process's tensor allocator counts it, not as the executor tallies it.

The executor's own count of the bytes it tracks (``memory.SavedBytes``) is the cost model's rule
restated, so comparing a prediction with it proves nothing. What a run reports instead:

- **on a GPU**: CUDA's ``max_memory_allocated`` over the step (every live block of the caching
  allocator at its peak: weights, gradients, optimizer state, activations, workspaces, buffers);
- **on CPU**: the same quantity from torch's CPU allocator. Torch's profiler, with
  ``profile_memory``, receives every allocation and free of the CPU allocator with the running
  total of live bytes (``total_allocated``); the worker profiles from before it builds its layers
  to the end of the plan's first step (a warm-up step, never timed), and the step's figure is the
  highest running total inside it (weights, gradients, activations, workspace temporaries inside
  ops, messages) plus the optimizer state that step's ``optimizer.step()`` left (live in every later
  step). Allocation order is the plan's, so every step has this peak; later steps run
  uninstrumented and report the first step's figure.

The resident set is reported beside it (``VmHWM`` less the resident set before the rank built its
layers), for information only: on CPU it also holds library code first touched by the step's
kernels and glibc's free heap (measured on bench_truth's GPT: ~36 MiB of code, ~34 MiB of free
heap kept by ``allocator.keep_freed_memory``), which belong to the process, not to the plan. The
free heap is handed back before the process's first plan only (``RankMemory._free_heap``), so a later
plan's figure counts only what it touched beyond the heap its predecessors left.
Linux for the resident set; elsewhere it is None.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from contextlib import contextmanager, nullcontext

__all__ = ["rss_bytes", "peak_rss_bytes", "reset_peak_rss", "release_free_heap", "RankMemory"]

_MIB = float(2 ** 20)
_STEP = "flexpipe::measured_step"


def _status(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """The resident set now (bytes), None where /proc is not there."""
    return _status("VmRSS")


def peak_rss_bytes() -> int | None:
    """The resident set's high-water mark since the process started or ``reset_peak_rss``."""
    return _status("VmHWM")


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the resident set now (Linux ≥ 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_TRIMMED = False
"""Whether this process has handed its free heap back (``release_free_heap``) yet."""


def release_free_heap() -> None:
    """Collect garbage and hand the heap's free pages back to the system (glibc ``malloc_trim``)."""
    global _TRIMMED
    gc.collect()
    _TRIMMED = True
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


@contextmanager
def _quiet_stderr():
    """The process's stderr (file descriptor 2) sent to /dev/null: the profiler's C++ parts print
    a line at every start and stop ("USDT: ... profiler_start") that no setting turns off."""
    import os
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _walk(nodes):
    for nd in nodes:
        yield nd
        yield from _walk(nd.children)


def _cpu_peak(prof) -> tuple[float, float, float] | None:
    """(highest live total inside the measured step, live total at its end, live total after the
    last event), bytes allocated during the profiling session and not freed, from the profiler's
    allocation events; None when the step's range is not found.

    The sum is kept here, block by block: the reporter's own running total is process-wide and
    outlives a session (blocks freed while no profiler runs are never taken off it, and a later
    block at the same address is then taken off at the old size), so it drifts from plan to plan
    in one process. Blocks allocated before the session (and their frees) are not the plan's."""
    from torch._C._profiler import _EventType
    tree = prof.profiler.kineto_results.experimental_event_tree()
    step = next((nd for nd in _walk(tree) if nd.name == _STEP), None)
    allocs = sorted((nd for nd in _walk(tree) if nd.tag == _EventType.Allocation), key=lambda n: n.start_time_ns)
    if step is None or not allocs:
        return None
    t0, t1 = step.start_time_ns, step.end_time_ns
    live: dict[int, int] = {}
    cur = peak = at_end = 0
    for nd in allocs:
        f = nd.extra_fields
        if f.alloc_size > 0:
            live[f.ptr] = f.alloc_size
            cur += f.alloc_size
        elif f.ptr in live:
            cur -= live.pop(f.ptr)
        if t0 <= nd.start_time_ns <= t1:
            peak = max(peak, cur)
            at_end = cur
    return float(peak), float(at_end), float(cur)


class RankMemory:
    """One plan on one rank: ``plan_start()`` before the rank builds its layers; per step,
    ``step(i)`` as a context around the step's compute, ``after_optimizer(i)`` after the
    optimizer's step; ``peak_mib()``: the allocator's peak (see the module docstring);
    ``rss_mib()``: the resident set's high-water mark in the step less the base."""

    def __init__(self, device):
        self.device = device
        self.prof = None
        self.peak: float | None = None
        self.base_rss: int | None = None
        self._rss_ok = False
        self._level_before_opt = None
        self._first = True

    def _free_heap(self) -> None:
        """The process's first plan hands its free heap back; later plans keep it, collecting
        garbage only. A run's workers keep freed memory (``allocator.keep_freed_memory``) so that a
        step re-uses the pages of the step before; trimming at every plan's start gave every plan of
        a launch that memory back, and its first two or three steps faulted it in again: counted per
        step in bench_truth's conv workers (2026-12-06), 1F1B's first timed step 1-6k minor faults
        (up to 34 ms of system time), auto's (8 microbatches in flight) 5-12k (27-54 ms), every later
        step ~0 -- on every pass, since each pass starts its plans afresh."""
        if self._first:
            release_free_heap()
        else:
            gc.collect()

    def plan_start(self) -> None:
        self._first = not _TRIMMED
        self._free_heap()
        self.base_rss = rss_bytes()
        if self.device.type != "cuda":
            try:
                import torch
                from torch.profiler import ProfilerActivity, profile
                self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
                old = torch.empty(1)
                with _quiet_stderr():
                    self.prof.__enter__()
                    # the allocator warns once per process when a block from before the session
                    # is freed in it (every plan frees the previous step's): let it warn here
                    del old
            except Exception:            # a profiler already running (user code): no CPU figure
                self.prof = None

    def settled(self) -> None:
        """After building (a split model builds whole, then drops the rest): ``_free_heap``."""
        self._free_heap()

    def step(self, i: int):
        self._rss_ok = self.base_rss is not None and reset_peak_rss()
        if self.device.type == "cuda":
            import torch
            torch.cuda.reset_peak_memory_stats(self.device)
            return nullcontext()
        if self.prof is not None and i == 0:
            from torch.autograd.profiler import record_function
            return record_function(_STEP)
        return nullcontext()

    def after_optimizer(self, i: int) -> None:
        if self.device.type == "cuda":
            import torch
            self.peak = torch.cuda.max_memory_allocated(self.device)
            return
        if self.prof is None or i != 0:
            return
        prof, self.prof = self.prof, None
        with _quiet_stderr():
            prof.__exit__(None, None, None)
        got = _cpu_peak(prof)
        if got is None:
            return
        peak, end_of_step, level = got
        # optimizer state created by this step's optimizer.step() (AdamW's moments): live in every
        # later step's peak
        self.peak = peak + max(0.0, level - end_of_step)

    def peak_mib(self) -> float | None:
        return None if self.peak is None else self.peak / _MIB

    def rss_mib(self) -> float | None:
        if not self._rss_ok:
            return None
        peak = peak_rss_bytes()
        return None if peak is None else (peak - self.base_rss) / _MIB

