"""GPU check (``scripts/gpu_check.sh``): correctness on CUDA and a short timed GPT run.

1. Correctness: every library schedule that fits the GPU count runs on CUDA in float64 against the
   single-process CPU reference (max abs gradient difference <= 1e-10). With one GPU the plans
   have one rank and several virtual stages (local hand-offs, CUDA events, device placement);
   with two or more GPUs they have two NCCL ranks.
2. Timed GPT step: a larger demo GPT in float32 on CUDA for a few steps: loss, step time and the
   CUDA-event timeline's makespan beside the simulator's prediction from ``profile`` on the GPU.

Guarded by ``torch.cuda.is_available()``: without a GPU it says so and exits 0 (``--require``: 1).
"""
from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main"]


def _plans(ranks: int, mbs: int, n_layers: int):
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import NAMED, build_named
    from flexpipe_ui.problem import even_partition
    out = {}
    for name in NAMED:
        for chunks in (None, 2, 4):
            try:
                p = build_named(name, None, ranks=ranks, microbatches=mbs, chunks=chunks)
            except ValueError:
                continue
            if 1 < p.schedule.num_stages <= n_layers:
                out[f"{name}/v{p.schedule.num_stages // ranks}"] = Plan(
                    p.schedule, even_partition(n_layers, p.schedule.num_stages), {"name": name})
                break
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernel_runtime.gpu_check")
    ap.add_argument("--require", action="store_true", help="fail (exit 1) when there is no GPU")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: run the same checks on gloo (to test this script without a GPU)")
    ap.add_argument("--small", action="store_true", help="a small GPT for the timed part")
    args = ap.parse_args(argv)
    import numpy as np
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (torch.cuda.is_available() is False): GPU check skipped")
        return 1 if args.require else 0
    dev = args.device
    from flexpipe_ui.sim import simulate

    from .data import reference_run
    from .launcher import launch
    from .models import demo_gpt, demo_gpt_problem
    from .profiler import profile
    n_gpu = torch.cuda.device_count() if dev == "cuda" else 0
    ranks = 2 if (n_gpu >= 2 or dev == "cpu") else 1
    what = torch.cuda.get_device_name(0) if dev == "cuda" else "CPU (gloo)"
    print(f"{n_gpu} GPU(s): {what}; torch {torch.__version__}; correctness with {ranks} rank(s) "
          f"({'one process, local stages' if ranks == 1 else ('NCCL' if dev == 'cuda' else 'gloo')})")
    t = time.time()
    spec = demo_gpt(vocab=64, seq=16, dim=32, heads=2, n_blocks=6, batch_size=8)
    plans = _plans(ranks, 4, spec.num_layers)
    names = list(plans)
    ref = reference_run(spec, steps=2, seed=0, lr=0.05, dtype=torch.float64)
    h = launch([plans[n] for n in names], model=spec, steps=2, devices=dev, dtype="float64",
               capture_grads=True, lr=0.05, timeout=120)
    h.wait(600)
    worst = 0.0
    for ev in h.step_events:
        g = ref.grads[ev.step]
        d = max(float(np.abs(ev.grads[k] - g[k]).max()) for k in g)
        d = max(d, abs(ev.loss - ref.losses[ev.step]))
        worst = max(worst, d)
        if ev.step == 0:
            print(f"  {names[ev.plan_index]:<24} max diff {d:.2e}")
    ok = worst <= 1e-10
    print(f"correctness: {len(names)} plans, max_grad_diff={worst:.3g} ({'ok' if ok else 'FAIL'}) "
          f"[{time.time() - t:.1f} s]")

    t = time.time()
    big = (demo_gpt(vocab=64, seq=16, dim=32, heads=2, n_blocks=6, batch_size=8) if args.small else
           demo_gpt(vocab=4096, seq=256, dim=512, heads=8, n_blocks=6, batch_size=32))
    (plan,) = [p for n, p in _plans(ranks, 8, big.num_layers).items() if n.startswith("1f1b")] or \
        [next(iter(_plans(ranks, 8, big.num_layers).values()))]
    prob = profile(big, ranks=ranks, microbatches=plan.microbatches, device=dev, repeats=5)
    h = launch(plan, model=big, steps=args.steps, devices=dev, dtype="float32", lr=1e-3, timeout=120)
    h.wait(600)
    sim = simulate(plan, prob).makespan
    for ev in h.step_events:
        print(f"  step {ev.step} loss {ev.loss:.4f} step_time {ev.step_time * 1e3:.1f} ms "
              f"makespan({'CUDA events' if dev == 'cuda' else 'perf_counter'}) {ev.timeline.makespan:.1f} ms")
    meas = float(np.median([e.timeline.makespan for e in h.step_events[1:]]))
    print(f"timed GPT: {plan.meta.get('name')} {ranks} rank(s) x {plan.microbatches} microbatches, "
          f"measured makespan {meas:.1f} ms, simulated from the profile {sim:.1f} ms, "
          f"rel.err {abs(meas - sim) / sim:.3f} [{time.time() - t:.1f} s]")
    print(f"cuda_check={'ok' if ok else 'fail'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
