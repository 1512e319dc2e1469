"""Pipeline × data parallel: the rank layout and the per-stage gradient all-reduce.

The world holds ``dp`` replicas of a ``ranks``-process pipeline: pipeline rank r of replica d is
global rank ``d * ranks + r`` (replica-major, so one machine per replica keeps a pipeline's
point-to-point traffic local, and the all-reduce crosses machines). Replica d trains on the d-th
of ``dp`` equal shares of the step's batch. Each pipeline rank r has one data-parallel group
``{d * ranks + r}``; right after the action that finishes a stage's gradients (its last W or B)
an asynchronous all-reduce of that stage's gradients starts on it, and ``finish`` waits for all of
them and divides by ``dp`` before the optimizer step, so every replica takes the same step: the
gradient of the mean loss over the whole batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["Layout", "GradAllReduce", "replica_share"]


@dataclass(frozen=True)
class Layout:
    """Where a global rank sits: pipeline ``rank`` of ``replica``, out of ``ranks`` × ``replicas``."""

    global_rank: int
    ranks: int
    replicas: int = 1

    @property
    def rank(self) -> int:
        return self.global_rank % self.ranks

    @property
    def replica(self) -> int:
        return self.global_rank // self.ranks

    def of(self, rank: int, replica: int) -> int:
        return replica * self.ranks + rank


def replica_share(x: torch.Tensor, replica: int, replicas: int, what: str = "batch") -> torch.Tensor:
    """Replica ``replica``'s equal share of ``x`` along dim 0 (refuses a batch that does not divide)."""
    if replicas == 1:
        return x
    from ..models import ModelError
    n = x.shape[0]
    if n % replicas:
        raise ModelError(f"{what} of {n} rows does not split into {replicas} data-parallel replicas: use a "
                         f"batch size divisible by {replicas} x microbatches")
    return x.chunk(replicas, dim=0)[replica]


class GradAllReduce:
    """Asynchronous per-stage gradient all-reduce over the data-parallel group of this pipeline rank.

    Creating it is collective (every process creates every rank's group, in one order).
    ``staged``: gradients live on a GPU but the backend is gloo, so they go through host memory.
    """

    def __init__(self, layout: Layout, staged: bool = False):
        self.layout, self.staged = layout, staged
        self.group = None
        for r in range(layout.ranks):
            g = dist.new_group([layout.of(r, d) for d in range(layout.replicas)])
            if r == layout.rank:
                self.group = g
        self._works: list = []

    def start(self, params) -> None:
        """Start summing these parameters' gradients across the replicas."""
        for p in params:
            if p.grad is None:
                continue
            buf = p.grad.detach().cpu() if self.staged else p.grad
            self._works.append((p, buf, dist.all_reduce(buf, group=self.group, async_op=True)))

    def finish(self) -> None:
        """Wait for every started all-reduce; gradients become the mean over replicas."""
        works, self._works = self._works, []
        for p, buf, work in works:
            work.wait()
            if buf is not p.grad:
                p.grad.copy_(buf)
            p.grad.div_(self.layout.replicas)
