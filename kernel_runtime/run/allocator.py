"""Keep freed host memory in the process, the same way in profiling and in runs.

glibc's malloc serves large blocks (above a threshold that adapts from 128 KiB) with ``mmap`` and
gives them back with ``munmap`` on free, and trims the heap's top: a pipelined step that frees and
re-allocates activations then faults every page in again. Measured on bench_truth's GPT (2 CPU
workers, 20 steps): 20k page faults a step for 1F1B, 31k for interleaved 1F1B, 2.5k for ZB-V, with
the plans' step times moving 10-20% between launches as the allocator's state did; with freed
memory kept, ~0 faults a step for every plan (docs/cost_model.md, "Page faults"). Profiles
measured in steady state never saw those faults, so the run differed from its profile by a
plan-dependent amount. PyTorch's CPU tuning guides reach the same end with jemalloc or tcmalloc.

``keep_freed_memory()`` sets ``M_MMAP_MAX`` to 0 (the main arena serves every block from its heap,
however large: bench_truth's MLP head has a 32 MiB weight whose gradient was mapped afresh for
each microbatch, 65k faults a step, above the largest mmap threshold glibc accepts) and
``M_TRIM_THRESHOLD`` to 2 GiB (the heap is not trimmed), which also turns off the adaptive
threshold. Other threads' arenas still map what their heaps cannot hold. The heap grows over the
first steps (torch's 64-byte-aligned requests are a little larger than the block just freed, until
freed neighbours coalesce) and then stays: the process keeps its peak, which a training worker
reaches every step anyway. Workers call it at start (``FLEXPIPE_KEEP_MEMORY=0`` to leave malloc
alone); elsewhere (not glibc, macOS, Windows) it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_TRIM = 2 ** 31 - 1


def keep_freed_memory() -> bool:
    """Configure this process's glibc malloc to keep freed memory; True when it did."""
    if os.environ.get("FLEXPIPE_KEEP_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):     # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM))
