"""Action by action: where a plan's measured step departs from its simulation, on every rank.

For one family of ``bench_truth`` (``truth_models``, the same seeded draw): profile, build the
chosen library plans and auto's, run them interleaved in one launch, and print for the median step
of each plan, per rank in execution order, every action as

    <action>:<idle before, measured>/<idle before, simulated>[<duration measured>/<simulated>]

so a slow action, a wait on a peer and the executor's own gap are told apart where they happen
(``diagnose_costs`` gives the same per stage and kind, summed). ``--problem F`` reuses a profile
saved by an earlier run (``--save F``) so repeated launches see one profile.

    python benchmarks/diagnose_gaps.py [--family conv-transformer] [--seed 1] [--plans 1f1b,auto]

``--family mlp-mixer`` takes ``newuser_mixer``'s model (2 ranks x 8 microbatches) instead.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rank_rows(tl, r: int) -> list[tuple[float, float, str]]:
    """(start, end, action) of rank ``r``'s actions in ``tl``, in time order."""
    return sorted((float(s), float(e), str(a)) for a, rr, s, e in zip(tl.actions, tl.rank, tl.start, tl.end)
                  if int(rr) == r)


def compare_line(measured, simulated, r: int) -> str:
    """One rank's actions: idle before and duration, measured / simulated."""
    sim = {a: (s, e) for s, e, a in rank_rows(simulated, r)}
    out, pm, ps = [], 0.0, 0.0
    for s, e, a in rank_rows(measured, r):
        ss, se = sim[a]
        out.append(f"{a}:{s - pm:+.1f}/{ss - ps:+.1f}[{e - s:.1f}/{se - ss:.1f}]")
        pm, ps = e, se
    return " ".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="conv-transformer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plans", default="1f1b,interleaved-1f1b,auto")
    ap.add_argument("--steps", type=int, default=4, help="steps shown per plan and pass")
    ap.add_argument("--warmup", type=int, default=3, help="unrecorded steps first (bench_truth's)")
    ap.add_argument("--problem", default=None, help="a saved profile to reuse")
    ap.add_argument("--save", default=None, help="save the profile here")
    args = ap.parse_args(argv)

    from bench_truth import plans_for
    from truth_models import describe, families

    from flexpipe_ui.problem import load_problem, save_problem
    from flexpipe_ui.sim import simulate
    from kernel_runtime.run.launcher import launch

    if args.family == "mlp-mixer":                          # the model outside the families
        from newuser_mixer import mixer_family
        fam = mixer_family()
    else:
        fam = families(args.seed, only=(args.family,))[0]
    print(f"== {describe(fam)}")
    if args.problem:
        prob = load_problem(args.problem)
    else:
        from kernel_runtime.measure.profiler import profile
        prob = profile(fam.spec, ranks=fam.ranks, microbatches=fam.microbatches)
    if args.save:
        save_problem(prob, args.save)
    plans = plans_for(prob, 10.0, lambda s: None)
    names = [n for n in args.plans.split(",") if n in plans]
    h = launch([plans[n] for n in names] * 2, model=fam.spec, steps=args.steps + args.warmup, timeout=600)
    h.wait()
    for i, n in enumerate(names):
        tls = sorted((e.timeline for e in h.step_events if e.plan_index % len(names) == i and e.step >= args.warmup),
                     key=lambda t: t.makespan)
        sim = simulate(plans[n], prob).timeline
        tl = tls[len(tls) // 2]
        print(f"-- {n}: steps {[round(t.makespan, 1) for t in tls]} ms; median {tl.makespan:.1f} vs "
              f"simulated {sim.makespan:.1f} ({(tl.makespan - sim.makespan) / sim.makespan:+.1%})")
        for r in range(plans[n].ranks):
            print(f"   r{r}: {compare_line(tl, sim, r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
