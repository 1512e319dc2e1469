"""``flexpipe train``, ``flexpipe profile`` and ``flexpipe tune``: the runtime from the command line.

    flexpipe train --model demo-gpt --schedule zb-v --ranks 4 --microbatches 8 --steps 5 --check-reference
    flexpipe train --plan plan.json --steps 3
    flexpipe train --model hf:llama --model-config '{"hidden_size": 64, "num_hidden_layers": 4}' ...
    flexpipe train --model mypkg.models:build --schedule 1f1b --ranks 2 --dp 2
    flexpipe profile --model demo-gpt --ranks 4 --microbatches 8 -o problem.json
    flexpipe tune --model demo-gpt --ranks 2 --microbatches 8 -o plan.json --write-problem fitted.json

``--model``: ``demo-gpt``; ``hf:<model type>`` (llama, qwen2, qwen3, mistral, gpt2; random weights
from ``--model-config`` JSON, nothing downloaded); or ``package.module:factory``, a zero-argument
function returning a ``ModelSpec`` (e.g. from ``kernel_runtime.split_module``) or ``(layers, loss)``.
"""
from __future__ import annotations

import argparse
import sys

from flexpipe_ui import cli_types as T

__all__ = ["register", "schedule_plan"]

DTYPES = ("float32", "float64", "bfloat16", "float16")
"""What ``--dtype`` accepts (the workers' ``_dtype`` table)."""


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
    from ..models.model_arg import resolve_model
    return resolve_model(args)


DEMO_HEADS = 4
"""demo-gpt's attention heads (``models.GPTConfig.heads``' default): ``--dim`` must be a multiple."""


def _check_model_flags(args) -> None:
    """Refuse model flags the workers would refuse, before torch is even imported."""
    if args.model == "demo-gpt" and args.dim % DEMO_HEADS:
        raise ValueError(f"--dim {args.dim}: demo_gpt dim {args.dim} is not a multiple of heads {DEMO_HEADS} "
                         f"(attention splits the width evenly); use e.g. --dim "
                         f"{DEMO_HEADS * max(1, args.dim // DEMO_HEADS)}")


