"""``flexpipe profile`` and ``flexpipe tune``: measure a model into a problem, or tune a plan on it.

    flexpipe profile --model demo-gpt --ranks 4 --microbatches 8 -o problem.json
    flexpipe tune --model demo-gpt --ranks 2 --microbatches 8 -o plan.json --write-problem fitted.json

Every flag either changes what is measured or run, or is refused with exit 2 and one line saying
why (``tune --dp``: tune measures one pipeline; run its plan data-parallel with ``train --dp``).
"""
from __future__ import annotations

import sys

from flexpipe_ui import cli_types as T

from .args import add_model_flags, check_model_flags, model

__all__ = ["register"]


def _profile(args) -> int:
    check_model_flags(args)
    from flexpipe_ui.calibrate import kind_overhead

    from ..measure.profiler import profile
    args.layers_given = args.layers is not None
    args.layers = args.layers or 6
    spec, _ = model(args)
    import os
    threads = max(1, (os.cpu_count() or 1) // args.ranks) if args.devices == "cpu" else None
    prob = profile(spec, ranks=args.ranks, microbatches=args.microbatches, device=args.devices,
                   dtype=args.dtype, repeats=args.repeats, path=args.output, threads=threads,
                   dp=args.dp, dp_bandwidth=args.dp_bandwidth)
    for i, l in enumerate(prob.layers):
        print(f"layer {i:>2} {l.name:<12} f {l.f:8.3f} b {l.b:8.3f} w {l.w:8.3f} ms  act {l.act:8.3f} "
              f"mem {l.mem:8.3f} MiB")
    ov = ", ".join(f"{k} {v:.3f}" for k, v in kind_overhead(prob).items())
    print(f"comm {prob.comm:.3f} ms, bandwidth {prob.bandwidth or float('inf'):.3g} MiB/ms, "
          f"comm_cpu {prob.comm_cpu or 0:.2f}, overhead per action (ms): {ov}")
    print(f"wrote {args.output}" if args.output else "(no -o: not written)")
    return 0


def _tune(args) -> int:
    if args.dp != 1:
        raise ValueError(f"--dp {args.dp}: tune measures one pipeline replica, not data-parallel runs; "
                         "tune without --dp, then run its plan with: flexpipe train --plan PLAN "
                         f"--dp {args.dp}")
    check_model_flags(args)
    from flexpipe_ui.planfile import save_plan
    from flexpipe_ui.problem import save_problem

    from ..measure.profiler import ProfileError
    from ..measure.tuning import tune
    from ..run.launcher import WorkerError
    args.layers_given = args.layers is not None
    args.layers = args.layers or 6
    spec, _ = model(args)
    if spec.batch_size % args.microbatches:
        raise ValueError(f"--batch-size {spec.batch_size} does not split into {args.microbatches} microbatches")
    try:
        res = tune(spec, ranks=args.ranks, microbatches=args.microbatches, rounds=args.rounds,
                   steps=args.steps, devices=args.devices, dtype=args.dtype, time_limit=args.time_limit,
                   shortlist_size=args.shortlist, neighbours=args.neighbours,
                   progress=lambda ev: print(f"[{ev.phase} {ev.round}] {ev.message}", flush=True))
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


def register(subparsers) -> None:
    q = subparsers.add_parser("profile", help="measure per-layer costs into a flexpipe-problem/1",
                              description="Time f, b (input grad), w (weight grad) and memory per layer.")
    add_model_flags(q)
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
    add_model_flags(t)
    t.add_argument("--ranks", type=T.ranks, default=2)
    t.add_argument("--microbatches", type=T.microbatches, default=8)
    t.add_argument("--rounds", type=T.integer(1, 100), default=3, help="at most this many measured rounds")
    t.add_argument("--steps", type=T.integer(1, 10**6), default=4,
                   help="measured steps per round (after one warm-up)")
    t.add_argument("--time-limit", type=T.seconds, default=10.0, help="seconds of search per round")
    t.add_argument("--shortlist", type=T.integer(1, 16), default=3,
                   help="plans run per round, the model's best first, with the fastest so far (default 3)")
    t.add_argument("--neighbours", type=T.integer(0, 16), default=2,
                   help="with --shortlist > 1, also run this many of the best plan's partition neighbours "
                        "(one stage boundary moved by a layer; default 2)")
    t.add_argument("-o", "--output", required=True, help="plan file to write")
    t.add_argument("--write-problem", help="also write the fitted problem here")
    t.set_defaults(func=_tune)
