"""A model outside bench_truth's families, tried as a new user would: an MLP-Mixer (token-mixing
and channel-mixing MLPs over image patches, one block twice as wide, a 1000-class head), cut with
``split_module``, profiled, planned by ``auto`` and the library, measured; the same rounds and
figures as ``bench_truth`` (its ``one_round``), so the error is read the same way.

    python benchmarks/newuser_mixer.py [--rounds 3] [--ranks 2] [--microbatches 8]

Last line: ``max_rel_error=<x> auto_vs_best=<x> predicted_fastest_gap=<x>``.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, tok_hidden: int, ch_hidden: int):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, tok_hidden), nn.GELU(), nn.Linear(tok_hidden, tokens))
        self.ch = nn.Sequential(nn.Linear(dim, ch_hidden), nn.GELU(), nn.Linear(ch_hidden, dim))

    def forward(self, x):                                   # x: (batch, tokens, dim)
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.n2(x))


class Patches(nn.Module):
    def __init__(self, patch: int, dim: int):
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(3 * patch * patch, dim)

    def forward(self, img):                                 # (batch, 3, H, W) → (batch, tokens, dim)
        p = self.patch
        b, c, h, w = img.shape
        x = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)
        return self.proj(x)


class Head(nn.Module):
    def __init__(self, dim: int, classes: int):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        return self.fc(self.norm(x).mean(1))


class Mixer(nn.Module):
    def __init__(self, image=32, patch=4, dim=192, depth=6, classes=1000, wide=3):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patches = Patches(patch, dim)
        self.blocks = nn.ModuleList(
            MixerBlock(tokens, dim, tokens * (4 if i == wide else 2), dim * (8 if i == wide else 4))
            for i in range(depth))
        self.head = Head(dim, classes)

    def forward(self, img):
        x = self.patches(img)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _batch(image: int, classes: int, step: int, bs: int, gen: torch.Generator):
    return torch.randn(bs, 3, image, image, generator=gen), torch.randint(0, classes, (bs,), generator=gen)


def _ce(logits, target):
    return nn.functional.cross_entropy(logits, target)


def mixer_spec(depth: int = 6, batch_size: int = 128):
    from kernel_runtime import split_module
    factory = functools.partial(Mixer, 32, 4, 192, depth, 1000, depth // 2)
    layers = ["patches"] + [f"blocks.{i}" for i in range(depth)] + ["head"]
    return split_module(factory, layers, _ce, batch=functools.partial(_batch, 32, 1000),
                        batch_size=batch_size, name="mlp-mixer")


def mixer_family(ranks: int = 2, microbatches: int = 8, batch_size: int = 128):
    """The mixer as a ``truth_models.Family`` (what ``bench_truth.one_round`` and ``diagnose_gaps`` take)."""
    from truth_models import Family
    return Family("mlp-mixer", mixer_spec(batch_size=batch_size), ranks, microbatches, dict(new_user=True))


def main(argv=None) -> int:
    import bench_truth as bt
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--bracket", action="store_true", help="profile again after the runs (bench_truth)")
    a = ap.parse_args(argv)
    fam = mixer_family(a.ranks, a.microbatches, a.batch)
    log = lambda s: print(s, flush=True)
    rounds = []
    for k in range(a.rounds):
        r = bt.one_round(fam, steps=a.steps, passes=a.passes, devices="cpu", time_limit=10.0, log=log,
                         bracket=a.bracket)
        rounds.append(r)
        plans = {p: v for p, v in r.items() if not p.startswith("_")}
        log(f"round {k + 1}: " + "; ".join(
            f"{p} pred {v['pred']:.1f} meas {v['meas']:.1f} ms ({v['err']:+.1%}) MiB pred {v['pred_mem']:.1f} "
            f"meas {v['meas_mem']:.1f}" for p, v in plans.items()))
        if a.bracket:
            log(f"round {k + 1} error by profile: " + "; ".join(
                f"{p} {bt.errs_text(v)}" for p, v in plans.items()))
    worst = [max(abs(v["err"]) for p, v in r.items() if not p.startswith("_")) for r in rounds]
    med = sorted(range(len(rounds)), key=lambda i: worst[i])[len(rounds) // 2]
    ratios = [bt.round_ratios(r) for r in rounds]
    mem = max(v["mem_err"] for r in rounds for p, v in r.items() if not p.startswith("_"))
    log(f"per round worst error {[f'{w:.3f}' for w in worst]}; predicted fastest {[q['pred_fastest'] for q in ratios]}, "
        f"measured fastest {[q['fastest'] for q in ratios]}; auto vs best library "
        f"{[round(q['vs_best'], 3) for q in ratios]}; auto vs 1F1B {[round(q['vs_1f1b'], 3) for q in ratios]}; "
        f"worst memory error {mem:.3f}")
    print(f"max_rel_error={worst[med]:.4f} auto_vs_best={statistics.median(q['vs_best'] for q in ratios):.4f} "
          f"predicted_fastest_gap={statistics.median(q['gap'] for q in ratios):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
