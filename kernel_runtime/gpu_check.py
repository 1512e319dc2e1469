"""GPU check (``scripts/gpu_check.sh``): correctness on CUDA and a short timed GPT run.

1. Correctness: library schedules on 2 ranks on CUDA in float64 against the single-process
   reference on the same device (max abs gradient difference <= 1e-10): over NCCL with two or more GPUs; with one
   GPU the two processes share it and messages are staged through host memory over gloo (the
   launcher warns that timings are not representative), so every CUDA code path — placement,
   CUDA-event timelines, offload streams — still runs.
2. A Hugging Face Llama (tiny, random weights) on 2 ranks, when transformers is installed.
3. Pipeline x data parallel: 2 ranks x 2 replicas (4 processes; GPUs shared when fewer than 4).
4. Offload/reload (OFF/LOAD on a side CUDA stream) against the reference.
5. Timed GPT step: a larger demo GPT in float32 on CUDA for a few steps: loss, step time and the
   CUDA-event timeline's makespan beside the simulator's prediction from ``profile`` on the GPU.

Guarded by ``torch.cuda.is_available()``: without a GPU it says so and exits 0 (``--require``: 1).
``--device cpu`` runs the same checks on gloo (to test this script without a GPU).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings

__all__ = ["main"]

TOL = 1e-10


def _plans(ranks: int, mbs: int, n_layers: int, names=None):
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import NAMED, build_named
    from flexpipe_ui.problem import even_partition
    out = {}
    for name in names or NAMED:
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


def _against_reference(label: str, spec, plans: dict, dev: str, steps: int = 2, **kw) -> float:
    """Launch ``plans`` (float64) and return the worst loss/gradient difference to the CPU reference."""
    import numpy as np
    import torch

    from .models.data import reference_run
    from .run.launcher import launch
    t = time.time()
    names = list(plans)
    # the reference on the same device: a model's own float32 parts (Hugging Face's rotary
    # embedding computes in float32 whatever the dtype) differ by ~1e-8 between CPU and CUDA kernels
    ref = reference_run(spec, steps=steps, seed=0, lr=0.05, dtype=torch.float64, device=dev)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = launch([plans[n] for n in names], model=spec, steps=steps, devices=dev, dtype="float64",
                   capture_grads=True, lr=0.05, timeout=120, **kw)
    for w in caught:
        print(f"  warning: {w.message}")
    h.wait(600)
    worst = 0.0
    for ev in h.step_events:
        g = ref.grads[ev.step]
        d = max(float(np.abs(ev.grads[k] - g[k]).max()) for k in g)
        d = max(d, abs(ev.loss - ref.losses[ev.step]), ev.replica_grad_diff or 0.0)
        worst = max(worst, d)
        if ev.step == 0:
            print(f"  {names[ev.plan_index]:<24} max diff {d:.2e}")
    print(f"{label}: {len(names)} plan(s), max_grad_diff={worst:.3g} "
          f"({'ok' if worst <= TOL else 'FAIL'}) [{time.time() - t:.1f} s]", flush=True)
    return worst


def _offload_plan(n_layers: int):
    """1F1B on 2 ranks with OFF after each even microbatch's F and LOAD before its B."""
    from flexpipe_ui.ir import Plan, Schedule
    from flexpipe_ui.ops import register_offload
    from flexpipe_ui.problem import even_partition
    from flexpipe_ui.validate import validate
    register_offload()
    base = _plans(2, 4, n_layers, ["1f1b"])
    sched = next(iter(base.values())).schedule
    rows = []
    for row in sched.order:
        out = []
        for a in row:
            even = a.microbatch % 2 == 0
            if a.kind.name in ("B", "I") and even:
                out.append(f"{a.stage}LOAD{a.microbatch}")
            out.append(str(a))
            if a.kind.name == "F" and even:
                out.append(f"{a.stage}OFF{a.microbatch}")
        rows.append(out)
    s = validate(Schedule.from_rows(rows, sched.microbatches, sched.placement))
    return {"1f1b+offload": Plan(s, even_partition(n_layers, s.num_stages), {"name": "1f1b+offload"})}


