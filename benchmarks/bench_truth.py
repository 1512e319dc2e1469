"""Truth on real compute: predicted vs measured step time and peak memory on models of five families.

Families (``truth_models``): the demo GPT with a heavy LM head, an MLP chain with uneven widths, a
Hugging Face Llama from a config (``from_transformers``), a conv stem feeding transformer layers
cut from a plain ``nn.Module`` (``split_module``), and an embedding-heavy recommender whose first
stage is very cheap and last very expensive (``split_module``). The last three take their widths,
depths, microbatch count and rank count from a seeded random draw, a new seed each run unless
``--seed`` is given (printed first, so a run can be replayed): no constant of the cost model can
be tuned to one shape.

Each round, per family: ``profile()`` afresh (in worker processes), then the library plans 1F1B,
ZB-H1, interleaved 1F1B, ZB-V and ``auto``'s plan, every one predicted by ``simulate`` on that
profile alone (no plan's prediction sees a run of any plan), then all five run interleaved pass
by pass in one launch (an unrecorded warm pass first; in every pass each plan's first ``--warmup``
steps unrecorded, its steady state measured; per plan the median step over the passes).
Memory: each worker's peak as the process measured it (resident set on CPU, CUDA's
``max_memory_allocated`` on GPUs: ``kernel_runtime.run.procmem``) beside the predicted peak. The median
round counts; the worst round is reported too. Per family also each round's shared shift (the
median over the plans of measured / predicted: what moves them all alike, the machine between the
profile and the runs) and each plan's own error once it is taken out. ``--bracket`` profiles again
after the runs (``one_round``).

    python benchmarks/bench_truth.py [--seed N] [--rounds 3] [--steps 4] [--passes 5] [--warmup 3]
                                     [--families a,b] [--bracket]
                                     [--quick] [--small]

One line per family: ``family=<name> max_rel_error=<x> auto_vs_best=<x>``; the last line:
``max_rel_error=<x> auto_speedup_measured=<x>`` (over all families; auto vs 1F1B on the heavy-head
GPT, or on the first family run when it is left out).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def plans_for(problem, time_limit: float, log) -> dict:
    """The library plans that exist for this shape, and auto's, all from the profile alone."""
    from flexpipe_ui.library import LibraryError, build_named
    from flexpipe_ui.search import auto_search
    from truth_models import LIBRARY
    out = {}
    for name in LIBRARY:
        try:
            out[name] = build_named(name, problem)
        except LibraryError as e:
            log(f"  {name}: not run ({e})")
    found = auto_search(problem, time_limit=time_limit)
    out["auto"] = found.best
    log(f"  auto: {found.candidates[0][2]}")
    return out


def one_round(fam, *, steps, passes, devices, time_limit, log, warmup: int = 3, bracket: bool = False) -> dict:
    """Profile, predict every plan from the profile, measure them interleaved; per plan the figures.

    ``bracket``: profile again after the runs and predict from the two profiles merged
    (``merge_profiles``: each time the median), so the profile sees the machine on both sides of the
    runs; the plans (auto's choice included) still come from the first profile alone, and every
    plan's error from the first profile alone and from the second alone is kept beside
    (``errs``). Either way no prediction sees a run."""
    from flexpipe_ui.sim import simulate
    from kernel_runtime.measure.profiler import profile
    from kernel_runtime.measure.tuning import measure_plans

    from machine_probe import probe
    speed0 = probe()
    t = time.perf_counter()
    prob = profile(fam.spec, ranks=fam.ranks, microbatches=fam.microbatches,
                   device="cuda" if devices == "cuda" else "cpu")
    noise = prob.meta.get("noise") or {}
    log(f"  profiled in {time.perf_counter() - t:.1f} s (spread {prob.meta.get('spread', 0):.2f}; the profiler's "
        f"noise: {noise.get('repeats')} repeats, drift {noise.get('drift', 0):.1%}, median error "
        f"{noise.get('error', 0):.1%})")
    speed1 = probe()
    plans = plans_for(prob, time_limit, log)
    measured = measure_plans(list(plans.values()), model=fam.spec, steps=steps, warmup=warmup, repeat=passes,
                             devices=devices, timeout=600)
    speed2 = probe()
    profs = {"before": prob}
    if bracket:
        from kernel_runtime.measure.assemble import merge_profiles
        t = time.perf_counter()
        profs["after"] = profile(fam.spec, ranks=fam.ranks, microbatches=fam.microbatches,
                                 device="cuda" if devices == "cuda" else "cpu")
        profs["bracketed"] = merge_profiles([prob, profs["after"]])
        log(f"  profiled again after the runs in {time.perf_counter() - t:.1f} s")
    out = {"_profile": prob, "_machine": machine_moved(speed0, speed1, speed2)}
    for (name, plan), tls in zip(plans.items(), measured):
        meas = statistics.median(tl.makespan for tl in tls)
        sims = {k: simulate(plan, p) for k, p in profs.items()}
        errs = {k: meas / s.makespan - 1 for k, s in sims.items()}
        sim = sims["bracketed" if bracket else "before"]
        pred_mem = list(sim.metrics.peak_memory)
        peaks = [tl.peak_memory_measured for tl in tls if tl.peak_memory_measured]
        meas_mem = [statistics.median(p[r] for p in peaks) for r in range(len(peaks[0]))] if peaks else []
        per_rank = lambda key: _rank_medians([tl.meta.get(key) for tl in tls if tl.meta.get(key)])
        trk_mem, rss_mem = per_rank("peak_memory_tracked"), per_rank("peak_memory_rss")
        rank_err = max((abs(m - p) / p for m, p in zip(meas_mem, pred_mem) if p > 0), default=float("nan"))
        peak_p, peak_m = max(pred_mem), max(meas_mem, default=float("nan"))
        out[name] = {"pred": sim.makespan, "meas": meas, "err": (meas - sim.makespan) / sim.makespan,
                     "pred_mem": peak_p, "meas_mem": peak_m, "mem_err": abs(peak_m - peak_p) / peak_p,
                     "rank_mem_err": rank_err, "pred_mem_ranks": pred_mem, "meas_mem_ranks": meas_mem,
                     "tracked_mem_ranks": trk_mem, "rss_mem_ranks": rss_mem, "errs": errs}
    return out


