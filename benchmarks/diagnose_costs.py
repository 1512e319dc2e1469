"""Why predictions are off on real layers: each action kind's duration inside a pipelined run vs
what the profile says it costs.

For each model of ``bench_truth`` (2 ranks) it profiles twice -- one worker alone, and one worker
per rank at once (what ``profile`` does by default: the ranks contend for cores and memory as in a
run) -- timing every layer and, whole, every stage of the plans below. Then it runs 1F1B, ZB-H1,
interleaved 1F1B, ZB-V and 1F1B with each B split into I then W in place ("1f1b+split": the
cost of splitting a backward, nothing else changed) and prints, per plan, stage and kind: the median measured duration (steps
after warm-up), the first step's, the sum of the stage's per-layer costs + the per-action overhead
(alone / concurrent), the stage timed whole, and the ratio measured / concurrent sum. Then the
cross-rank waits against ``comm + out / bandwidth``, and a summary per kind.

    python benchmarks/diagnose_costs.py [--small] [--steps 6] [--models gpt-heavy-head]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def library_plans(problem):
    from bench_truth import library_plans as plans      # imported when a diagnosis runs
    return plans(problem)


def models(small: bool):
    from bench_truth import models as specs
    return specs(small)

_FIELD = {"F": "f", "I": "b", "W": "w"}


def predicted(prob, lay, kind) -> float:
    """Σ of the stage's per-layer cost of ``kind`` + the per-action overhead."""
    from flexpipe_ui.calibrate import kind_overhead
    if kind == "B":
        work = sum(prob.layers[i].bw or (prob.layers[i].b + prob.layers[i].w) for i in lay)
    else:
        work = sum(getattr(prob.layers[i], _FIELD[kind]) for i in lay)
    return work + kind_overhead(prob).get(kind, 0.0)


def whole(prob, lay, kind):
    """The stage timed whole by the profiler (``meta["stages"]``), or None."""
    key = {"F": "f", "I": "b", "W": "w", "B": "bw"}[kind]
    for st in prob.meta.get("stages", []):
        if tuple(st["layers"]) == tuple(lay):
            return st[key]
    return None


def durations(tls):
    out = {}
    for tl in tls:
        for a, s, e in zip(tl.actions, tl.start, tl.end):
            out.setdefault((a.stage, a.kind.name), []).append(float(e - s))
    return {k: statistics.median(v) for k, v in out.items()}


def split_plan(plan):
    """The same plan with every fused B(s, m) split into I(s, m) then W(s, m) at its place: the
    cost of splitting a backward, with nothing else changed."""
    from diagnose_split import reorder
    out = reorder(plan, split_all=True)
    return out.__class__(out.schedule, out.partition,
                         dict(plan.meta or {}, name=(plan.meta or {}).get("name", "") + "+split"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--models", default=None)
    args = ap.parse_args(argv)
    import torch

    from flexpipe_ui.sim import simulate
    from flexpipe_ui.calibrate import gaps, kind_overhead
    from kernel_runtime.run.launcher import launch
    from kernel_runtime.measure.profiler import profile
    ranks = 2
    specs = models(args.small)
    if args.models:
        specs = {k: v for k, v in specs.items() if k in args.models.split(",")}
    print(f"diagnose_costs: {ranks} ranks x {args.microbatches} microbatches, cpu count {os.cpu_count()}, "
          f"torch threads per worker {max(1, (os.cpu_count() or 1) // ranks)}; ms")
    for mname, spec in specs.items():
        probe = profile(spec, ranks=ranks, microbatches=args.microbatches, processes=0, repeats=1, warmup=0)
        plans = library_plans(probe)
        try:
            plans["1f1b+split"] = split_plan(plans["1f1b"])
        except Exception as e:  # noqa: BLE001 - a diagnostic extra
            print(f"(no split variant: {e})")
        units = sorted({tuple(l) for p in plans.values() for l in p.partition if len(l) > 1})
        alone = profile(spec, ranks=ranks, microbatches=args.microbatches, processes=1, stages=units)
        conc = profile(spec, ranks=ranks, microbatches=args.microbatches, stages=units)
        print(f"\n== {mname}: profile alone vs concurrent; overhead per action {kind_overhead(conc)}; "
              f"comm {conc.comm:.3f} ms, bandwidth {conc.bandwidth} MiB/ms, comm_cpu {conc.comm_cpu}; "
              f"spread (IQR/median, worst layer) alone {alone.meta['spread']:.2f} conc {conc.meta['spread']:.2f}")
        names = list(plans)
        h = launch([plans[n] for n in names], model=spec, steps=args.steps + 1, timeout=300)
        h.wait()
        print(f"{'plan':<18} {'st':>2} {'layers':<9} {'kind':<4} {'meas':>8} {'step0':>8} {'alone':>8} "
              f"{'conc':>8} {'whole':>8} {'meas/conc':>9}")
        summary: dict[str, list] = {}
        for i, n in enumerate(names):
            plan = plans[n]
            evs = [e for e in h.step_events if e.plan_index == i]
            steady = durations([e.timeline for e in evs[1:]])
            first = durations([evs[0].timeline])
            model = durations([simulate(plan, conc).timeline])   # the cost model's own durations
            for (s, k), d in sorted(steady.items()):
                lay = plan.partition[s]
                pa, pc, pw = predicted(alone, lay, k), model[(s, k)], whole(conc, lay, k)
                summary.setdefault(k, []).append((d, pc, pa))
                print(f"{n:<18} {s:>2} {f'{lay[0]}-{lay[-1]}':<9} {k:<4} {d:>8.3f} {first[(s, k)]:>8.3f} "
                      f"{pa:>8.3f} {pc:>8.3f} {(f'{pw:.3f}' if pw is not None else '-'):>8} {d / max(pc, 1e-9):>9.2f}")
            meas = statistics.median(e.timeline.makespan for e in evs[1:])
            sim = simulate(plan, conc).makespan
            both = [gaps(e.timeline, plan, conc) for e in evs[1:]]
            waits = [g for w, _ in both for g in w]
            loops = [g for _, l in both for g in l]
            wait = (f"mean {statistics.fmean(waits):.3f} median {statistics.median(waits):.3f}" if waits else "-")
            wait += f"; executor gap between actions (median) {statistics.median(loops):.3f}" if loops else ""
            peaks = [e.timeline.peak_memory_measured for e in evs[1:] if e.timeline.peak_memory_measured]
            pm = simulate(plan, conc).metrics.peak_memory
            print(f"  {n}: step makespan measured {meas:.2f} vs simulated {sim:.2f} ({(meas - sim) / sim:+.1%}); "
                  f"cross-rank wait beyond transfer {wait} vs comm {conc.comm:.3f}; peak MiB measured "
                  f"{[round(x, 1) for x in peaks[-1]] if peaks else '-'} vs predicted {[round(x, 1) for x in pm]}")
        print(f"-- {mname} per kind: Σ measured / Σ (per-layer sum + overhead), concurrent | alone profile")
        for k, rows in summary.items():
            m, c, a = (sum(r[j] for r in rows) for j in range(3))
            print(f"   {k}: {m / c:.3f} | {m / a:.3f}   ({len(rows)} stage-kinds)")
    print(f"\n(torch {torch.__version__}; the machine's load when this ran is part of these numbers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
