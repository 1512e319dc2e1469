"""``flexpipe calibrate``: fit a problem to measured runs, from files (torch-free).

    flexpipe calibrate problem.json run1.json run2.json -o fitted.json

``problem.json`` is a ``flexpipe-problem/1`` (e.g. from ``flexpipe profile``); each run is a
``flexpipe-timeline/1`` written by ``flexpipe train --save-timeline`` (it carries the plan that
ran). Runs of several plans are pooled (``calibrate.calibrate_runs``); the first ``--warmup``
steps of each run are left out. It prints, per run, the measured step makespan (median) beside
the makespan the problem predicted before and after the fit, and writes the fitted problem,
which ``flexpipe auto`` then plans on.
"""
from __future__ import annotations

import statistics

from . import cli_types as T

__all__ = ["register"]


def _calibrate(args) -> int:
    from .calibrate import calibrate_runs
    from .problem import load_problem, save_problem
    from .sim import simulate
    from .timelinefile import TimelineFileError, load_timelines
    problem = load_problem(args.problem)
    runs, names = [], []
    for path in args.runs:
        run = load_timelines(path)
        tls = run.steps(args.warmup)
        if not tls:
            raise TimelineFileError(f"{path}: {len(run.timelines)} step(s), all within --warmup {args.warmup}: "
                                    "use a smaller --warmup or train more steps")
        if run.plan.num_layers and run.plan.num_layers != problem.num_layers:
            raise TimelineFileError(f"{path}: the plan that ran has {run.plan.num_layers} layers but "
                                    f"{args.problem} has {problem.num_layers}: a run of another model?")
        runs.append((run.plan, list(tls)))
        names.append(str(run.plan.meta.get("name") or path))
    fitted = calibrate_runs(runs, problem)
    print(f"{'run':<28} {'steps':>5} {'measured ms':>11} {'before':>9} {'after':>9}")
    for name, (plan, tls) in zip(names, runs):
        meas = statistics.median(tl.makespan for tl in tls)
        before, after = simulate(plan, problem).makespan, simulate(plan, fitted).makespan
        print(f"{name[:28]:<28} {len(tls):>5} {meas:>11.3f} {before:>9.3f} {after:>9.3f}")
    cal = fitted.meta["calibration"]
    scale = ", ".join(f"{k} x{v:.3f}" for k, v in cal["kind_scale"].items())
    print(f"comm {problem.comm:.3f} -> {fitted.comm:.3f} ms; time per kind {scale}; "
          f"loop gap {cal['loop_gap']:.3f} ms" + (f"; activations x{cal['act_scale']:.3f}"
                                                   if cal["act_scale"] is not None else ""))
    save_problem(fitted, args.output)
    print(f"wrote {args.output}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="fit a problem to measured runs (flexpipe train --save-timeline)",
                              description="Refit a flexpipe-problem/1 to measured timelines "
                                          "(flexpipe-timeline/1 files) of one or several plans.")
    p.add_argument("problem", help="the flexpipe-problem/1 to refit (e.g. from flexpipe profile)")
    p.add_argument("runs", nargs="+", metavar="run", help="flexpipe-timeline/1 files (flexpipe train --save-timeline)")
    p.add_argument("-o", "--output", required=True, help="where to write the fitted problem")
    p.add_argument("--warmup", type=T.integer(0, 10**6), default=1,
                   help="leave out each run's first N steps (default 1: the first step warms up)")
    p.set_defaults(func=_calibrate)
