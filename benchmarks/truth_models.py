"""The model families of ``bench_truth``: each built through the code path a user calls.

- ``gpt-heavy-head``: ``kernel_runtime.demo_gpt`` (fixed shape: the model the cost model's terms
  were first found on);
- ``mlp-uneven``: ``kernel_runtime.models.mlp.mlp_chain`` (fixed shape, the second such model);
- ``llama-hf``: a Hugging Face Llama from a config (``kernel_runtime.from_transformers``);
- ``conv-transformer``: a plain ``nn.Module`` (a conv stem feeding transformer encoder layers and a
  classifier) cut with ``kernel_runtime.split_module``;
- ``recsys-heavy-tail``: an embedding-heavy recommender cut with ``split_module``: a very cheap
  first stage (table lookups on ids) and a very expensive last (scoring every item).

The last three are drawn per run from a seeded random generator: widths, depths, vocabularies,
microbatch count and rank count (2 to min(4, cores): on fewer cores than ranks the workers would
time-share a core, which no pipeline runs on). The draw is printed (``describe``). Every batch is
scaled to a work budget so that a step lasts ~0.1-0.4 s on two idle CPU cores, long enough to
time, short enough for many passes.
"""
from __future__ import annotations

import functools
import math
import os
import random
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as Fn

__all__ = ["Family", "families", "FAMILIES", "describe", "fixed_models", "library_plans", "LIBRARY"]

LIBRARY = ("1f1b", "zb-h1", "interleaved-1f1b", "zb-v")
"""The library plans every family runs beside auto's."""

FAMILIES = ("gpt-heavy-head", "mlp-uneven", "llama-hf", "conv-transformer", "recsys-heavy-tail")

# multiply-adds (forward) per step a drawn model is scaled to: ~0.2-0.3 s a step on two idle cores
_BUDGET = 4.0e9


@dataclass
class Family:
    """One benchmark model: its spec, the pipeline shape it runs at, and what was drawn."""

    name: str
    spec: Any
    ranks: int
    microbatches: int
    drawn: dict = field(default_factory=dict)


def describe(fam: Family) -> str:
    shape = ", ".join(f"{k}={v}" for k, v in fam.drawn.items())
    return f"{fam.name}: {fam.ranks} ranks x {fam.microbatches} microbatches, {fam.spec.num_layers} layers ({shape})"


# ---------------------------------------------------------------- conv stem + transformer (split_module)

class _Tokens(nn.Module):
    """(B, C, H, W) feature map → (B, H·W, C) tokens."""

    def forward(self, x):
        return x.flatten(2).transpose(1, 2)


class _Pool(nn.Module):
    """Mean over tokens, then the classifier."""

    def __init__(self, dim: int, classes: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x):
        return self.fc(self.norm(x).mean(dim=1))


class ConvTransformer(nn.Module):
    """A plain model a user might bring: conv stem (each conv halves the resolution), a projection
    to tokens, transformer encoder layers, pooled classifier."""

    def __init__(self, channels: tuple, dim: int, heads: int, depth: int, ff: int, classes: int):
        super().__init__()
        chans = (3,) + tuple(channels)
        self.stem = nn.ModuleList(
            nn.Sequential(nn.Conv2d(a, b, 3, stride=2 if i else 1, padding=1), nn.BatchNorm2d(b), nn.GELU())
            for i, (a, b) in enumerate(zip(chans[:-1], chans[1:])))
        self.proj = nn.Sequential(nn.Conv2d(chans[-1], dim, 2, stride=2), _Tokens())
        self.blocks = nn.ModuleList(nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, batch_first=True,
                                                               norm_first=True) for _ in range(depth))
        self.head = _Pool(dim, classes)


def _image_batch(size: int, classes: int, step: int, bs: int, gen: torch.Generator):
    return torch.randn(bs, 3, size, size, generator=gen), torch.randint(0, classes, (bs,), generator=gen)


def _ce(logits, target):
    return Fn.cross_entropy(logits, target)