def _hf_check(dev: str) -> float:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("hf: transformers is not installed: skipped")
        return 0.0
    from .models.hf import from_transformers
    spec = from_transformers("llama", config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                  num_attention_heads=4, num_key_value_heads=2,
                                                  vocab_size=64), seq=8, batch_size=8)
    return _against_reference("hf llama", spec, _plans(2, 4, spec.num_layers, ["1f1b", "zb-v"]), dev, 1)


def _timed(dev: str, ranks: int, small: bool, steps: int) -> None:
    import numpy as np

    from flexpipe_ui.sim import simulate

    from .run.launcher import launch
    from .models import demo_gpt
    from .measure.profiler import profile
    t = time.time()
    big = (demo_gpt(vocab=64, seq=16, dim=32, heads=2, n_blocks=6, batch_size=8) if small else
           demo_gpt(vocab=4096, seq=256, dim=512, heads=8, n_blocks=6, batch_size=32))
    cands = _plans(ranks, 8, big.num_layers) if ranks > 1 else {}
    plan = cands.get("1f1b/v1") or (next(iter(cands.values())) if cands else None)
    if plan is None:                                  # one GPU: one rank, local stages
        from flexpipe_ui.ir import Plan
        from flexpipe_ui.library import build_named
        from flexpipe_ui.problem import even_partition
        p = build_named("interleaved-1f1b", None, ranks=1, microbatches=8, chunks=2)
        plan = Plan(p.schedule, even_partition(big.num_layers, p.schedule.num_stages), {"name": "1 rank, 2 stages"})
    prob = profile(big, ranks=ranks, microbatches=plan.microbatches, device=dev, repeats=5)
    h = launch(plan, model=big, steps=steps, devices=dev, dtype="float32", lr=1e-3, timeout=120)
    h.wait(600)
    sim = simulate(plan, prob).makespan
    for ev in h.step_events:
        print(f"  step {ev.step} loss {ev.loss:.4f} step_time {ev.step_time * 1e3:.1f} ms "
              f"makespan({'CUDA events' if dev == 'cuda' else 'perf_counter'}) {ev.timeline.makespan:.1f} ms")
    meas = float(np.median([e.timeline.makespan for e in h.step_events[1:]] or [h.step_events[0].timeline.makespan]))
    print(f"timed GPT: {plan.meta.get('name')} {plan.ranks} rank(s) x {plan.microbatches} microbatches, "
          f"measured makespan {meas:.1f} ms, simulated from the profile {sim:.1f} ms, "
          f"rel.err {abs(meas - sim) / sim:.3f} [{time.time() - t:.1f} s]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kernel_runtime.gpu_check")
    ap.add_argument("--require", action="store_true", help="fail (exit 1) when there is no GPU")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: run the same checks on gloo (to test this script without a GPU)")
    ap.add_argument("--small", action="store_true", help="a small GPT for the timed part")
    args = ap.parse_args(argv)
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (torch.cuda.is_available() is False): GPU check skipped")
        return 1 if args.require else 0
    dev = args.device
    from .models import demo_gpt
    n_gpu = torch.cuda.device_count() if dev == "cuda" else 0
    what = torch.cuda.get_device_name(0) if dev == "cuda" else "CPU (gloo)"
    how = ("NCCL" if n_gpu >= 2 else "one shared GPU, gloo through host memory") if dev == "cuda" else "gloo"
    print(f"{n_gpu} GPU(s): {what}; torch {torch.__version__}; correctness with 2 ranks ({how})", flush=True)
    spec = demo_gpt(vocab=64, seq=16, dim=32, heads=2, n_blocks=6, batch_size=8)
    worst = _against_reference("correctness", spec, _plans(2, 4, spec.num_layers), dev)
    worst = max(worst, _hf_check(dev))
    small = demo_gpt(vocab=64, seq=8, dim=16, heads=2, n_blocks=2, batch_size=16)
    worst = max(worst, _against_reference("pp x dp (2 x 2)", small, _plans(2, 4, 4, ["1f1b", "zb-v"]), dev,
                                          dp=2))
    worst = max(worst, _against_reference("offload streams", small, _offload_plan(4), dev))
    ok = worst <= TOL
    _timed(dev, 2 if n_gpu >= 2 or dev == "cpu" else 1, args.small, args.steps)
    print(f"cuda_check={'ok' if ok else 'fail'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
