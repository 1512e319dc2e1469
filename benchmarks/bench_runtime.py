"""Step time of our runtime vs torch.distributed.pipelining's on the same plan (2 ranks, CPU/gloo).

For 1F1B, ZB-H1 and ZB-V (the library's schedules) on the demo GPT (float32), the plan is
exported to torch's CSV and run by its ``_PipelineScheduleRuntime`` in the same processes as ours,
steps alternating between the two (``kernel_runtime.run.peer.compare``); step 0 checks that both give
the same loss and gradients, the next ``--reps`` steps are timed (slowest rank, median).

    .venv/bin/python benchmarks/bench_runtime.py [--reps 10] [--dim 128]

Last line: ``ratio_vs_torch=<x>``: the median over repetitions of ours / torch's step time (the
two run back to back, so load from other processes on the shared cores cancels), the worst of the
schedules (target <= 1.0). The ms columns are medians and are noisy on a shared machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--schedules", default="1f1b,zb-h1,zb-v")
    args = ap.parse_args(argv)
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import build_named
    from flexpipe_ui.problem import even_partition

    from kernel_runtime.models import demo_gpt
    from kernel_runtime.run.peer import compare

    spec = demo_gpt(vocab=256, seq=args.seq, dim=args.dim, heads=4, n_blocks=args.blocks,
                    batch_size=4 * args.microbatches)
    print(f"demo GPT: {spec.num_layers} layers, dim {args.dim}, seq {args.seq}, batch {spec.batch_size}, "
          f"2 ranks x {args.microbatches} microbatches, float32, gloo, {args.reps} timed steps")
    print(f"{'schedule':<8} {'ours ms':>9} {'torch ms':>9} {'ratio':>7} {'loss diff':>10} {'grad diff':>10}")
    worst = 0.0
    for name in args.schedules.split(","):
        sched = build_named(name, None, ranks=2, microbatches=args.microbatches).schedule
        plan = Plan(sched, even_partition(spec.num_layers, sched.num_stages), {"name": name})
        r = compare(plan, spec, reps=args.reps)
        o, t = statistics.median(r.ours_times) * 1e3, statistics.median(r.torch_times) * 1e3
        worst = max(worst, r.ratio)
        print(f"{name:<8} {o:>9.2f} {t:>9.2f} {r.ratio:>7.3f} {abs(r.ours_loss - r.torch_loss):>10.2e} "
              f"{r.max_grad_diff:>10.2e}")
    print(f"ratio_vs_torch={worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
