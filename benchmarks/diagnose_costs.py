"""Why predictions are off: each action's duration inside a pipelined run vs the cost model's
duration for it, the time between actions, and the waits on messages, per plan and per kind.

For each family of ``bench_truth`` (``truth_models``; the same seeded draw): profile, build the
library plans and auto's, run them interleaved (one launch), and print

- per plan: step makespan measured vs simulated; per rank, busy time measured vs simulated and
  the idle time between actions measured ("gaps") vs simulated;
- per plan, stage and kind: the median measured duration vs the model's (``simulate`` on the
  profile: the same numbers the prediction used);
- per kind over all plans: Σ measured / Σ model;
- cross-rank waits beyond the message's transfer (``flexpipe_ui.calibrate.gaps``) vs ``comm``, and the
  executor's own time between two actions that did not wait (the loop gap).

    python benchmarks/diagnose_costs.py [--families conv-transformer] [--seed 11] [--steps 6] [--small]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def durations(tls) -> dict:
    """Median duration of each (stage, kind) over the timelines."""
    out: dict = {}
    for tl in tls:
        for a, s, e in zip(tl.actions, tl.start, tl.end):
            out.setdefault((a.stage, a.kind.name), []).append(float(e - s))
    return {k: statistics.median(v) for k, v in out.items()}


def rank_busy(tl, ranks: int) -> list[float]:
    busy = [0.0] * ranks
    for r, s, e in zip(tl.rank, tl.start, tl.end):
        busy[int(r)] += float(e - s)
    return busy


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=None)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--time-limit", type=float, default=10.0)
    args = ap.parse_args(argv)

    from bench_truth import plans_for
    from truth_models import describe, families

    from flexpipe_ui.sim import simulate
    from flexpipe_ui.calibrate import gaps, kind_overhead
    from kernel_runtime.measure.profiler import profile
    from kernel_runtime.run.launcher import launch
    log = lambda s: print(s, file=sys.stderr, flush=True)
    fams = families(args.seed, small=args.small, only=tuple(args.families.split(",")) if args.families else None)
    for fam in fams:
        print(f"\n== {describe(fam)}")
        prob = profile(fam.spec, ranks=fam.ranks, microbatches=fam.microbatches)
        print(f"overhead per action {({k: round(v, 3) for k, v in kind_overhead(prob).items()})}; "
              f"comm {prob.comm:.3f} ms; bandwidth {prob.bandwidth} MiB/ms; comm_cpu {prob.comm_cpu}; "
              f"probe {prob.meta.get('executor_probe')}")
        plans = plans_for(prob, args.time_limit, log)
        names = list(plans)
        h = launch([plans[n] for n in names] * 2, model=fam.spec, steps=args.steps + 1, timeout=600)
        h.wait()
        summary: dict[str, list] = {}
        for i, n in enumerate(names):
            plan = plans[n]
            evs = [e for e in h.step_events if e.plan_index % len(names) == i and e.step >= 1]
            tls = [e.timeline for e in evs]
            sim = simulate(plan, prob)
            meas_d, model_d = durations(tls), durations([sim.timeline])
            meas = statistics.median(tl.makespan for tl in tls)
            busy_m = [statistics.median(rank_busy(tl, plan.ranks)[r] for tl in tls) for r in range(plan.ranks)]
            busy_s = rank_busy(sim.timeline, plan.ranks)
            print(f"-- {n}: makespan measured {meas:.1f} vs simulated {sim.makespan:.1f} ({(meas - sim.makespan) / sim.makespan:+.1%}); "
                  f"busy per rank measured {[round(b, 1) for b in busy_m]} vs {[round(b, 1) for b in busy_s]}; "
                  f"idle measured {[round(meas - b, 1) for b in busy_m]} vs {[round(sim.makespan - b, 1) for b in busy_s]}")
            rows = []
            for (s, k), d in sorted(meas_d.items()):
                md = model_d.get((s, k), float("nan"))
                summary.setdefault(k, []).append((d, md))
                rows.append(f"{s}{k} {d:.2f}/{md:.2f}={d / md if md > 0 else float('nan'):.2f}")
            print("   stage-kind measured/model: " + "  ".join(rows))
            both = [gaps(tl, plan, prob) for tl in tls]
            waits = [g for w, _ in both for g in w]
            loops = [g for _, l in both for g in l]
            if waits or loops:
                print(f"   waits beyond transfer: median {statistics.median(waits) if waits else float('nan'):.3f} "
                      f"mean {statistics.fmean(waits) if waits else float('nan'):.3f} (n={len(waits)}) vs comm "
                      f"{prob.comm:.3f}; loop gap median {statistics.median(loops) if loops else float('nan'):.3f} "
                      f"mean {statistics.fmean(loops) if loops else float('nan'):.3f} (n={len(loops)})")
        print(f"-- per kind, Σ measured / Σ model: " + "; ".join(
            f"{k} {sum(r[0] for r in rows) / sum(r[1] for r in rows):.3f}" for k, rows in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
