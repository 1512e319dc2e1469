"""``flexpipe train``: run a plan (or a named schedule) on one worker process per rank.

    flexpipe train --model demo-gpt --schedule zb-v --ranks 4 --microbatches 8 --steps 5 --check-reference
    flexpipe train --plan plan.json --steps 3 --save-timeline run.json
    flexpipe train --model hf:llama --model-config '{"hidden_size": 64, "num_hidden_layers": 4}' ...
    flexpipe train --model mypkg.models:build --schedule 1f1b --ranks 2 --dp 2

``--save-timeline FILE`` writes every step's measured timeline (``flexpipe-timeline/1``, with the
plan that ran): what ``flexpipe calibrate`` fits a problem to.
"""
from __future__ import annotations

import sys

from flexpipe_ui import cli_types as T

from .args import add_model_flags, check_model_flags, model

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


def _plan(args):
    """The plan to run (``--plan`` or ``--schedule``), with ``args.layers`` and ``args.batch_size``
    settled for the model; (plan or None until the model's layers are known, microbatches)."""
    if (args.schedule is None) == (args.plan is None):
        raise ValueError("give exactly one of --schedule NAME or --plan PLAN")
    args.layers_given = args.layers is not None
    plan = None
    if args.plan:
        from flexpipe_ui.planfile import load_plan
        from flexpipe_ui.validate import validate
        plan = load_plan(args.plan)
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
    return plan, m


def _train(args) -> int:
    check_model_flags(args)
    from ..run.launcher import launch
    if args.dp < 1:
        raise ValueError(f"--dp must be >= 1, got {args.dp}")
    plan, m = _plan(args)
    spec, sendable = (None, None) if args.timed else model(args)
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
    if args.save_timeline:
        _save_timeline(args, h, what, dtype)
    if check:
        _check_reference(args, spec, h)
    return 0


def _save_timeline(args, h, what: str, dtype: str) -> None:
    """Every step's measured timeline, with the plan that ran, as a ``flexpipe-timeline/1`` file."""
    from flexpipe_ui.timelinefile import save_timelines
    evs = [ev for ev in h.step_events if ev.plan_index == 0]
    save_timelines(args.save_timeline, h.plans[0], [ev.timeline for ev in evs],
                   meta={"model": what, "devices": args.devices, "dtype": dtype, "dp": args.dp,
                         "seed": args.seed, "written_by": "flexpipe train"},
                   steps=[{"loss": ev.loss, "step_time": ev.step_time} for ev in evs])
    print(f"wrote {args.save_timeline} ({len(evs)} measured steps)", flush=True)


def _check_reference(args, spec, h) -> None:
    """Compare every step's loss and gradients with the single-process reference (float64)."""
    import numpy as np
    import torch

    from ..models.data import reference_run
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


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a model with a plan on torch.distributed workers",
                              description="Run a plan on one process per rank (gloo on CPU, NCCL on GPUs).")
    add_model_flags(p)
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
    p.add_argument("--save-timeline", metavar="FILE",
                   help="write every step's measured timeline and the plan (flexpipe-timeline/1), "
                        "for flexpipe calibrate")
    p.set_defaults(func=_train)
