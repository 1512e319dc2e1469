"""How repeatable is a profile, and how noisy is the machine it runs on?

1. Machine noise: two processes (one per core, one torch thread each, as the profiler's workers)
   time a fixed 384x384 matmul for ``--noise-seconds``; the largest deviation of a 2-second median
   from the median of all of them.
2. Profile repeatability: ``--profiles`` profiles of the demo GPT with a heavy head (bench_truth's
   model) in a row, each afresh in worker processes; per 1F1B stage, Σ f + b + w, and the largest
   deviation of a profile's stage total from the median over the profiles (target 5%).

    python benchmarks/bench_profile_repeat.py [--profiles 3] [--repeats 21] [--noise-seconds 30]

Last line: ``profile_repeatability=<x> machine_noise=<y>`` (fractions).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _matmuls(q, seconds: float, start: float) -> None:
    import torch
    torch.set_num_threads(1)
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    while time.time() < start:
        time.sleep(0.01)
    meds = []
    while time.time() - start < seconds:
        xs, s = [], time.time()
        while time.time() - s < 2.0:
            t = time.perf_counter()
            for _ in range(10):
                a @ b
            xs.append((time.perf_counter() - t) * 1e3)
        meds.append(statistics.median(xs))
    q.put(meds)


def machine_noise(seconds: float) -> tuple[float, list[list[float]]]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = time.time() + 2.0
    procs = [ctx.Process(target=_matmuls, args=(q, seconds, start)) for _ in range(2)]
    for p in procs:
        p.start()
    res = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    worst = 0.0
    for meds in res:
        m = statistics.median(meds)
        worst = max(worst, max(abs(x - m) / m for x in meds))
    return worst, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--noise-seconds", type=float, default=30.0)
    ap.add_argument("--small", action="store_true", help="tiny model (smoke test)")
    args = ap.parse_args(argv)
    from bench_truth import models
    from flexpipe_ui.library import build_named
    from kernel_runtime.measure.profiler import profile

    noise, res = machine_noise(args.noise_seconds)
    for i, meds in enumerate(res):
        print(f"machine: worker {i} matmul 2-s medians (ms) {[round(x, 2) for x in meds]}")
    print(f"machine noise: largest deviation of a 2-s median from the median {noise:.1%}")
    spec = models(args.small)["gpt-heavy-head"]
    totals = []
    for k in range(args.profiles):
        t = time.perf_counter()
        p = profile(spec, ranks=2, microbatches=8, repeats=args.repeats)
        part = build_named("1f1b", p).partition
        st = [sum(p.layers[i].f + p.layers[i].b + p.layers[i].w for i in lay) for lay in part]
        totals.append(st)
        print(f"profile {k + 1}: {time.perf_counter() - t:.1f} s, 1F1B stage totals (ms) "
              f"{[round(x, 2) for x in st]}, overhead F {p.overhead['F']:.3f} ms")
    worst = 0.0
    for s in range(len(totals[0])):
        xs = [t[s] for t in totals]
        m = statistics.median(xs)
        dev = max(abs(x - m) / m for x in xs)
        worst = max(worst, dev)
        print(f"stage {s}: median {m:.2f} ms, largest deviation {dev:.1%}")
    print(f"profile_repeatability={worst:.4f} machine_noise={noise:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
