"""Models the runtime executes: a small GPT demo, a sleeping "timed" model, and the model spec type.

A model is an ordered list of layers plus a loss; the plan's partition cuts it into stages. A
``ModelSpec`` builds only the layers a rank needs (each layer seeded by its index, so every rank
and the single-process reference get the same weights) and makes the synthetic batches.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as Fn

from flexpipe_ui.problem import Layer, Problem

__all__ = ["ModelSpec", "GPTConfig", "demo_gpt", "demo_gpt_problem", "timed_model", "SleepLayer",
           "Block", "as_spec", "ModelError"]


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


def _whole_model_spec(layers: Sequence[nn.Module], loss_fn, name: str) -> ModelSpec:
    import copy
    layers = list(layers)
    return ModelSpec(num_layers=len(layers), build=lambda i: copy.deepcopy(layers[i]),
                     loss_fn=loss_fn, name=name)


def as_spec(model: Any, loss_fn=None, *, num_layers: int | None = None, timed=None) -> ModelSpec:
    """Normalise launch's ``model`` argument (None/"demo-gpt"/spec/Sequential/list/factory)."""
    if timed is not None and timed is not False:
        return timed_model(timed, num_layers=num_layers)
    if model is None or model == "demo-gpt":
        spec = demo_gpt(n_blocks=max(1, (num_layers or 6) - 2))
    elif isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, str):
        raise ModelError(f"unknown model {model!r}: use 'demo-gpt', a ModelSpec, an nn.Sequential, "
                         "a list of modules or a factory returning one")
    elif _is_hf_model(model):          # launch() and profile() convert these first (hf.as_model)
        raise ModelError(f"{type(model).__name__} is a Hugging Face model: pass "
                         "kernel_runtime.from_transformers(model)")
    elif isinstance(model, (nn.Sequential, list, tuple, nn.ModuleList)):
        spec = _whole_model_spec(model, loss_fn, "custom")
    elif callable(model):
        built = model()
        if isinstance(built, ModelSpec):
            spec = built
        elif (isinstance(built, tuple) and len(built) == 2 and callable(built[1])
              and not isinstance(built[1], nn.Module)):
            spec = _whole_model_spec(built[0], loss_fn or built[1], getattr(model, "__name__", "custom"))
        else:
            spec = _whole_model_spec(built, loss_fn, getattr(model, "__name__", "custom"))
    else:
        raise ModelError(f"model must be 'demo-gpt', a ModelSpec, layers or a factory, "
                         f"not {type(model).__name__}")
    if loss_fn is not None:
        import dataclasses
        spec = dataclasses.replace(spec, loss_fn=loss_fn)
    if spec.loss_fn is None:
        raise ModelError("a model given as layers needs loss_fn=(output, target) -> scalar loss")
    return spec


def _is_hf_model(model: Any) -> bool:
    """A transformers ``PreTrainedModel`` (checked by name: transformers is optional)."""
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel"
               for c in type(model).__mro__)


# -- the demo GPT -----------------------------------------------------------------------------------
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


# -- the timed model ---------------------------------------------------------------------------------
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
