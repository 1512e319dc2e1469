"""Point-to-point cost between two ranks over the real backend (gloo on CPU, NCCL on GPUs).

Ping-pong between ranks 0 and 1 at several message sizes: one-way time = round trip / 2, fitted
as ``latency + MiB / bandwidth`` (least squares, latency clipped at 0). ``comm_cpu`` is the share
of a transfer's wall time that the two processes spend on CPU (all threads, user + system: gloo's
copies and the loopback TCP stack run on the same cores as the compute), from a one-way stream
of the largest message. Call from both ranks at once; other ranks return at once.
Units: ms, MiB, MiB/ms.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["CommCost", "measure_comm", "fit_latency_bandwidth"]

_MIB = float(2 ** 20)


@dataclass
class CommCost:
    """Fitted point-to-point cost and the samples it came from."""

    latency: float                    # ms
    bandwidth: float                  # MiB per ms
    comm_cpu: float                   # 0..1
    samples: list                     # (MiB, one-way ms median)


def fit_latency_bandwidth(points) -> tuple[float, float]:
    """(latency ms, bandwidth MiB/ms) of ``t = latency + size / bandwidth`` through (MiB, ms) points."""
    x = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points], float)
    if len(x) < 2 or np.ptp(x) == 0:
        return float(max(y.min(), 0.0)), float("inf")
    slope, icpt = np.polyfit(x, y, 1)
    if slope <= 0:
        return float(max(np.median(y), 0.0)), float("inf")
    if icpt < 0:                     # through the origin instead
        slope = float((x @ y) / (x @ x))
        icpt = 0.0
    return float(icpt), float(1.0 / slope)


def _pingpong(rank: int, buf: torch.Tensor, reps: int, sync) -> float:
    times = []
    for i in range(reps + 2):
        sync()
        t = time.perf_counter()
        if rank == 0:
            dist.send(buf, dst=1)
            dist.recv(buf, src=1)
        else:
            dist.recv(buf, src=0)
            dist.send(buf, dst=0)
        sync()
        if i >= 2:
            times.append((time.perf_counter() - t) * 1e3 / 2)
    return statistics.median(times)


def measure_comm(rank: int, device, sizes_bytes=(4, 1 << 16, 1 << 20, 1 << 22), reps: int = 15,
                 stream: int = 12, staged: bool = False) -> CommCost | None:
    """Latency, bandwidth and CPU share between ranks 0 and 1; None on other ranks. ``staged``:
    GPUs shared by the ranks, messages go through host memory over gloo (as the transport sends
    them), so the buffers are host tensors."""
    if rank > 1:
        return None
    if staged:
        device = torch.device("cpu")
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    pts = []
    for n in sizes_bytes:
        buf = torch.zeros(max(1, n // 4), dtype=torch.float32, device=device)
        ms = _pingpong(rank, buf, reps if n < (1 << 21) else max(5, reps // 2), sync)
        pts.append((buf.numel() * 4 / _MIB, ms))
    lat, bw = fit_latency_bandwidth(pts)
    # CPU share of a one-way stream of the largest message (rank 0 sends, rank 1 receives)
    buf = torch.zeros(max(1, sizes_bytes[-1] // 4), dtype=torch.float32, device=device)
    _pingpong(rank, torch.zeros(1, device=device), 1, sync)       # line the two ranks up
    c0, t0 = time.process_time(), time.perf_counter()
    works = [(dist.isend(buf, dst=1) if rank == 0 else dist.irecv(buf, src=0)) for _ in range(stream)]
    for w in works:
        w.wait()
    sync()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    share = 0.0 if cuda or wall <= 0 else min(1.0, max(0.0, cpu / wall))
    return CommCost(lat, bw, share, pts)
