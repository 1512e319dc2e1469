"""The demo GPT: embedding, transformer blocks, LM head, synthetic copy-the-sequence batches."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as Fn

from flexpipe_ui.problem import Layer, Problem

from .spec import ModelError, ModelSpec

__all__ = ["GPTConfig", "demo_gpt", "demo_gpt_problem", "Block", "lm_loss"]


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Size of the demo GPT."""

    vocab: int = 256
    """Vocabulary size (synthetic tokens)."""
    seq: int = 32
    """Sequence length."""
    dim: int = 64
    """Model width."""
    heads: int = 4
    """Attention heads."""
    n_blocks: int = 4
    """Transformer blocks (layers = embedding + blocks + head)."""

    def __post_init__(self) -> None:
        for name in ("vocab", "seq", "dim", "heads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ModelError(f"demo_gpt {name} must be an integer >= 1, got {v!r}")
        if isinstance(self.n_blocks, bool) or not isinstance(self.n_blocks, int) or self.n_blocks < 0:
            raise ModelError(f"demo_gpt n_blocks must be an integer >= 0, got {self.n_blocks!r}")
        if self.dim % self.heads:
            raise ModelError(f"demo_gpt dim {self.dim} is not a multiple of heads {self.heads}: attention "
                             f"splits the width evenly across heads; use a dim like {self.heads * max(1, self.dim // self.heads)}")


class Embedding(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq, cfg.dim)

    def forward(self, idx):
        t = idx.shape[1]
        return self.tok(idx) + self.pos(torch.arange(t, device=idx.device))


class Block(nn.Module):
    """Pre-norm transformer block (causal attention + MLP), nanoGPT-style."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.fc = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.out = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(Fn.gelu(self.fc(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.dim)
        self.lm = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, x):
        return self.lm(self.ln(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return Fn.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _gpt_layer(cfg: GPTConfig, i: int) -> nn.Module:
    if i == 0:
        return Embedding(cfg)
    if i == cfg.n_blocks + 1:
        return Head(cfg)
    return Block(cfg)


def _gpt_batch(cfg: GPTConfig, step: int, bs: int, gen: torch.Generator):
    # Synthetic "copy the shifted sequence" data: learnable, so the loss curve goes down.
    base = torch.randint(0, cfg.vocab, (bs, cfg.seq + 1), generator=gen)
    return base[:, :-1].contiguous(), base[:, 1:].contiguous()


def demo_gpt(*, vocab: int = 256, seq: int = 32, dim: int = 64, heads: int = 4, n_blocks: int = 4,
             batch_size: int = 8) -> ModelSpec:
    """Small GPT: layer 0 embedding, layers 1..n_blocks transformer blocks, last the LM head."""
    cfg = GPTConfig(vocab=vocab, seq=seq, dim=dim, heads=heads, n_blocks=n_blocks)
    import functools
    return ModelSpec(num_layers=n_blocks + 2, build=functools.partial(_gpt_layer, cfg),
                     loss_fn=lm_loss, batch=functools.partial(_gpt_batch, cfg), batch_size=batch_size,
                     name="demo-gpt", meta={"config": cfg})


def demo_gpt_problem(spec: ModelSpec | None = None, *, ranks: int = 4, microbatches: int = 8) -> Problem:
    """A problem whose layers match ``demo_gpt`` one to one (FLOP-proportional costs, no profiling).

    Units: ms for 1 GFLOP/s-normalised work and MiB; use ``kernel_runtime.profile`` for measured ones.
    """
    spec = spec or demo_gpt()
    cfg = spec.meta.get("config")
    if not isinstance(cfg, GPTConfig):
        raise ModelError(f"{spec.name} is not a demo_gpt spec (no GPTConfig in its meta)")
    tokens = spec.batch_size * cfg.seq / microbatches
    d, v, t = cfg.dim, cfg.vocab, cfg.seq
    blk = tokens * (12 * d * d + 2 * t * d) * 2 / 1e6          # forward MFLOP
    head = tokens * d * v * 2 / 1e6
    emb = tokens * d / 1e6
    mib = 1 / 2 ** 20
    layers = [Layer(f=emb, b=0.0, w=emb, act=tokens * d * 4 * mib, mem=(v + t) * d * 4 * 2 * mib,
                    name="embedding")]
    layers += [Layer(f=blk, b=blk, w=blk, act=tokens * d * 4 * 16 * mib,
                     mem=12 * d * d * 4 * 2 * mib, name=f"block{i}") for i in range(cfg.n_blocks)]
    layers.append(Layer(f=head, b=head, w=head, act=tokens * (d + v) * 4 * mib,
                        mem=d * v * 4 * 2 * mib, name="head"))
    return Problem(ranks=ranks, microbatches=microbatches, layers=tuple(layers), comm=0.0,
                   meta={"model": "demo-gpt", "units": "MFLOP, MiB (not measured)"})