def _conv_transformer(rng: random.Random, ranks: int, small: bool = False):
    from kernel_runtime import split_module
    size = rng.choice((8,) if small else (16, 24, 32))
    n_conv = rng.choice((2, 3))
    channels = tuple(rng.choice((4, 8) if small else (16, 24, 32, 48)) * (2 ** i) for i in range(n_conv))
    dim = rng.choice((16, 32) if small else (96, 128, 160, 192))
    heads = rng.choice([h for h in (2, 4, 8) if dim % h == 0])
    depth = rng.randint(3, 6)
    ff = dim * rng.choice((2, 3, 4))
    classes = rng.choice((10, 50) if small else (100, 1000, 4000))
    # work per sample (multiply-adds): convs at their resolution, tokens through the blocks, head
    res, macs = size, 0
    chans = (3,) + channels
    for i in range(n_conv):
        res = res if i == 0 else (res + 1) // 2
        macs += res * res * chans[i] * chans[i + 1] * 9
    tokens = (res // 2) ** 2
    macs += tokens * chans[-1] * dim * 4
    macs += depth * tokens * (4 * dim * dim + 2 * dim * ff + 2 * tokens * dim)
    macs += dim * classes
    bs = _batch_for(macs, lo=32, hi=1024, multiple=16)
    factory = functools.partial(ConvTransformer, channels, dim, heads, depth, ff, classes)
    layers = [f"stem.{i}" for i in range(n_conv)] + ["proj"] + [f"blocks.{i}" for i in range(depth)] + ["head"]
    spec = split_module(factory, layers, _ce, batch=functools.partial(_image_batch, size, classes),
                        batch_size=bs, name="conv-transformer")
    drawn = dict(image=size, channels=channels, dim=dim, heads=heads, depth=depth, ff=ff, classes=classes,
                 batch=bs)
    return spec, drawn


# ---------------------------------------------------------------- recommender (split_module)

class _Lookup(nn.Module):
    """Categorical features → concatenated embeddings (the cheap, memory-heavy first layer)."""

    def __init__(self, rows: tuple, dim: int):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(r, dim) for r in rows)

    def forward(self, ids):
        return torch.cat([t(ids[:, i]) for i, t in enumerate(self.tables)], dim=1)


class _Dense(nn.Module):
    def __init__(self, a: int, b: int):
        super().__init__()
        self.lin = nn.Linear(a, b)

    def forward(self, x):
        return Fn.relu(self.lin(x))


