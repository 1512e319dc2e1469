"""Truth on real compute: predicted vs measured step time and peak memory, real layers only.

Two models on 2 ranks (CPU gloo; CUDA/NCCL when ``torch.cuda.device_count() >= 2``): the demo GPT
with a heavy LM head, and an MLP chain with uneven widths and a heavy classifier head. Each round
profiles afresh (``profile``, in worker processes), then:

1. runs the library plans 1F1B, ZB-H1, interleaved 1F1B and ZB-V (interleaved passes, one launch)
   -- these runs only feed calibration;
2. calibrates on them (``calibrate_runs``) and asks ``auto`` for its 3 best plans on the fitted
   problem; runs them, the best one's 2 best ``partition_neighbours`` and the fastest library plan
   of step 1, interleaved, and keeps the fastest measured (one round of ``tune``: auto after tune);
3. measures every plan including auto in a last launch, plans interleaved pass by pass (median
   of the steps after each pass's warm-up step). The figures reported all come from this launch,
   not from the runs that chose auto's plan.

Predictions are made before the runs they predict: a library plan from the profile alone (the
headline: a first plan has no run yet) and, in the ``cal`` column, from calibration on the *other*
library plans; auto's from calibration on every run of step 1 and 2 except its own plan's. The median
round counts; the worst round is reported too.

    python benchmarks/bench_truth.py [--rounds 3] [--steps 4] [--passes 5] [--quick] [--small]

Last line: ``max_rel_error=<x> auto_speedup_measured=<x>`` (auto vs 1F1B on the heavy-head GPT).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

LIBRARY = ("1f1b", "zb-h1", "interleaved-1f1b", "zb-v")


def models(small: bool) -> dict:
    from kernel_runtime.models.mlp import mlp_chain
    from kernel_runtime.models import demo_gpt
    if small:
        return {"gpt-heavy-head": demo_gpt(vocab=512, seq=16, dim=32, heads=2, n_blocks=6, batch_size=16),
                "mlp-uneven": mlp_chain((64, 128, 32, 256, 64, 128, 48, 96), classes=2048, batch_size=64)}
    # ~100-300 ms a step on 2 idle CPU cores; the LM head costs ~3.5 blocks, the classifier ~2x the rest
    return {"gpt-heavy-head": demo_gpt(vocab=8192, seq=64, dim=192, heads=4, n_blocks=6, batch_size=16),
            "mlp-uneven": mlp_chain(batch_size=256)}


def library_plans(problem) -> dict:
    from flexpipe_ui.library import build_named
    return {name: build_named(name, problem) for name in LIBRARY}


def one_round(spec, *, ranks, mbs, steps, passes, devices, time_limit, log) -> dict:
    """Profile, calibrate on library runs, auto, measure all; per plan: predictions and measures."""
    from flexpipe_ui.search import auto_search
    from flexpipe_ui.sim import simulate

    from flexpipe_ui.calibrate import calibrate_runs
    from kernel_runtime.measure.profiler import profile
    from kernel_runtime.measure.tuning import fastest_measured, measure_plans, plan_key, shortlist, with_neighbours

    dev = "cuda" if devices == "cuda" else "cpu"
    t = time.perf_counter()
    prob = profile(spec, ranks=ranks, microbatches=mbs, device=dev)
    log(f"  profiled in {time.perf_counter() - t:.1f} s (spread {prob.meta.get('spread', 0):.2f})")
    lib = library_plans(prob)
    names = list(lib)
    kw = dict(model=spec, steps=steps, warmup=1, repeat=passes, devices=devices, timeout=300)
    cal_runs = measure_plans([lib[n] for n in names], **kw)
    runs = {n: (lib[n], tls) for n, tls in zip(names, cal_runs)}
    fitted = calibrate_runs(list(runs.values()), prob)
    found = auto_search(fitted, time_limit=time_limit, top=3)
    pool = shortlist(found, 3)
    pool = with_neighbours(pool, fitted, 2)
    best_lib = min(names, key=lambda n: statistics.median(tl.makespan for tl in runs[n][1]))
    if plan_key(lib[best_lib]) not in {plan_key(p) for p, _ in pool}:
        pool.append((lib[best_lib], f"library {best_lib} (fastest library plan measured)"))
    pick, tls_pool, meds = fastest_measured([p for p, _ in pool], model=spec, steps=max(2, steps - 1), warmup=1,
                                      repeat=3, devices=devices, timeout=300)
    auto_plan = pool[pick][0]
    log("  auto shortlist: " + "; ".join(f"{d} {m:.1f} ms" for (_, d), m in zip(pool, meds))
        + f" -> kept {pool[pick][1]}")
    others = [(p, t) for p, t in list(runs.values()) + [(p, t) for (p, _), t in zip(pool, tls_pool)]
              if plan_key(p) != plan_key(auto_plan)]
    fitted_auto = calibrate_runs(others, prob)
    plans = dict(lib, auto=auto_plan)
    measured = measure_plans(list(plans.values()), **kw)
    out = {"_profile": (prob, lib["1f1b"].partition)}
    for (name, plan), tls in zip(plans.items(), measured):
        sim_prof = simulate(plan, prob)
        if name == "auto":
            cal = simulate(plan, fitted_auto).makespan
        else:
            others = [runs[n] for n in names if n != name]
            cal = simulate(plan, calibrate_runs(others, prob)).makespan
        meas = statistics.median(tl.makespan for tl in tls)
        peaks = [tl.peak_memory_measured for tl in tls if tl.peak_memory_measured]
        mpeak = max(statistics.median(p[r] for p in peaks) for r in range(len(peaks[0]))) if peaks else float("nan")
        pred = cal if name == "auto" else sim_prof.makespan
        out[name] = {"pred": pred, "pred_profile": sim_prof.makespan, "pred_cal": cal, "meas": meas,
                     "err": (meas - pred) / pred, "err_cal": (meas - cal) / cal,
                     "pred_mem": sim_prof.metrics.max_peak_memory, "meas_mem": mpeak}
    return out


def round_ratios(r: dict) -> dict:
    """Within one round (one launch): auto vs 1F1B and vs the best library plan, measured; how far
    the plan predicted fastest measured from the measured fastest."""
    plans = {p: v for p, v in r.items() if not p.startswith("_")}
    fastest = min(plans, key=lambda p: plans[p]["meas"])
    pred_fastest = min(plans, key=lambda p: plans[p]["pred"])
    best_lib = min((p for p in plans if p != "auto"), key=lambda p: plans[p]["meas"])
    return {"fastest": fastest, "gap": plans[pred_fastest]["meas"] / plans[fastest]["meas"] - 1,
            "vs_best": plans[best_lib]["meas"] / plans["auto"]["meas"],
            "vs_1f1b": plans["1f1b"]["meas"] / plans["auto"]["meas"]}


def repeatability(profiles) -> str:
    """Largest deviation of a 1F1B stage's total (Σ f + b + w) from its median over the rounds."""
    if len(profiles) < 2:
        return "n/a (one round)"
    worst = 0.0
    part = profiles[0][1]
    for lay in part:
        tot = [sum(p.layers[i].f + p.layers[i].b + p.layers[i].w for i in lay) for p, _ in profiles]
        med = statistics.median(tot)
        worst = max(worst, max(abs(t - med) / med for t in tot))
    return f"stage totals within {worst:.1%} of their median over {len(profiles)} profiles (target 5%)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each profiling afresh (median counts)")
    ap.add_argument("--steps", type=int, default=4, help="measured steps per plan and pass (after 1 warm-up)")
    ap.add_argument("--passes", type=int, default=5,
                    help="interleaved passes over the plans per launch (more, shorter passes: each plan sees the same machine drift)")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds of auto search")
    ap.add_argument("--quick", action="store_true", help="1 round, 3 steps, 1 pass (smoke test)")
    ap.add_argument("--small", action="store_true", help="tiny models (tests; figures mean little)")
    ap.add_argument("--models", default=None, help="comma-separated subset of the models")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.passes, args.time_limit = 1, 3, 1, min(args.time_limit, 3.0)
    import torch
    devices = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "cpu"
    ranks = 2
    specs = models(args.small)
    if args.models:
        specs = {k: v for k, v in specs.items() if k in args.models.split(",")}
    log = lambda s: print(s, file=sys.stderr, flush=True)
    print(f"bench_truth: {ranks} ranks x {args.microbatches} microbatches on {devices}, {args.rounds} "
          f"round(s), median of {args.steps} steps x {args.passes} pass(es) after warm-up; "
          f"cpu count {os.cpu_count()}")
    rows, worst_round, ratios = {}, {}, {}
    for mname, spec in specs.items():
        res = []
        for r in range(args.rounds):
            log(f"{mname}: round {r + 1}/{args.rounds}")
            res.append(one_round(spec, ranks=ranks, mbs=args.microbatches, steps=args.steps,
                                 passes=args.passes, devices=devices, time_limit=args.time_limit, log=log))
        print(f"{mname}: profile repeatability {repeatability([r.pop('_profile') for r in res])}")
        for k, r in enumerate(res, 1):          # every round's raw figures, all from one launch
            print(f"{mname} round {k}: " + "; ".join(f"{p} pred {v['pred']:.1f} meas {v['meas']:.1f}"
                                                     for p, v in r.items()))
        for plan in res[0]:
            errs = sorted(res, key=lambda x: abs(x[plan]["err"]))
            rows[(mname, plan)] = errs[len(errs) // 2][plan]          # the median round
            worst_round[(mname, plan)] = errs[-1][plan]["err"]
        ratios[mname] = [round_ratios(r) for r in res]
    print(f"{'model':<15} {'plan':<17} {'pred ms':>9} {'cal ms':>9} {'meas ms':>9} {'rel.err':>8} "
          f"{'worst':>7} {'pred MiB':>9} {'meas MiB':>9} {'mem err':>8}")
    max_err, mem_err = 0.0, 0.0
    for (mname, plan), v in rows.items():
        me = (v["meas_mem"] - v["pred_mem"]) / v["pred_mem"] if v["pred_mem"] > 0 else float("nan")
        print(f"{mname:<15} {plan:<17} {v['pred']:>9.2f} {v['pred_cal']:>9.2f} {v['meas']:>9.2f} "
              f"{v['err']:>+8.1%} {worst_round[(mname, plan)]:>+7.1%} {v['pred_mem']:>9.2f} "
              f"{v['meas_mem']:>9.2f} {me:>+8.1%}")
        max_err = max(max_err, abs(v["err"]))
        mem_err = max(mem_err, abs(me)) if me == me else mem_err
    print("pred = from the profile alone (auto: calibrated on every other plan's runs); cal = calibrated "
          "on runs of the other plans; rel.err = (measured - pred) / pred of the median round")
    speed = float("nan")
    for mname in specs:                    # ratios within each round (one launch), then the median round
        rr = ratios[mname]
        med = lambda key: statistics.median(x[key] for x in rr)
        worst = lambda key, f: f(x[key] for x in rr)
        fastest = [x["fastest"] for x in rr]
        print(f"{mname}: per round (same launch) measured fastest {fastest}; predicted fastest measured "
              f"{med('gap'):+.1%} off it (median round, worst {worst('gap', max):+.1%}); auto vs best library "
              f"{med('vs_best'):.3f}x (worst {worst('vs_best', min):.3f}x); auto vs 1F1B {med('vs_1f1b'):.3f}x "
              f"(worst {worst('vs_1f1b', min):.3f}x)")
        if mname == "gpt-heavy-head":
            speed = med("vs_1f1b")
    print(f"max_mem_rel_error={mem_err:.4f}")
    print(f"max_rel_error={max_err:.4f} auto_speedup_measured={speed:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
