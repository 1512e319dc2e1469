"""``flexpipe train`` and ``flexpipe profile``: the runtime from the command line.

    flexpipe train --model demo-gpt --schedule zb-v --ranks 4 --microbatches 8 --steps 5 --check-reference
    flexpipe train --plan plan.json --steps 3
    flexpipe profile --model demo-gpt --ranks 4 --microbatches 8 -o problem.json
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["register", "schedule_plan"]


def schedule_plan(name: str, ranks: int, microbatches: int, n_layers: int, chunks: int | None = None):
    """A named schedule as a Plan with an even partition: the library's, else torch's importer."""
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.library import NAMED, build_named
    from flexpipe_ui.problem import even_partition
    if name in NAMED:
        plan = build_named(name, None, ranks=ranks, microbatches=microbatches, chunks=chunks)
        sched = plan.schedule
    else:
        from flexpipe_ui.torch_interop import TORCH_SCHEDULES, import_torch_schedule
        if name not in TORCH_SCHEDULES:
            known = sorted(set(NAMED) | set(TORCH_SCHEDULES))
            raise ValueError(f"unknown schedule {name!r}; known: {', '.join(known)}")
        sched = import_torch_schedule(name, ranks, microbatches, chunks)
    if sched.num_stages > n_layers:
        raise ValueError(f"{name} has {sched.num_stages} stages but the model has {n_layers} layers: "
                         f"use --layers {sched.num_stages} or fewer --chunks")
    return Plan(sched, even_partition(n_layers, sched.num_stages), {"name": name})


def _model(args):
    from .models import demo_gpt
    if args.model != "demo-gpt":
        raise ValueError(f"--model {args.model!r}: the CLI runs 'demo-gpt' (use kernel_runtime.launch "
                         "from Python for your own model)")
    return demo_gpt(n_blocks=args.layers - 2, dim=args.dim, seq=args.seq, batch_size=args.batch_size)


def _train(args) -> int:
    import numpy as np

    from flexpipe_ui.planfile import load_plan

    from .data import reference_run
    from .launcher import launch
    if (args.schedule is None) == (args.plan is None):
        raise ValueError("give exactly one of --schedule NAME or --plan PLAN")
    if args.plan:
        plan = load_plan(args.plan)
        if args.ranks is not None and args.ranks != plan.ranks:
            raise ValueError(f"--ranks {args.ranks} but the plan has {plan.ranks} ranks")
        if args.layers is None:
            args.layers = plan.num_layers or max(6, plan.schedule.num_stages)
    else:
        if args.ranks is None:
            raise ValueError("--schedule needs --ranks P")
        m = args.microbatches or 2 * args.ranks
        if args.layers is None:
            S = args.ranks * (args.chunks or (2 if args.schedule in ("zb-v", "dualpipe-v", "interleaved-1f1b",
                                                                     "looped-bfs", "interleaved-zb") else 1))
            args.layers = max(6, S)
        plan = schedule_plan(args.schedule, args.ranks, m, args.layers, args.chunks)
    if args.batch_size % plan.microbatches:
        args.batch_size = plan.microbatches * max(1, args.batch_size // plan.microbatches)
    spec = None if args.timed else _model(args)
    check = args.check_reference
    dtype = "float64" if check else args.dtype
    name = plan.meta.get("name", args.plan or args.schedule)
    print(f"{name}: {plan.ranks} ranks, {plan.microbatches} microbatches, {plan.schedule.num_stages} stages, "
          f"{args.steps} steps on {args.devices} ({dtype})", flush=True)
    from flexpipe_ui.progress import heartbeat
    with heartbeat(f"starting {plan.ranks} worker processes"):
        h = launch(plan, model=spec, steps=args.steps, devices=args.devices, lr=args.lr, seed=args.seed,
                   dtype=dtype, capture_grads=check, timeout=args.timeout,
                   timed=args.timed if args.timed else False)
    try:
        for ev in _follow(h, plan.ranks):
            loss = "n/a" if ev.loss is None else f"{ev.loss:.6f}"
            print(f"step {ev.step} loss {loss} step_time {ev.step_time:.4f} s "
                  f"makespan {ev.timeline.makespan:.2f} ms", flush=True)
    except KeyboardInterrupt:
        h.stop()
        return 130
    except Exception as e:
        h.stop()
        print(f"flexpipe train: worker error: {e}", file=sys.stderr)
        return 1
    if check:
        import torch
        ref = reference_run(spec, steps=args.steps, seed=args.seed, lr=args.lr, dtype=torch.float64)
        diff, ldiff = 0.0, 0.0
        for ev in h.step_events:
            g, rg = ev.grads, ref.grads[ev.step]
            if set(g) != set(rg):
                raise ValueError(f"parameter sets differ: {sorted(set(g) ^ set(rg))[:4]}")
            diff = max(diff, max(float(np.abs(g[k] - rg[k]).max()) for k in g))
            ldiff = max(ldiff, abs(ev.loss - ref.losses[ev.step]))
        print(f"reference losses {' '.join(f'{x:.6f}' for x in ref.losses)}; max_loss_diff={ldiff:.3g}")
        print(f"max_grad_diff={diff:.3g}")
    return 0


def _follow(h, world: int, every: float = 2.0):
    """``h``'s step events; until the first arrives, a progress line on stderr every ``every`` seconds
    (how many workers joined; workers import torch and meet in the process group first)."""
    import time
    t0 = last = time.monotonic()
    seen = False
    while True:
        ev = h.poll(0.2)
        if ev is not None:
            seen = True
            yield ev
            continue
        if h.done:
            ev = h.poll(0.0)
            while ev is not None:
                yield ev
                ev = h.poll(0.0)
            break
        now = time.monotonic()
        if not seen and now - last >= every:
            last = now
            print(f"  workers ready {len(h.hosts)}/{world}, waiting for step 0... {now - t0:.0f} s",
                  file=sys.stderr, flush=True)
    if h.error is not None:
        raise h.error


def _profile(args) -> int:
    from .profiler import profile
    args.layers = args.layers or 6
    spec = _model(args)
    import os
    threads = max(1, (os.cpu_count() or 1) // args.ranks) if args.devices == "cpu" else None
    prob = profile(spec, ranks=args.ranks, microbatches=args.microbatches, device=args.devices,
                   dtype=args.dtype, repeats=args.repeats, path=args.output, threads=threads)
    for i, l in enumerate(prob.layers):
        print(f"layer {i:>2} {l.name:<12} f {l.f:8.3f} b {l.b:8.3f} w {l.w:8.3f} ms  act {l.act:8.3f} "
              f"mem {l.mem:8.3f} MiB")
    print(f"wrote {args.output}" if args.output else "(no -o: not written)")
    return 0


def _common(p) -> None:
    p.add_argument("--model", default="demo-gpt", help="model (the CLI runs demo-gpt)")
    p.add_argument("--layers", type=int, default=None, help="demo-gpt layers (embedding + blocks + head)")
    p.add_argument("--dim", type=int, default=64, help="demo-gpt width")
    p.add_argument("--seq", type=int, default=32, help="demo-gpt sequence length")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument("--devices", default="cpu", help="cpu (gloo) or cuda (NCCL)")
    p.add_argument("--dtype", default="float32")


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a model with a plan on torch.distributed workers",
                              description="Run a plan on one process per rank (gloo on CPU, NCCL on GPUs).")
    _common(p)
    p.add_argument("--schedule", help="named schedule (flexpipe plan --list)")
    p.add_argument("--plan", help="a flexpipe-plan/1 file")
    p.add_argument("--ranks", type=int, help="pipeline ranks (processes)")
    p.add_argument("--microbatches", type=int, help="microbatches per step (default 2 x ranks)")
    p.add_argument("--chunks", type=int, help="stages per rank for interleaved schedules")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a receive may wait")
    p.add_argument("--timed", type=float, default=None, metavar="MS",
                   help="run the sleeping model instead: each layer's F, I and W take MS ms")
    p.add_argument("--check-reference", action="store_true",
                   help="float64, and compare with a single-process step; last line max_grad_diff=<x>")
    p.set_defaults(func=_train)

    q = subparsers.add_parser("profile", help="measure per-layer costs into a flexpipe-problem/1",
                              description="Time f, b (input grad), w (weight grad) and memory per layer.")
    _common(q)
    q.add_argument("--ranks", type=int, default=4)
    q.add_argument("--microbatches", type=int, default=8)
    q.add_argument("--repeats", type=int, default=5)
    q.add_argument("-o", "--output", help="problem file to write")
    q.set_defaults(func=_profile)