class Recommender(nn.Module):
    """Embedding tables, an MLP tower, and a last layer that scores every item (very expensive)."""

    def __init__(self, rows: tuple, dim: int, tower: tuple, items: int):
        super().__init__()
        self.lookup = _Lookup(rows, dim)
        widths = (len(rows) * dim,) + tuple(tower)
        self.tower = nn.ModuleList(_Dense(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.score = nn.Linear(widths[-1], items)


def _ids_batch(rows: tuple, items: int, step: int, bs: int, gen: torch.Generator):
    ids = torch.stack([torch.randint(0, r, (bs,), generator=gen) for r in rows], dim=1)
    return ids, torch.randint(0, items, (bs,), generator=gen)


def _recsys(rng: random.Random, ranks: int, small: bool = False):
    from kernel_runtime import split_module
    tables = rng.randint(4, 8)
    rows = tuple(rng.choice((200, 500) if small else (20_000, 50_000, 100_000)) for _ in range(tables))
    dim = rng.choice((4, 8) if small else (16, 32, 64))
    depth = rng.randint(3, 6)
    tower = tuple(rng.choice((16, 32) if small else (256, 384, 512, 768)) for _ in range(depth))
    items = rng.choice((100, 300) if small else (20_000, 40_000, 60_000))
    macs = sum(a * b for a, b in zip((tables * dim,) + tower[:-1], tower)) + tower[-1] * items
    bs = _batch_for(macs, lo=64, hi=2048, multiple=16)
    factory = functools.partial(Recommender, rows, dim, tower, items)
    layers = ["lookup"] + [f"tower.{i}" for i in range(depth)] + ["score"]
    spec = split_module(factory, layers, _ce, batch=functools.partial(_ids_batch, rows, items),
                        batch_size=bs, name="recsys")
    return spec, dict(tables=tables, rows=rows, dim=dim, tower=tower, items=items, batch=bs)


# ---------------------------------------------------------------- Hugging Face Llama (from_transformers)

def _llama(rng: random.Random, ranks: int, small: bool = False):
    from kernel_runtime import from_transformers
    hidden = rng.choice((32, 64) if small else (128, 160, 192, 256))
    heads = rng.choice([h for h in (2, 4, 8) if hidden % h == 0 and (hidden // h) % 2 == 0])
    kv = rng.choice([k for k in (1, 2, heads) if heads % k == 0])
    inter = 32 * round(hidden * rng.choice((2.5, 3.0, 4.0)) / 32)
    n = rng.randint(4, 8)
    vocab = rng.choice((128, 256) if small else (4096, 8192, 16384))
    seq = rng.choice((8,) if small else (32, 64))
    per_token = n * (hidden * hidden * (2 + 2 * kv / heads) + 3 * hidden * inter + 2 * seq * hidden) + hidden * vocab
    bs = _batch_for(per_token * seq, lo=4, hi=128, multiple=4)
    cfg = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=n, num_attention_heads=heads,
               num_key_value_heads=kv, vocab_size=vocab, max_position_embeddings=max(128, seq))
    spec = from_transformers("llama", config=cfg, seq=seq, batch_size=bs)
    return spec, dict(hidden=hidden, heads=heads, kv_heads=kv, intermediate=inter, layers=n, vocab=vocab,
                      seq=seq, batch=bs)


def _batch_for(macs_per_sample: float, *, lo: int, hi: int, multiple: int) -> int:
    bs = _BUDGET / max(macs_per_sample, 1.0)
    return int(min(hi, max(lo, multiple * round(bs / multiple))))


def _ranks(rng: random.Random) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    return rng.randint(2, max(2, min(4, cores)))


def _microbatches(rng: random.Random, ranks: int) -> int:
    return ranks * rng.choice((2, 3, 4))


def families(seed: int, small: bool = False, only: tuple[str, ...] | None = None) -> list[Family]:
    """The benchmark's families; the drawn ones from ``random.Random(seed)`` (one stream per family,
    so dropping a family does not change the others' draw). ``small``: tiny shapes (tests)."""
    from kernel_runtime.models.mlp import mlp_chain
    from kernel_runtime.models import demo_gpt
    out = []
    for name in FAMILIES:
        if only and name not in only:
            continue
        rng = random.Random(f"{seed}:{name}")
        if name == "gpt-heavy-head":
            spec = (demo_gpt(vocab=512, seq=16, dim=32, heads=2, n_blocks=6, batch_size=16) if small else
                    demo_gpt(vocab=8192, seq=64, dim=192, heads=4, n_blocks=6, batch_size=16))
            out.append(Family(name, spec, 2, 8, dict(fixed=True)))
        elif name == "mlp-uneven":
            spec = (mlp_chain((64, 128, 32, 256, 64, 128, 48, 96), classes=2048, batch_size=64) if small
                    else mlp_chain(batch_size=256))
            out.append(Family(name, spec, 2, 8, dict(fixed=True)))
        else:
            ranks = _ranks(rng)
            mbs = _microbatches(rng, ranks)
            build = {"llama-hf": _llama, "conv-transformer": _conv_transformer, "recsys-heavy-tail": _recsys}[name]
            spec, drawn = build(rng, ranks, small)
            if spec.num_layers < 2 * ranks:          # interleaved and V plans need two stages a rank
                ranks = max(2, spec.num_layers // 2)
                mbs = _microbatches(rng, ranks)
            if small:
                spec.batch_size = max(mbs, min(spec.batch_size, 2 * mbs))
                drawn["batch"] = spec.batch_size
            if spec.batch_size % mbs:
                spec.batch_size = mbs * math.ceil(spec.batch_size / mbs)
                drawn["batch"] = spec.batch_size
            out.append(Family(name, spec, ranks, mbs, drawn))
    return out


def fixed_models(small: bool = False) -> dict:
    """The two fixed-shape families' specs by name (the diagnostics' models)."""
    return {f.name: f.spec for f in families(0, small=small, only=("gpt-heavy-head", "mlp-uneven"))}


def library_plans(problem) -> dict:
    """``LIBRARY``'s plans for ``problem`` (even partitions, as a user gets them)."""
    from flexpipe_ui.library import build_named
    return {name: build_named(name, problem) for name in LIBRARY}
