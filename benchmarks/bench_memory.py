"""Memory-capped problems: auto (recompute and offload chosen per stage and microbatch inside the
search) against what a user does on a tight GPU today.

Problems (each capped below what the fastest named schedule needs, ``--list`` prints them):
the GPT preset (8 ranks × 32 microbatches, Llama-3-8B blocks) capped at 0.8, 0.6 and 0.5 of 1F1B's
estimated peak (``presets.tight_memory``), the heavy-head GPT and the vision-language model
capped the same way at 0.8 and 0.6 (never below 1.05 × the largest rank's static memory), and, unless ``--no-real``, the demo GPT profiled
on this machine by ``kernel_runtime.profile`` (2 gloo ranks) capped at 0.8 of its 1F1B peak.

Baselines, each simulated by the same cost model and kept only if it fits the cap: every library
schedule (× chunks × even and balanced split, ``search.space.seed_candidates``) as it is, with full
recompute (an ``R`` for every stage and microbatch, Megatron's ``--recompute-granularity full``)
and with selective recompute (``costmodel.selective_recompute``: the blocks' core attention is
re-run in the backward and its output not kept; ``act_sel`` = the attention output, 2·n·h bytes,
``f_sel`` = the attention's forward flops at the preset device's rate: the presets' own formulas).
Auto's plan is checked against the cap by its own simulation.

Per problem: cap, auto's makespan and what it recomputes/offloads, the best fitting baseline,
auto's speed-up over it; last line
``memory_auto_speedup_min=<x> memory_auto_speedup_median=<x> fits=<n>/<n>``.

    .venv/bin/python benchmarks/bench_memory.py            # ~2 min (the profile is most of it)
    .venv/bin/python benchmarks/bench_memory.py --no-real  # presets only, seconds
    .venv/bin/python benchmarks/bench_memory.py --train    # + the profiled model trained on gloo (~2 min more)
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _selective_terms(problem, t=None, dev=None):
    """``problem`` whose decoder blocks carry ``act_sel``/``f_sel`` from the preset's formulas."""
    from flexpipe_ui.presets import Device, Transformer
    t, dev = t or Transformer(), dev or Device()
    n = t.tokens
    act_sel = 2.0 * n * t.hidden / 2 ** 20
    f_sel = dev.ms(2.0 * t.micro_batch * t.seq * t.seq * t.hidden)
    layers = tuple(replace(l, act_sel=act_sel, f_sel=f_sel) if l.name.startswith("block") else l
                   for l in problem.layers)
    return replace(problem, layers=layers)


def _one_f_one_b_peak(problem) -> float:
    from flexpipe_ui.library import build_named
    from flexpipe_ui.sim import simulate
    return max(simulate(build_named("1f1b", replace(problem, memory_limit=None)), problem).metrics.peak_memory)


FRACTIONS = (0.8, 0.6, 0.5)
"""Caps as fractions of 1F1B's peak on an even split: a little, much and very tight."""


def preset_problems():
    from flexpipe_ui import presets
    out = []
    for frac in FRACTIONS:
        p = presets.tight_memory(8, 32, fraction=frac)
        out.append((f"gpt-8x32-cap{frac}", _selective_terms(p)))
    for name, p in (("gpt-heavy-head-8x32", presets.gpt_heavy_head(8, 32)),
                    ("vision-llm-8x32", presets.vision_llm(8, 32))):
        caps = set()
        for frac in FRACTIONS[:2]:
            q = _selective_terms(presets.tight_memory(base=p, fraction=frac))
            if q.memory_limit not in caps:          # a cap clamped at the static floor once only
                caps.add(q.memory_limit)
                out.append((f"{name}-cap{frac}", q))
    return out


def _real_spec():
    from kernel_runtime.models import demo_gpt
    return demo_gpt(vocab=2048, seq=64, dim=128, heads=4, n_blocks=6, batch_size=16)


def real_problem():
    """The demo GPT profiled on this machine (2 ranks, 8 microbatches), capped at 0.8 of 1F1B."""
    from kernel_runtime import profile
    p = profile(_real_spec(), ranks=2, microbatches=8)
    return ("demo-gpt-profiled-2x8-cap0.8", replace(p, memory_limit=round(0.8 * _one_f_one_b_peak(p), 3)))


