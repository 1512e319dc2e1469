"""Clocks of the executor's action records: ``CpuTimer`` (perf_counter_ns) and ``CudaTimer`` (CUDA
events on the compute stream, converted to the host clock at the step's end)."""
from __future__ import annotations

import time

import torch

__all__ = ["CpuTimer", "CudaTimer"]


class CpuTimer:
    """perf_counter_ns marks (the clock is shared by all processes of a machine)."""

    def start_step(self) -> int:
        return time.perf_counter_ns()

    def mark(self):
        return time.perf_counter_ns()

    def now(self) -> int:
        return time.perf_counter_ns()

    def resolve(self, records):
        return records


class CudaTimer:
    """CUDA events on the compute stream, converted to the host clock at the step's end."""

    def __init__(self, device):
        self.device = device

    def start_step(self) -> int:
        torch.cuda.synchronize(self.device)
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()
        self.host_ref = time.perf_counter_ns()
        return self.host_ref

    def mark(self):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def now(self) -> int:
        torch.cuda.synchronize(self.device)
        return time.perf_counter_ns()

    def resolve(self, records):
        torch.cuda.synchronize(self.device)
        ns = lambda ev: self.host_ref + int(self.ref.elapsed_time(ev) * 1e6)
        return [(t, ns(s), ns(e)) for t, s, e in records]
