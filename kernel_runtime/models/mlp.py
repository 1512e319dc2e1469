"""An MLP chain with uneven layer widths and a heavy classifier head (a benchmark model).

Layer i maps ``widths[i]`` to ``widths[i + 1]`` (Linear + GELU); the last layer is a classifier
into ``classes`` outputs with cross-entropy, so the head dominates the step the way an LM head
does. Uneven widths make per-layer costs differ, which is what partitioning has to get right.
"""
from __future__ import annotations

import functools
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as Fn

from .spec import ModelSpec

__all__ = ["mlp_chain"]


class _Dense(nn.Module):
    def __init__(self, a: int, b: int):
        super().__init__()
        self.lin = nn.Linear(a, b)

    def forward(self, x):
        return Fn.gelu(self.lin(x))


def _layer(widths: tuple, classes: int, i: int) -> nn.Module:
    if i == len(widths) - 1:
        return nn.Linear(widths[-1], classes)
    return _Dense(widths[i], widths[i + 1])


def _batch(width: int, classes: int, step: int, bs: int, gen: torch.Generator):
    return torch.randn(bs, width, generator=gen), torch.randint(0, classes, (bs,), generator=gen)


def _loss(logits, target):
    return Fn.cross_entropy(logits, target)


def mlp_chain(widths: Sequence[int] = (512, 1024, 256, 2048, 512, 1024, 384, 768, 512),
              classes: int = 16384, batch_size: int = 256) -> ModelSpec:
    """``len(widths)`` layers: ``len(widths) - 1`` dense layers between the widths, then the head."""
    widths = tuple(int(w) for w in widths)
    return ModelSpec(num_layers=len(widths), build=functools.partial(_layer, widths, int(classes)),
                     loss_fn=_loss, batch=functools.partial(_batch, widths[0], int(classes)),
                     batch_size=batch_size, name="mlp-chain",
                     meta={"widths": widths, "classes": int(classes)})