def _train(args) -> int:
    if (args.schedule is None) == (args.plan is None):
        raise ValueError("give exactly one of --schedule NAME or --plan PLAN")
    _check_model_flags(args)
    import numpy as np

    from flexpipe_ui.planfile import load_plan

    from ..models.data import reference_run
    from ..run.launcher import launch
    if args.dp < 1:
        raise ValueError(f"--dp must be >= 1, got {args.dp}")
    args.layers_given = args.layers is not None
    plan = None
    if args.plan:
        plan = load_plan(args.plan)
        from flexpipe_ui.validate import validate
        validate(plan.schedule)                 # before anything is printed or started
        if args.ranks is not None and args.ranks != plan.ranks:
            raise ValueError(f"--ranks {args.ranks} but the plan has {plan.ranks} ranks")
        if args.layers is None:
            args.layers = plan.num_layers or max(6, plan.schedule.num_stages)
        m = plan.microbatches
    else:
        if args.ranks is None:
            raise ValueError("--schedule needs --ranks P")
        m = args.microbatches or 2 * args.ranks
        from flexpipe_ui.limits import check_plan_size
        check_plan_size(args.ranks * (args.chunks or 2), m)
        if args.layers is None:
            S = args.ranks * (args.chunks or (2 if args.schedule in ("zb-v", "dualpipe-v", "interleaved-1f1b",
                                                                     "looped-bfs", "interleaved-zb") else 1))
            args.layers = max(6, S)
    unit = m * args.dp                   # every replica's share splits into the microbatches
    if args.batch_size % unit:
        args.batch_size = unit * max(1, args.batch_size // unit)
    spec, sendable = (None, None) if args.timed else _model(args)
    if plan is None:
        plan = schedule_plan(args.schedule, args.ranks, m, spec.num_layers if spec else args.layers,
                             args.chunks)
    check = args.check_reference
    dtype = "float64" if check else args.dtype
    name = plan.meta.get("name", args.plan or args.schedule)
    dp = f" x {args.dp} data-parallel replicas ({plan.ranks * args.dp} processes)" if args.dp > 1 else ""
    what = spec.name if spec is not None else "timed"
    print(f"{name}: {what}, {plan.ranks} ranks{dp}, {plan.microbatches} microbatches, "
          f"{plan.schedule.num_stages} stages, {args.steps} steps on {args.devices} ({dtype})", flush=True)
    from flexpipe_ui.progress import heartbeat
    with heartbeat(f"starting {plan.ranks * args.dp} worker processes"):
        h = launch(plan, model=sendable, steps=args.steps, devices=args.devices, lr=args.lr, seed=args.seed,
                   dtype=dtype, capture_grads=check, timeout=args.timeout,
                   timed=args.timed if args.timed else False, dp=args.dp)
    predicted_peak = _predicted_peak(plan, args)
    try:
        for ev in _follow(h, plan.ranks * args.dp):
            loss = "n/a" if ev.loss is None else f"{ev.loss:.6f}"
            print(f"step {ev.step} loss {loss} step_time {ev.step_time:.4f} s "
                  f"makespan {ev.timeline.makespan:.2f} ms", flush=True)
            if ev.timeline.peak_memory_measured and ev.step == 0:
                print(_peak_line(ev.timeline.peak_memory_measured, predicted_peak), flush=True)
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


def _predicted_peak(plan, args):
    """Per-rank peak memory the simulator predicts from ``--problem`` (None without one)."""
    path = getattr(args, "problem", None)
    if not path:
        return None
    from flexpipe_ui.problem import load_problem
    from flexpipe_ui.sim import simulate
    return simulate(plan, load_problem(path)).metrics.peak_memory


def _peak_line(measured, predicted) -> str:
    """"peak memory MiB per rank: measured 12.3 / predicted 11.9, ..." (one line)."""
    parts = []
    for r, m in enumerate(measured):
        p = f" / predicted {predicted[r]:.1f}" if predicted is not None else ""
        parts.append(f"rank {r} measured {m:.1f}{p}")
    return "peak memory (MiB): " + ", ".join(parts)


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


def _tune(args) -> int:
    from flexpipe_ui.planfile import save_plan
    from flexpipe_ui.problem import save_problem

    from ..measure.tuning import tune
    args.layers = args.layers or 6
    spec, _ = _model(args)
    if spec.batch_size % args.microbatches:
        raise ValueError(f"--batch-size {spec.batch_size} does not split into {args.microbatches} microbatches")
    from ..run.launcher import WorkerError
    from ..measure.profiler import ProfileError
    try:
        res = tune(spec, ranks=args.ranks, microbatches=args.microbatches, rounds=args.rounds,
                   steps=args.steps, devices=args.devices, time_limit=args.time_limit,
                   shortlist_size=args.shortlist, neighbours=args.neighbours, progress=lambda ev: print(f"[{ev.phase} {ev.round}] {ev.message}", flush=True))
    except (WorkerError, ProfileError) as e:
        print(f"flexpipe tune: worker error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(res.table())
    save_plan(res.plan, args.output)
    print(f"wrote {args.output}")
    if args.write_problem:
        save_problem(res.problem, args.write_problem)
        print(f"wrote {args.write_problem}")
    return 0


def _profile(args) -> int:
    _check_model_flags(args)
    from ..measure.profiler import profile
    args.layers_given = args.layers is not None
    args.layers = args.layers or 6
    spec, _ = _model(args)
    import os
    threads = max(1, (os.cpu_count() or 1) // args.ranks) if args.devices == "cpu" else None
    prob = profile(spec, ranks=args.ranks, microbatches=args.microbatches, device=args.devices,
                   dtype=args.dtype, repeats=args.repeats, path=args.output, threads=threads,
                   dp=args.dp, dp_bandwidth=args.dp_bandwidth)
    from flexpipe_ui.calibrate import kind_overhead
    for i, l in enumerate(prob.layers):
        print(f"layer {i:>2} {l.name:<12} f {l.f:8.3f} b {l.b:8.3f} w {l.w:8.3f} ms  act {l.act:8.3f} "
              f"mem {l.mem:8.3f} MiB")
    ov = ", ".join(f"{k} {v:.3f}" for k, v in kind_overhead(prob).items())
    print(f"comm {prob.comm:.3f} ms, bandwidth {prob.bandwidth or float('inf'):.3g} MiB/ms, "
          f"comm_cpu {prob.comm_cpu or 0:.2f}, overhead per action (ms): {ov}")
    print(f"wrote {args.output}" if args.output else "(no -o: not written)")
    return 0


def _common(p) -> None:
    p.add_argument("--model", default="demo-gpt",
                   help="demo-gpt, hf:<model type> (llama, qwen2, qwen3, mistral, gpt2) or package.module:factory")
    p.add_argument("--model-config", metavar="JSON",
                   help="hf: models: config fields as JSON, e.g. '{\"hidden_size\": 64, \"num_hidden_layers\": 4}'")
    p.add_argument("--dp", type=T.integer(1, 1024), default=1,
                   help="data-parallel replicas of the pipeline (processes = ranks x dp)")
    p.add_argument("--layers", type=T.integer(3, 4096), default=None, help="demo-gpt layers (embedding + blocks + head)")
    p.add_argument("--dim", type=T.integer(1, 65536), default=64, help="demo-gpt width")
    p.add_argument("--seq", type=T.integer(1, 1 << 20), default=32, help="sequence length (demo-gpt, hf: models)")
    p.add_argument("--batch-size", type=T.integer(1, 1 << 20), default=16,
                   help="sequences per step (all replicas together)")
    p.add_argument("--devices", default="cpu", help="cpu (gloo) or cuda (NCCL)")
    p.add_argument("--dtype", default="float32", choices=DTYPES)


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a model with a plan on torch.distributed workers",
                              description="Run a plan on one process per rank (gloo on CPU, NCCL on GPUs).")
    _common(p)
    p.add_argument("--schedule", help="named schedule (flexpipe plan --list)")
    p.add_argument("--plan", help="a flexpipe-plan/1 file")
    p.add_argument("--ranks", type=T.ranks, help="pipeline ranks (processes)")
    p.add_argument("--microbatches", type=T.microbatches, help="microbatches per step (default 2 x ranks)")
    p.add_argument("--chunks", type=T.integer(1, 64), help="stages per rank for interleaved schedules")
    p.add_argument("--steps", type=T.integer(1, 10**6), default=3)
    p.add_argument("--lr", type=T.nonnegative, default=0.01)
    p.add_argument("--seed", type=T.integer(0, 2**32 - 1), default=0)
    p.add_argument("--timeout", type=T.seconds, default=60.0,
                   help="seconds a receive, or one action's compute, may take before the run is stopped")
    p.add_argument("--timed", type=T.number(minimum=0.0, maximum=1e6), default=None, metavar="MS",
                   help="run the sleeping model instead: each layer's F, I and W take MS ms")
    p.add_argument("--problem", help="a flexpipe-problem/1 file: print its predicted peak memory per rank "
                                     "beside the measured one")
    p.add_argument("--check-reference", action="store_true",
                   help="float64, and compare with a single-process step; last line max_grad_diff=<x>")
    p.set_defaults(func=_train)

    q = subparsers.add_parser("profile", help="measure per-layer costs into a flexpipe-problem/1",
                              description="Time f, b (input grad), w (weight grad) and memory per layer.")
    _common(q)
    q.add_argument("--ranks", type=T.ranks, default=4)
    q.add_argument("--microbatches", type=T.microbatches, default=8)
    q.add_argument("--repeats", type=T.integer(1, 10000), default=21,
                   help="timed repetitions per layer after warm-up (default 21; see docs/cost_model.md for how repeatable)")
    q.add_argument("--dp-bandwidth", type=T.number(minimum=1e-9, maximum=1e12), default=None, metavar="MIB_PER_MS",
                   help="gradient all-reduce bandwidth to record with --dp")
    q.add_argument("-o", "--output", help="problem file to write")
    q.set_defaults(func=_profile)

    t = subparsers.add_parser("tune", help="profile, auto, measure, calibrate, re-plan until the plan is stable",
                              description="Find a plan that is fast when measured: profile the model, search "
                                          "a plan, run it, refit the cost model to the run, repeat.")
    _common(t)
    t.add_argument("--ranks", type=int, default=2)
    t.add_argument("--microbatches", type=int, default=8)
    t.add_argument("--rounds", type=int, default=3, help="at most this many measured rounds")
    t.add_argument("--steps", type=int, default=4, help="measured steps per round (after one warm-up)")
    t.add_argument("--time-limit", type=float, default=10.0, help="seconds of search per round")
    t.add_argument("--shortlist", type=T.integer(1, 16), default=3,
                   help="plans run per round, the model's best first, with the fastest so far (default 3)")
    t.add_argument("--neighbours", type=T.integer(0, 16), default=2,
                   help="with --shortlist > 1, also run this many of the best plan's partition neighbours "
                        "(one stage boundary moved by a layer; default 2)")
    t.add_argument("-o", "--output", required=True, help="plan file to write")
    t.add_argument("--write-problem", help="also write the fitted problem here")
    t.set_defaults(func=_tune)

