"""The timed model: layers that sleep their prescribed F, I and W durations instead of computing."""
from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from flexpipe_ui.problem import Problem

from .spec import ModelError, ModelSpec

__all__ = ["timed_model", "SleepLayer"]


class _Waiter:
    """Sleeps that end on time: learns this process's wake-up lateness (which grows when the cores
    are oversubscribed) and sleeps that much less, so a layer takes its prescribed duration."""

    late = 0.0      # seconds, running estimate

    @classmethod
    def wait(cls, ms: float) -> None:
        if ms <= 0:
            return
        d = ms / 1000.0
        target = time.perf_counter() + d
        time.sleep(max(0.0, d - cls.late))
        err = time.perf_counter() - target
        cls.late = min(max(0.0, cls.late + 0.3 * err), d / 2)


class _SleepFB(torch.autograd.Function):
    """Identity whose forward sleeps f ms and whose backward (the input gradient) sleeps b ms."""

    @staticmethod
    def forward(ctx, x, f, b):
        ctx.b = b
        _Waiter.wait(f)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        _Waiter.wait(ctx.b)
        return g, None, None


class _SleepW(torch.autograd.Function):
    """Contributes zero to the output; its backward, the weight gradient, sleeps w ms."""

    @staticmethod
    def forward(ctx, p, like, w):
        ctx.w = w
        ctx.shape = p.shape
        return torch.zeros_like(like) + 0 * p.sum()

    @staticmethod
    def backward(ctx, g):
        _Waiter.wait(ctx.w)
        return g.sum().expand(ctx.shape) * 0 + 1e-3, None, None


class SleepLayer(nn.Module):
    """A layer that waits instead of computing: F sleeps f, I sleeps b, W sleeps w (ms).

    The weight path hangs off the output independently of the input path, so the split backward
    runs the b sleep in I and the w sleep in W, and a fused B runs both.
    """

    def __init__(self, f: float, b: float, w: float, width: int = 4):
        super().__init__()
        self.f, self.b, self.w = float(f), float(b), float(w)
        self.weight = nn.Parameter(torch.ones(1))
        self.width = width

    def forward(self, x):
        return _SleepFB.apply(x, self.f, self.b) + _SleepW.apply(self.weight, x.detach(), self.w)


def _timed_layer(costs: tuple, i: int) -> nn.Module:
    f, b, w = costs[i]
    return SleepLayer(f, b, w)


def _timed_batch(width: int, step: int, bs: int, gen: torch.Generator):
    return torch.randn(bs, width, generator=gen), torch.zeros(bs, width)


def _timed_loss(y, t):
    return (y - t).pow(2).mean()


def timed_model(timed: Any = True, *, num_layers: int | None = None, batch_size: int = 8,
                width: int = 4) -> ModelSpec:
    """Sleeping layers: ``timed`` is True (20 ms each), a number of ms, or a Problem (its f/b/w, ms)."""
    import functools
    if isinstance(timed, Problem):
        costs = tuple((l.f, l.b, l.w) for l in timed.layers)
    else:
        ms = 20.0 if timed is True else float(timed)
        if num_layers is None:
            raise ModelError("timed mode with a fixed duration needs the layer count (the plan's)")
        costs = tuple((ms, ms, ms) for _ in range(num_layers))
    if num_layers is not None and len(costs) != num_layers:
        raise ModelError(f"the timed problem has {len(costs)} layers but the plan has {num_layers}")
    return ModelSpec(num_layers=len(costs), build=functools.partial(_timed_layer, costs),
                     loss_fn=_timed_loss, batch=functools.partial(_timed_batch, width),
                     batch_size=batch_size, name="timed", meta={"costs_ms": costs})
