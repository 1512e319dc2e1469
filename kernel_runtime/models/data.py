"""Training data for a step and its split into microbatches, plus the single-process reference step.

Data is either synthetic (the model spec's batch maker, seeded by ``seed`` and the step) or given:
a callable ``step -> (inputs, targets)`` or a sequence of ``(inputs, targets)`` (cycled). Every
rank computes the same batch, so no data moves between ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .spec import ModelError, ModelSpec

__all__ = ["get_batch", "split_microbatches", "reference_run", "ReferenceResult", "make_optimizer"]


def get_batch(spec: ModelSpec, data: Any, step: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if data is None:
        if spec.batch is None:
            raise ModelError(f"model {spec.name!r} has no synthetic data: pass data=(inputs, targets) "
                             "batches or a callable step -> (inputs, targets)")
        gen = torch.Generator().manual_seed(seed * 7919 + step)
        return spec.batch(step, spec.batch_size, gen)
    if callable(data):
        return data(step)
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], torch.Tensor):
        return data
    if isinstance(data, Sequence) and data:
        return data[step % len(data)]
    raise ModelError(f"data must be None, (inputs, targets), a list of them or a callable, "
                     f"not {type(data).__name__}")


def split_microbatches(x: torch.Tensor, m: int, what: str = "batch") -> list[torch.Tensor]:
    """Equal chunks along dim 0; a batch that does not divide is refused (equal shapes on the wire)."""
    n = x.shape[0]
    if n % m:
        raise ModelError(f"{what} of {n} rows does not split into {m} equal microbatches: use a batch "
                         f"size divisible by {m} (e.g. {m * max(1, n // m)}) or change microbatches")
    return list(x.chunk(m, dim=0))


def make_optimizer(params, lr: float, optimizer: str = "sgd"):
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise ModelError(f"unknown optimizer {optimizer!r}: use 'sgd' or 'adamw'")


@dataclass
class ReferenceResult:
    losses: list[float]
    grads: list[dict[str, Any]]     # per step: "layer.param" → numpy array


def reference_run(spec: ModelSpec, *, steps: int = 1, data: Any = None, seed: int = 0, lr: float = 0.01,
                  dtype=torch.float64, device="cpu", optimizer: str = "sgd",
                  microbatches: int | None = None) -> ReferenceResult:
    """The non-pipelined step: whole model, whole batch, one backward, same optimizer."""
    layers = spec.layers(range(spec.num_layers), seed, device=device, dtype=dtype)
    params = [p for l in layers for p in l.parameters()]
    opt = make_optimizer(params, lr, optimizer)
    losses, grads = [], []
    for step in range(steps):
        x, t = get_batch(spec, data, step, seed)
        if microbatches is not None:
            split_microbatches(x, microbatches)
        x = x.to(device)
        x = x.to(dtype) if x.is_floating_point() else x
        t = t.to(device)
        t = t.to(dtype) if t.is_floating_point() else t
        opt.zero_grad(set_to_none=True)
        h = x
        for l in layers:
            h = l(h)
        loss = spec.loss_fn(h, t)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({f"{i}.{n}": p.grad.detach().cpu().numpy().copy()
                      for i, l in enumerate(layers) for n, p in l.named_parameters() if p.grad is not None})
        opt.step()
    return ReferenceResult(losses, grads)
