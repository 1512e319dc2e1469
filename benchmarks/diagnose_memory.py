"""Why a rank's measured peak memory differs from the predicted one: per plan and rank, the
process-measured peak (``kernel_runtime.run.procmem``) beside the cost model's, from one profile.

Memory is deterministic (allocation order is the plan's), so one step per plan is enough, and the
measurement can be kept and re-predicted after a change to the cost model without running again:

    python benchmarks/diagnose_memory.py --families mlp-uneven --seed 1 --save /tmp/diag_mem
    python benchmarks/diagnose_memory.py --load /tmp/diag_mem        # re-predict, no run
    python benchmarks/diagnose_memory.py --load /tmp/diag_mem --seed 1 --trace zb-v   # per action

``--trace PLAN`` runs the saved plan again with each action in a profiler range (``_memtrace``)
and prints, per rank and action, the allocator's level before / highest inside / after, beside the
cost model's, less each series' level at the step's start: where the two part is the action whose
memory the model gets wrong.

Per plan and rank it prints predicted / measured MiB and the difference; with ``--load`` the saved
profile, plans and measurements are re-read (the prediction is today's cost model).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def measure(fam, time_limit: float, log) -> tuple:
    """Profile ``fam``, build its plans, run each for one step; (problem, plans, measured MiB per rank)."""
    from bench_truth import plans_for
    from kernel_runtime.measure.profiler import profile
    from kernel_runtime.measure.tuning import measure_plans
    prob = profile(fam.spec, ranks=fam.ranks, microbatches=fam.microbatches)
    plans = plans_for(prob, time_limit, log)
    tls = measure_plans(list(plans.values()), model=fam.spec, steps=1, warmup=0, repeat=1,
                        warm_pass=False, timeout=600)
    meas = {n: list(t[0].peak_memory_measured or ()) for n, t in zip(plans, tls)}
    return prob, plans, meas


def report(name: str, prob, plans: dict, meas: dict) -> None:
    from flexpipe_ui.sim import simulate
    print(f"== {name}")
    for n, plan in plans.items():
        pred = simulate(plan, prob).metrics.peak_memory
        rows = [f"r{r} {p:.1f}/{m:.1f} ({m - p:+.1f}, {(m - p) / p:+.1%})" for r, (p, m) in enumerate(zip(pred, meas[n]))]
        print(f"  {n:18s} pred/meas MiB: " + "  ".join(rows))


def _model_levels(plan, prob) -> list[list[tuple]]:
    """Per rank, per action in start order: (name, level before, level after start, level after end),
    MiB above the rank's static memory (``timeline.memory_curve``)."""
    import numpy as np
    from flexpipe_ui.sim import simulate
    from flexpipe_ui.timeline import memory_curve
    res = simulate(plan, prob)
    tl = res.timeline
    out = []
    for r in range(tl.ranks):
        times, vals = memory_curve(tl, res.costs, r, static=0.0)
        level = lambda x, right: float(vals[np.searchsorted(times[1:], x, side="right" if right else "left")])
        idx = sorted((i for i in range(len(tl.actions)) if tl.rank[i] == r), key=lambda i: tl.start[i])
        out.append([(str(tl.actions[i]), level(tl.start[i], False), level(tl.start[i], True),
                     level(tl.end[i], True)) for i in idx])
    return out


def trace(name: str, prob, plan, seed: int, small: bool) -> None:
    import glob
    import tempfile
    import _memtrace
    from kernel_runtime.measure.tuning import measure_plans
    from truth_models import families
    fam = families(seed, small=small, only=(name,))[0]
    where = tempfile.mkdtemp(prefix="memtrace-")
    os.environ["FLEXPIPE_MEMTRACE"] = where
    measure_plans([plan], model=fam.spec, steps=1, warmup=0, repeat=1, warm_pass=False, timeout=600,
                  handlers=_memtrace.handlers())
    model = _model_levels(plan, prob)
    mib = 2.0 ** 20
    for r, rows in enumerate(model):
        got = json.load(open(sorted(glob.glob(os.path.join(where, f"rank{r}.*.json")))[0]))["ranges"]
        base = got[0][1]
        print(f"-- {name} rank {r}: action  measured before/peak/after  model before/peak/after  (MiB above step start)")
        by_name = {g[0]: g for g in got}
        for a, b, p, e in rows:
            g = by_name.get(a)
            if g is None:
                continue
            mb, mp, me = ((x - base) / mib for x in g[1:])
            print(f"   {a:10s} {mb:7.2f} {mp:7.2f} {me:7.2f}   {b:7.2f} {max(p, b):7.2f} {e:7.2f}   "
                  f"diff peak {mp - max(p, b):+6.2f} after {me - e:+6.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--save", default=None, help="folder to keep each family's profile, plans and measurement in")
    ap.add_argument("--load", default=None, help="folder written by --save: re-predict, no run")
    ap.add_argument("--trace", default=None, help="with --load: run this plan again, per-action levels")
    args = ap.parse_args(argv)

    from flexpipe_ui.planfile import plan_from_dict, plan_to_dict
    from flexpipe_ui.problem import load_problem, save_problem
    log = lambda s: print(s, file=sys.stderr, flush=True)
    if args.load:
        for fn in sorted(os.listdir(args.load)):
            if fn.endswith(".run.json"):
                name = fn[:-len(".run.json")]
                with open(os.path.join(args.load, fn)) as f:
                    d = json.load(f)
                prob = load_problem(os.path.join(args.load, name + ".problem.json"))
                plans = {n: plan_from_dict(p, f"{fn}: {n}") for n, p in d["plans"].items()}
                report(name, prob, plans, d["measured"])
                if args.trace and (not args.families or name in args.families.split(",")):
                    trace(name, prob, plans[args.trace], args.seed, args.small)
        return 0
    from truth_models import describe, families
    only = tuple(args.families.split(",")) if args.families else None
    for fam in families(args.seed, small=args.small, only=only):
        log(describe(fam))
        prob, plans, meas = measure(fam, args.time_limit, log)
        report(fam.name, prob, plans, meas)
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            save_problem(prob, os.path.join(args.save, fam.name + ".problem.json"))
            with open(os.path.join(args.save, fam.name + ".run.json"), "w") as f:
                json.dump({"plans": {n: plan_to_dict(p) for n, p in plans.items()}, "measured": meas}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