def train_check(problem, plans: dict, *, steps: int = 6, passes: int = 3) -> None:
    """Run ``plans`` on 2 gloo ranks, interleaved (``passes`` passes of 3 warm-up + ``steps``
    steps), and print per plan the median measured step against the prediction and each rank's
    process-measured peak against the predicted one."""
    import statistics
    from flexpipe_ui.sim import simulate
    from kernel_runtime.measure.tuning import measure_plans
    measured = measure_plans(list(plans.values()), model=_real_spec(), steps=steps, warmup=3, repeat=passes,
                             devices="cpu", timeout=600)
    for (name, plan), tls in zip(plans.items(), measured):
        sim = simulate(plan, problem)
        meas = statistics.median(tl.makespan for tl in tls)
        peaks = [tl.peak_memory_measured for tl in tls if tl.peak_memory_measured]
        meas_mem = [statistics.median(p[r] for p in peaks) for r in range(len(peaks[0]))] if peaks else []
        pred_mem = list(sim.metrics.peak_memory)
        mem_err = max((abs(m - q) / q for m, q in zip(meas_mem, pred_mem) if q > 0), default=float("nan"))
        print(f"train plan={name} predicted_ms={sim.makespan:.1f} measured_ms={meas:.1f} "
              f"step_err={(meas - sim.makespan) / sim.makespan:+.3f} predicted_peak={'/'.join(f'{x:.2f}' for x in pred_mem)} "
              f"measured_peak={'/'.join(f'{x:.2f}' for x in meas_mem)} mem_err={mem_err:.3f} "
              f"cap={problem.memory_limit:g}")


def baselines(problem):
    """(makespan, description) of every fitting baseline."""
    from flexpipe_ui.costmodel import fits, selective_recompute
    from flexpipe_ui.memory_fit import full_recompute
    from flexpipe_ui.search import space as sp
    from flexpipe_ui.sim import simulate
    out = []
    for c in sp.seed_candidates(problem):
        try:
            plan = c.build()
        except Exception:
            continue
        costs = problem.stage_costs(plan.partition, plan.schedule.placement)
        variants = [("", plan, costs), (" + full recompute", full_recompute(plan), costs)]
        if costs.act_sel is not None:
            variants.append((" + selective recompute", plan, selective_recompute(costs)))
        for tag, pl, cs in variants:
            res = simulate(pl, cs)
            if fits(max(res.metrics.peak_memory), problem.memory_limit):
                # (selective recompute is a cost transform the runtime does not run: no plan to train)
                out.append((res.makespan, c.description + tag, None if "selective" in tag else pl))
    return out


def run_one(name, problem):
    from flexpipe_ui.costmodel import fits
    from flexpipe_ui.search import auto_search
    from flexpipe_ui.sim import simulate
    t0 = time.perf_counter()
    res = auto_search(problem)
    dt = time.perf_counter() - t0
    sim = simulate(res.best, problem)
    peak = max(sim.metrics.peak_memory)
    ok = fits(peak, problem.memory_limit)
    names = [a.kind.name for _, _, a in res.best.schedule.actions()]
    n_r, n_off = names.count("R"), names.count("OFF")
    n_w = int((res.best.meta.get("memory_ops") or {}).get("w_early", 0))
    base = baselines(problem)
    best = min(base, key=lambda b: b[0]) if base else (math.inf, "none fits", None)
    speed = best[0] / sim.makespan if math.isfinite(best[0]) else math.inf
    print(f"problem={name} cap={problem.memory_limit:g} auto_ms={sim.makespan:.2f} auto_peak={peak:.1f} "
          f"fits={ok} recomputes={n_r} offloads={n_off} w_moved={n_w} search_s={dt:.1f}")
    print(f"    auto: {res.candidates[0][2]}")
    print(f"    best baseline: {best[0]:.2f} ms  {best[1]}  (of {len(base)} fitting)")
    print(f"    speedup={speed:.3f}")
    return speed, ok, {"auto": res.best, **({"baseline": best[2]} if best[2] is not None else {})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-real", action="store_true", help="skip the profiled model")
    ap.add_argument("--list", action="store_true", help="print the problems and exit")
    ap.add_argument("--train", action="store_true",
                    help="also train the profiled model's auto plan and best baseline on 2 gloo ranks "
                         "(measured step and peak memory against the prediction)")
    args = ap.parse_args(argv)
    probs = preset_problems()
    if not args.no_real:
        probs.append(real_problem())
    if args.list:
        for name, p in probs:
            print(name, p.ranks, p.microbatches, p.num_layers, p.memory_limit)
        return 0
    speeds, fit = [], 0
    for name, p in probs:
        s, ok, plans = run_one(name, p)
        speeds.append(s)
        fit += ok
        if args.train and name.startswith("demo-gpt-profiled"):
            train_check(p, plans)
    print(f"memory_auto_speedup_min={min(speeds):.3f} memory_auto_speedup_median={statistics.median(speeds):.3f} "
          f"fits={fit}/{len(probs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
