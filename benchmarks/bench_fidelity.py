"""Fidelity: measured makespan of real runs vs the simulator's prediction (timed mode).

Four gloo processes run 1F1B, ZB-H1 and ZB-V at 4 ranks × 8 microbatches on the *timed* model:
8 layers whose F, I and W sleep prescribed durations instead of computing (so 4 ranks run in
parallel on 2 cores). The prediction is ``flexpipe_ui.sim.simulate`` on the same durations with
``comm`` = 0 (nothing measured goes into it). The measured makespan is the median over steps
1..N-1 (step 0 warms up) of the measured timeline's makespan (first action start to last end).
The table also shows the prediction with the comm latency ``calibrate`` reads from the run, and
the prediction a user gets before any run: ``simulate`` on ``profile()`` of the same sleeping model
(worker processes; each layer's F, I, W, B as the handlers run them, the per-action overhead, the
ping-pong latency and bandwidth between ranks) -- made before the runs it predicts.

    .venv/bin/python benchmarks/bench_fidelity.py [--ms 10] [--steps 4]

Last lines: ``max_rel_error_prescribed=<x>`` (simulated on the prescribed sleeps, comm 0) and
``max_rel_error=<x>`` (simulated on the profile; |measured - predicted| / predicted, worst schedule;
target <= 0.10).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from flexpipe_ui.ir import Plan  # noqa: E402
from flexpipe_ui.problem import Layer, Problem, even_partition  # noqa: E402
from flexpipe_ui.sim import simulate  # noqa: E402


def plans(ranks: int, mbs: int, n_layers: int) -> dict[str, Plan]:
    """1F1B, ZB-H1, ZB-V: the library's; before it lands, hand orders / torch's ZBV."""
    try:
        from flexpipe_ui.library import NAMED, build_named
    except ImportError:
        NAMED = {}
    out = {}
    for name in ("1f1b", "zb-h1", "zb-v"):
        if name in NAMED:
            sched = build_named(name, None, ranks=ranks, microbatches=mbs).schedule
            src = "library"
        else:
            sys.path.insert(0, os.path.join(ROOT, "tests", "runtime"))
            from plans import one_f_one_b, zb_h1
            from flexpipe_ui.torch_interop import import_torch_schedule
            sched = {"1f1b": lambda: one_f_one_b(ranks, mbs), "zb-h1": lambda: zb_h1(ranks, mbs),
                     "zb-v": lambda: import_torch_schedule("zb-v", ranks, mbs)}[name]()
            src = "hand" if name != "zb-v" else "torch"
        out[name] = (Plan(sched, even_partition(n_layers, sched.num_stages), {"name": name}), src)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", type=float, default=10.0, help="F = I = W per layer, ms (2 layers per rank)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    args = ap.parse_args(argv)
    from kernel_runtime.run.launcher import launch
    from kernel_runtime.models import timed_model
    from flexpipe_ui.calibrate import calibrate
    from kernel_runtime.measure.profiler import profile

    n_layers = 2 * args.ranks
    problem = Problem(ranks=args.ranks, microbatches=args.microbatches, comm=0.0,
                      layers=tuple(Layer(f=args.ms, b=args.ms, w=args.ms, act=1.0) for _ in range(n_layers)))
    named = plans(args.ranks, args.microbatches, n_layers)
    names = list(named)
    profiled = profile(timed_model(problem), ranks=args.ranks, microbatches=args.microbatches, repeats=5)
    h = launch([named[n][0] for n in names], timed=problem, steps=args.steps, timeout=120)
    h.wait(timeout=600)
    print(f"timed model: {n_layers} layers, F=I=W={args.ms:g} ms each; {args.ranks} ranks x "
          f"{args.microbatches} microbatches; gloo on CPU; median of steps 1..{args.steps - 1}")
    print(f"{'schedule':<8} {'source':<8} {'simulated':>10} {'measured':>10} {'rel.err':>8} "
          f"{'comm*':>7} {'sim+comm*':>10} {'rel.err*':>8} {'profiled':>9} {'rel.err':>8}")
    worst, worst_prof = 0.0, 0.0
    for i, name in enumerate(names):
        plan, src = named[name]
        evs = [e for e in h.step_events if e.plan_index == i]
        keep = evs[1:] if len(evs) > 1 else evs
        measured = statistics.median(e.timeline.makespan for e in keep)
        sim = simulate(plan, problem).makespan
        cal = calibrate([e.timeline for e in keep], plan, problem)
        sim_c = simulate(plan, problem.with_(comm=cal.comm)).makespan
        err, err_c = abs(measured - sim) / sim, abs(measured - sim_c) / sim_c
        prof = simulate(plan, profiled).makespan
        err_p = abs(measured - prof) / prof
        worst, worst_prof = max(worst, err), max(worst_prof, err_p)
        print(f"{name:<8} {src:<8} {sim:>10.1f} {measured:>10.1f} {err:>8.3f} {cal.comm:>7.2f} "
              f"{sim_c:>10.1f} {err_c:>8.3f} {prof:>9.1f} {err_p:>8.3f}")
    print("(ms; * = with the cross-rank latency calibrate() reads from the measured timelines; profiled = "
          f"simulated on profile() of the sleeping model, made before the runs: comm {profiled.comm:.2f} ms, "
          f"overhead {profiled.overhead})")
    print(f"max_rel_error_prescribed={worst:.4f}")
    print(f"max_rel_error={worst_prof:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
