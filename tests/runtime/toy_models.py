"""Small importable models for the runtime tests (spawned workers and the CLI import them by name)."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as Fn


class ToyNet(nn.Module):
    """An MLP with named parts: ``inp``, ``body.0..3``, ``norm``, ``out`` and a parameter-free ``act``."""

    def __init__(self, width: int = 8, depth: int = 4):
        super().__init__()
        self.inp = nn.Linear(4, width)
        self.body = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.act = nn.Tanh()
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, 2)

    def forward(self, x):
        x = self.act(self.inp(x))
        for b in self.body:
            x = b(x)
        return self.out(self.norm(x))


def toy_loss(y, t):
    return Fn.mse_loss(y, t)


def toy_batch(step: int, bs: int, gen: torch.Generator):
    x = torch.randn(bs, 4, generator=gen)
    return x, torch.stack([x.sum(1), x[:, 0] * x[:, 1]], 1)


TOY_LAYERS = [["inp", "act"], "body.0", "body.1", "body.2", "body.3", ["norm", "out"]]


def toy_spec():
    """Factory for ``--model toy_models:toy_spec``: a split_module spec built on each worker."""
    from kernel_runtime import split_module
    return split_module(ToyNet, TOY_LAYERS, toy_loss, batch=toy_batch, batch_size=8)


def toy_layers_and_loss():
    """Factory returning (layers, loss): the ``(layers, loss)`` form of ``--model``."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)), toy_loss
