"""The cost model's table: per-stage costs (``StageCosts``), "fits the cap", and the two facts every
other part reads: a fused backward's time and which side of a split backward frees what."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from ..kinds import Kind, StageCost

__all__ = ["StageCosts", "FIT_TOL", "fits", "fits_mask", "fused_backward"]


@dataclass(frozen=True, eq=False)
class StageCosts:
    """Per-virtual-stage costs (arrays indexed by stage) and the cross-rank latency."""

    f: np.ndarray
    b: np.ndarray
    w: np.ndarray
    act: np.ndarray
    mem: np.ndarray
    comm: float = 0.0
    # optional cost-model terms (``costmodel`` reads them; None / neutral: contract 4 exactly)
    bw: np.ndarray | None = None
    """Fused backward time per stage (None: b + w)."""
    act_w: np.ndarray | None = None
    """Activation held after I until W per stage (None: act)."""
    out: np.ndarray | None = None
    """MiB a stage sends onward (its last layer's ``out``), None: messages cost ``comm`` only."""
    grad: np.ndarray | None = None
    """MiB of gradients per stage (the data-parallel all-reduce)."""
    grad_first: Mapping[str, np.ndarray] | None = None
    """Kind name (B, W) → per stage, MiB the stage's first weight-gradient action of that kind rises
    above its start, its new gradients included (``memory.first_grad_rise``); None: grad + temp."""
    switch: np.ndarray | None = None
    """Extra time per stage of an action that follows another stage's action on its rank."""
    temp: Mapping[str, np.ndarray] | None = None
    """Kind name → per stage, MiB an action rises above what it holds while it runs (None: 0)."""
    bandwidth: float | None = None
    overhead: float | Mapping[str, float] | None = None
    comm_cpu: float = 0.0
    dp: int = 1
    dp_bandwidth: float | None = None
    data_input: bool = False
    """Stage 0 is fed data: its I is a no-op, its W the fused backward (``costmodel.fold_data_input``)."""
    runtime_mem: float = 0.0
    """MiB every rank holds for the runtime's libraries (static)."""
    recv_ahead: int | None = None
    """Receive buffers posted ahead per inbound channel; None: messages take no memory."""
    sends_held: bool = False
    """A sender keeps what it sent until its step ends (``send_events``)."""
    f_nograd: np.ndarray | None = None
    """Forward time per stage of a microbatch that a recompute re-runs (no autograd graph); None: f."""
    f_sel: np.ndarray | None = None
    """Backward time per stage that a selective recompute adds (``selective_recompute``)."""
    act_sel: np.ndarray | None = None
    """Activation MiB per stage a selective recompute does not keep."""
    copy_bandwidth: float | None = None
    """MiB per time unit of a device-host copy (``OFF``/``LOAD``); None: the kinds' own rate."""
    torch_liveness: bool = False
    """A split backward frees nothing at I (``fold_liveness``)."""

    @property
    def num_stages(self) -> int:
        return len(self.f)

    def stage(self, s: int) -> StageCost:
        return StageCost(float(self.f[s]), float(self.b[s]), float(self.w[s]),
                         float(self.act[s]), float(self.mem[s]),
                         None if self.bw is None else float(self.bw[s]), self.copy_bandwidth)

    def with_comm(self, comm: float) -> "StageCosts":
        return replace(self, comm=float(comm))


FIT_TOL = 1e-9
"""Relative tolerance (absolute below 1) of "peak fits the cap": float sums of activations may
overshoot a cap they exactly meet by an ulp."""


def fits(peak: float, cap: float | None) -> bool:
    """True when ``peak`` is within the memory ``cap`` (None: no cap), up to ``FIT_TOL``."""
    return cap is None or peak <= cap + FIT_TOL * max(1.0, abs(cap))


def fits_mask(peak, cap) -> np.ndarray:
    """``fits`` elementwise over arrays (``cap`` an array or a number, not None)."""
    cap = np.asarray(cap, float)
    return np.asarray(peak, float) <= cap + FIT_TOL * np.maximum(1.0, np.abs(cap))


def fused_backward(costs: StageCosts) -> np.ndarray:
    """Per stage, a fused B's duration (b + w unless ``bw`` says otherwise), without overhead."""
    return costs.b + costs.w if costs.bw is None else np.asarray(costs.bw, float)


def _split_release(kind: Kind) -> int:
    """+1 for I (frees act − act_w at its end), −1 for W (frees that much less), else 0."""
    if kind.computes_input_grad and not kind.computes_weight_grad:
        return 1
    if kind.computes_weight_grad and not kind.computes_input_grad:
        return -1
    return 0
