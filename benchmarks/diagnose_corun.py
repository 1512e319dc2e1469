"""Do two ranks' stages slow each other down when they compute at the same time, without the runtime?

Two pinned processes (one core each, one thread, freed memory kept as workers keep it) run a
family's stage ``--a`` and stage ``--b`` (layer indices) GPipe-like: ``--inflight`` forwards held
alive, then their backwards, several repetitions; first each alone, then both at once behind a
barrier. Prints each forward's and backward's median ms by its position in the run, so a slowdown
from co-running (shared memory bandwidth) or from the activations held (footprint) shows apart
from anything the pipelined runtime adds (communication, hooks). ``diagnose_gaps`` shows the
runtime's side.

    python benchmarks/diagnose_corun.py [--family conv-transformer] [--a 0,1] [--b 2,3] [--inflight 8]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)


def _work(family, seed, which, cpu, barrier, q, inflight, reps):
    import torch
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [cpu % os.cpu_count()])
    torch.set_num_threads(1)
    from kernel_runtime.run.allocator import keep_freed_memory
    from truth_models import families
    keep_freed_memory()
    fam = families(seed, only=(family,))[0]
    layers = fam.spec.layers(range(fam.spec.num_layers), seed=0)
    stage = torch.nn.Sequential(*[layers[i] for i in which])
    x, _ = fam.spec.batch(0, fam.spec.batch_size // fam.microbatches, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for i in range(which[0]):
            x = layers[i](x)
    x = x.detach().requires_grad_(x.is_floating_point() and which[0] > 0)
    F = [[] for _ in range(inflight)]
    B = [[] for _ in range(inflight)]
    for _ in range(reps):
        if barrier is not None:
            barrier.wait()
        ys = []
        for i in range(inflight):
            t = time.perf_counter()
            ys.append(stage(x.clone() if x.is_floating_point() else x))
            F[i].append((time.perf_counter() - t) * 1e3)
        for i in range(inflight):
            y = ys[i]
            t = time.perf_counter()
            y.backward(torch.ones_like(y) * 1e-3)
            B[i].append((time.perf_counter() - t) * 1e3)
        ys = None
    fmt = lambda v: " ".join(f"{statistics.median(s[1:]):.1f}" for s in v)
    q.put((which, f"F {fmt(F)} | B {fmt(B)}"))


def main(argv=None) -> int:
    import multiprocessing as mp
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="conv-transformer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--a", default="0,1")
    ap.add_argument("--b", default="2,3")
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--reps", type=int, default=6)
    args = ap.parse_args(argv)
    a, b = [int(v) for v in args.a.split(",")], [int(v) for v in args.b.split(",")]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    for label, jobs in (("alone", [(a, 0)]), ("alone", [(b, 1)]), ("together", [(a, 0), (b, 1)])):
        bar = ctx.Barrier(len(jobs))
        ps = [ctx.Process(target=_work, args=(args.family, args.seed, w, c, bar, q, args.inflight, args.reps))
              for w, c in jobs]
        for p in ps:
            p.start()
        got = [q.get() for _ in ps]
        for p in ps:
            p.join()
        for which, line in sorted(got):
            print(f"{label:<9} layers {','.join(map(str, which)):<6} {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