def machine_moved(before, between, after) -> dict:
    """The reference kernels' speed bracketing the profile (before, between) and the runs (between,
    after): how much slower the machine ran during the runs than during the profile. A diagnostic
    of the machine, not of the model: it enters no prediction (machine_probe)."""
    from machine_probe import MachineSpeed, drift
    mid = lambda x, y: MachineSpeed((x.matmul_ms + y.matmul_ms) / 2, (x.copy_ms + y.copy_ms) / 2)
    moved = drift(mid(before, between), mid(between, after))
    return {"matmul_ms": moved["matmul"], "copy_ms": moved["copy"],
            "ms": [(s.matmul_ms, s.copy_ms) for s in (before, between, after)]}


def _mib(xs) -> str:
    return "/".join(f"{x:.1f}" for x in xs) if xs else "-"


def _rank_medians(rows: list) -> list[float]:
    return [statistics.median(p[r] for p in rows) for r in range(len(rows[0]))] if rows else []


def round_ratios(r: dict) -> dict:
    """Within one round (one launch): auto vs 1F1B and vs the best library plan, measured; how far
    the plan predicted fastest measured from the measured fastest."""
    plans = {p: v for p, v in r.items() if not p.startswith("_")}
    fastest = min(plans, key=lambda p: plans[p]["meas"])
    pred_fastest = min(plans, key=lambda p: plans[p]["pred"])
    best_lib = min((p for p in plans if p != "auto"), key=lambda p: plans[p]["meas"])
    # what the round's plans share (the machine between profile and runs moves them all alike) and
    # what is each plan's own: its error once that shared factor is taken out
    shift = statistics.median(v["meas"] / v["pred"] for v in plans.values())
    own = {p: v["meas"] / (v["pred"] * shift) - 1 for p, v in plans.items()}
    return {"fastest": fastest, "pred_fastest": pred_fastest, "shift": shift - 1, "own": own,
            "own_max": max(abs(e) for e in own.values()),
            "gap": plans[pred_fastest]["meas"] / plans[fastest]["meas"] - 1,
            "vs_best": plans[best_lib]["meas"] / plans["auto"]["meas"],
            "vs_1f1b": plans["1f1b"]["meas"] / plans["auto"]["meas"] if "1f1b" in plans else float("nan")}


def errs_text(v: dict) -> str:
    """A plan's errors by profile (``one_round(bracket=True)``), e.g. ``before +1.5% after -9.9% ...``."""
    return " ".join(f"{s} {e:+.1%}" for s, e in v["errs"].items())


