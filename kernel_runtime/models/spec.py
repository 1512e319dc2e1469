"""The model spec: how workers get a model (layer count, per-layer builder, loss, batches).

A model is an ordered list of layers plus a loss; the plan's partition cuts it into stages. A
``ModelSpec`` builds only the layers a rank needs (each layer seeded by its index, so every rank
and the single-process reference get the same weights) and makes the synthetic batches.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

__all__ = ["ModelSpec", "ModelError"]


class ModelError(ValueError):
    """A model that the plan cannot be run on (layer count, loss, data shape)."""


# -- the spec -------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class ModelSpec:
    """How workers get a model: layer count, a per-layer builder, a loss and a batch maker."""

    num_layers: int
    """Number of layers (must equal the plan's partition)."""
    build: Callable[[int], nn.Module]
    """Layer index → a fresh module, deterministic given the seed set before the call."""
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """(last layer's output, target) → scalar loss, mean-reduced over the microbatch."""
    batch: Callable[[int, int, torch.Generator], tuple[torch.Tensor, torch.Tensor]] | None = None
    """(step, batch size, generator) → (inputs, targets): synthetic data when no ``data`` is given."""
    batch_size: int = 8
    """Batch size of one step (split into the plan's microbatches)."""
    name: str = "model"
    """Label for reports."""
    meta: dict = field(default_factory=dict)
    """Extras (e.g. the GPT config)."""
    build_many: Callable[[Sequence[int]], list[nn.Module]] | None = None
    """Optional: layer indices → their modules, built together from one seeded whole model (a
    ``split_module`` spec); when set, ``layers`` seeds once and calls it instead of ``build``."""

    def layers(self, indices: Sequence[int], seed: int, device="cpu", dtype=torch.float32) -> list[nn.Module]:
        if self.build_many is not None:
            torch.manual_seed(seed * 100003)
            return [m.to(device=device, dtype=dtype) for m in self.build_many(list(indices))]
        out = []
        for i in indices:
            torch.manual_seed(seed * 100003 + i)
            out.append(self.build(i).to(device=device, dtype=dtype))
        return out



def _is_hf_model(model: Any) -> bool:
    """A transformers ``PreTrainedModel`` (checked by name: transformers is optional)."""
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel"
               for c in type(model).__mro__)