def by_profile(all_rounds: dict) -> str:
    """With ``--bracket``: per family and overall, the worst plan's median-round error predicted
    from the profile before the runs alone, after them alone, and from both merged."""
    worst: dict[str, dict[str, float]] = {}
    for fam, res in all_rounds.items():
        plans = [p for p in res[0] if not p.startswith("_")]
        for src in res[0][plans[0]]["errs"]:
            med = [sorted(abs(r[p]["errs"][src]) for r in res)[len(res) // 2] for p in plans]
            worst.setdefault(src, {})[fam] = max(med)
    lines = [f"error by profile (median round, worst plan) {src}: " + " ".join(
        f"{f} {e:.3f}" for f, e in fams.items()) + f"; max {max(fams.values()):.4f}" for src, fams in worst.items()]
    return "\n".join(lines)


def repeatability(profiles) -> float:
    """Largest deviation of a stage's total (Σ f + b + w over an even share of the layers per rank)
    from its median over the rounds' profiles (0 with one round)."""
    if len(profiles) < 2:
        return 0.0
    from flexpipe_ui.problem import even_partition
    worst = 0.0
    first = profiles[0]
    for lay in even_partition(first.num_layers, first.ranks):
        tot = [sum(p.layers[i].f + p.layers[i].b + p.layers[i].w for i in lay) for p in profiles]
        med = statistics.median(tot)
        worst = max(worst, max(abs(t - med) / med for t in tot))
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="the draw of the random families (default: a new one)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each profiling afresh (median counts)")
    ap.add_argument("--steps", type=int, default=4, help="measured steps per plan and pass (after --warmup)")
    ap.add_argument("--passes", type=int, default=5, help="interleaved passes over the plans per launch")
    ap.add_argument("--warmup", type=int, default=3,
                    help="unrecorded steps at the start of every plan's run in each pass (steady state: "
                         "a plan's first steps after its start run slower, docs/cost_model.md)")
    ap.add_argument("--time-limit", type=float, default=10.0, help="seconds of auto search")
    ap.add_argument("--bracket", action="store_true",
                    help="also profile after the runs and predict from both profiles merged (one_round); the "
                         "errors from the first and from the second profile alone are printed beside (a "
                         "diagnostic of the machine moving: docs/cost_model.md, \"Bracketing the runs\")")
    ap.add_argument("--quick", action="store_true", help="1 round, 3 steps, 1 pass (smoke test)")
    ap.add_argument("--small", action="store_true", help="tiny models (tests; figures mean little)")
    ap.add_argument("--families", "--models", default=None, help="comma-separated subset of the families")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                    help="auto: CUDA with 2+ GPUs, else CPU; cuda: also with one GPU, the ranks sharing it "
                         "(memory per process is exact, timings are not representative)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.passes, args.time_limit = 1, 3, 1, min(args.time_limit, 3.0)
    import torch

    from truth_models import describe, families
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    devices = ("cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "cpu") \
        if args.device == "auto" else args.device
    if devices == "cuda" and torch.cuda.device_count() < 2:
        print("bench_truth: the ranks share one GPU: step times are not a pipeline's (memory is per process)")
    fams = families(seed, small=args.small, only=tuple(args.families.split(",")) if args.families else None)
    log = lambda s: print(s, file=sys.stderr, flush=True)
    print(f"bench_truth: seed={seed} on {devices}, {args.rounds} round(s), median of {args.steps} steps x "
          f"{args.passes} pass(es) after {args.warmup} warm-up step(s); cpu count {os.cpu_count()}")
    for fam in fams:
        print("  " + describe(fam))
    rows, worst_round, ratios, rep, moved, said, all_rounds = {}, {}, {}, {}, {}, {}, {}
    for fam in fams:
        res = []
        for r in range(args.rounds):
            log(f"{fam.name}: round {r + 1}/{args.rounds}")
            res.append(one_round(fam, steps=args.steps, passes=args.passes, devices=devices, warmup=args.warmup,
                                 time_limit=args.time_limit, log=log, bracket=args.bracket))
        profs = [x.pop("_profile") for x in res]
        rep[fam.name] = repeatability(profs)
        said[fam.name] = max((p.meta.get("noise") or {}).get("error", 0.0) for p in profs)
        moved[fam.name] = [x.pop("_machine") for x in res]
        for k, r in enumerate(res, 1):          # every round's raw figures, all from one launch
            print(f"{fam.name} round {k}: " + "; ".join(
                f"{p} pred {v['pred']:.1f} meas {v['meas']:.1f} MiB pred {v['pred_mem']:.1f} meas "
                f"{v['meas_mem']:.1f} (per rank pred {_mib(v['pred_mem_ranks'])} meas {_mib(v['meas_mem_ranks'])})"
                + (" err " + errs_text(v) if len(v["errs"]) > 1 else "")
                for p, v in r.items()))
            m = moved[fam.name][k - 1]
            print(f"{fam.name} round {k}: machine (reference kernels before profile / after / after runs) "
                  f"matmul {'/'.join(f'{x:.2f}' for x, _ in m['ms'])} ms, 64 MiB copy {'/'.join(f'{y:.2f}' for _, y in m['ms'])} ms: "
                  f"runs vs profile matmul {m['matmul_ms']:+.1%}, copy {m['copy_ms']:+.1%}")
        for plan in res[0]:
            by_err = sorted(res, key=lambda x: abs(x[plan]["err"]))
            rows[(fam.name, plan)] = by_err[len(by_err) // 2][plan]          # the median round
            worst_round[(fam.name, plan)] = by_err[-1][plan]["err"]
        ratios[fam.name] = [round_ratios(r) for r in res]
        all_rounds[fam.name] = res
    print(f"{'family':<18} {'plan':<17} {'pred ms':>9} {'meas ms':>9} {'rel.err':>8} {'worst':>7} "
          f"{'pred MiB':>9} {'meas MiB':>9} {'mem err':>8} {'by rank':>8}")
    max_err, mem_err, fam_err, rank_err = 0.0, 0.0, {}, 0.0
    for (name, plan), v in rows.items():
        print(f"{name:<18} {plan:<17} {v['pred']:>9.2f} {v['meas']:>9.2f} {v['err']:>+8.1%} "
              f"{worst_round[(name, plan)]:>+7.1%} {v['pred_mem']:>9.2f} {v['meas_mem']:>9.2f} "
              f"{v['mem_err']:>8.1%} {v['rank_mem_err']:>8.1%}")
        max_err = max(max_err, abs(v["err"]))
        fam_err[name] = max(fam_err.get(name, 0.0), abs(v["err"]))
        mem_err = max(mem_err, v["mem_err"]) if v["mem_err"] == v["mem_err"] else mem_err
        rank_err = max(rank_err, v["rank_mem_err"]) if v["rank_mem_err"] == v["rank_mem_err"] else rank_err
    print("pred = simulate(plan, profile) for every plan, auto included; rel.err = (measured - pred) / pred "
          "of the median round; MiB: the plan's peak (its highest rank), measured by the process's allocator "
          "(procmem); mem err = |measured - predicted| / predicted of that peak; by rank: the worst rank's")
    speed, lines = float("nan"), []
    for fam in fams:                    # ratios within each round (one launch), then the median round
        rr = ratios[fam.name]
        med = lambda key: statistics.median(x[key] for x in rr)
        low = lambda key: min(x[key] for x in rr)
        print(f"{fam.name}: per round measured fastest {[x['fastest'] for x in rr]}, predicted fastest "
              f"{[x['pred_fastest'] for x in rr]}: predicted fastest measured {med('gap'):+.1%} off the measured "
              f"fastest (median round, worst {max(x['gap'] for x in rr):+.1%}); auto vs best library "
              f"{med('vs_best'):.3f}x (worst {low('vs_best'):.3f}x); auto vs 1F1B {med('vs_1f1b'):.3f}x; "
              f"profile repeatability {rep[fam.name]:.1%} (the profiler's own median error, worst round "
              f"{said[fam.name]:.1%}); the machine during the runs vs the profile "
              f"(median round): matmul {statistics.median(m['matmul_ms'] for m in moved[fam.name]):+.1%}, "
              f"copy {statistics.median(m['copy_ms'] for m in moved[fam.name]):+.1%}")
        shifts = " ".join(f"{x['shift']:+.1%}" for x in rr)
        own = "; ".join(p + " " + "/".join(f"{x['own'][p]:+.1%}" for x in rr) for p in rr[0]["own"])
        print(f"{fam.name}: shared shift per round {shifts}; each plan's own error (shift taken out) per "
              f"round {own}; worst own error, median round {med('own_max'):.1%}")
        if fam.name == "gpt-heavy-head" or speed != speed:
            speed = med("vs_1f1b")
        lines.append(f"family={fam.name} max_rel_error={fam_err[fam.name]:.4f} auto_vs_best={med('vs_best'):.4f}")
    if args.bracket:
        print(by_profile(all_rounds))
    print(f"max_mem_rel_error={mem_err:.4f} max_rank_mem_rel_error={rank_err:.4f}")
    for line in lines:
        print(line)
    print(f"max_rel_error={max_err:.4f} auto_speedup_measured={speed:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
