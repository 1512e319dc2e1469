"""Why split-backward plans ran slower than predicted: plan switching, deferred W, the split itself,
the profiler's timing order (docs/cost_model.md, "Split backward, plan switching, contention").

On bench_truth's models (2 ranks, CPU gloo), one profile shared by the plans compared:

- ``switch``: the four library plans interleaved in one launch vs each in a launch of its own
  (same steps and passes); medians, ms.
- ``defer``: 1F1B, 1F1B with every B split in place, ZB-H1 and ZB-V, and ZB-H1 / ZB-V with every
  W moved right after its own I, in one launch; median makespan and per-(rank, kind) ms a step.
- ``split``: 1F1B and GPipe with every odd microbatch's B split into I then W in place (fused and
  split timed in the same run); per stage I + W / B, against the profile's.
- ``partitions``: 1F1B, ZB-H1, ZB-H2, ZB-V and interleaved 1F1B, each on the even and the balanced
  partition, in one launch; measured and predicted makespans.
- ``probe``: in this process, one stage (``--stage``) timed in the profiler's old order
  (F I W, then F B), the opposite order, steady sequences, and the profiler's current order;
  split / fused ratio per variant.

    python benchmarks/diagnose_split.py [--what switch,defer,split,partitions,probe] [--model gpt-heavy-head]
        [--reps 2] [--small]
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from truth_models import fixed_models as models, library_plans  # noqa: E402


def reorder(plan, *, split_odd: bool = False, split_all: bool = False, w_now: bool = False):
    """The plan with fused Bs split in place into I then W (odd microbatches, or all), or with every
    W moved right after its own I."""
    from flexpipe_ui.ir import Plan, Schedule, parse_action
    sched = plan.schedule
    order = []
    for row in sched.order:
        ws = {(a.stage, a.microbatch): a for a in row if a.kind.name == "W"} if w_now else {}
        new = []
        for a in row:
            if w_now and a.kind.name == "W":
                continue
            if a.kind.name == "B" and (split_all or (split_odd and a.microbatch % 2 == 1)):
                new += [parse_action(f"{a.stage}I{a.microbatch}"), parse_action(f"{a.stage}W{a.microbatch}")]
                continue
            new.append(a)
            if w_now and a.kind.name == "I":
                new.append(ws[(a.stage, a.microbatch)])
        order.append(tuple(new))
    return Plan(Schedule(sched.ranks, sched.microbatches, sched.placement, tuple(order)), plan.partition,
                dict(plan.meta or {}))


def per_kind(tls, key=lambda a, r: (int(r), a.kind.name), stat=sum) -> dict:
    """Per key, the median over steps of ``stat`` of the key's action durations in a step."""
    out = collections.defaultdict(list)
    for tl in tls:
        step = collections.defaultdict(list)
        for a, r, s, e in zip(tl.actions, tl.rank, tl.start, tl.end):
            step[key(a, r)].append(float(e - s))
        for k, v in step.items():
            out[k].append(stat(v))
    return {k: statistics.median(v) for k, v in sorted(out.items())}


def med(tls) -> float:
    return statistics.median(tl.makespan for tl in tls)


def run_switch(spec, prob, reps: int) -> None:
    from kernel_runtime.measure.tuning import measure_plans
    lib = library_plans(prob)
    names = list(lib)
    for rep in range(reps):
        tls = measure_plans([lib[n] for n in names], model=spec, steps=4, warmup=1, repeat=5, devices="cpu",
                            timeout=300)
        inter = {n: med(t) for n, t in zip(names, tls)}
        alone = {n: med(measure_plans([lib[n]], model=spec, steps=4, warmup=1, repeat=5, devices="cpu",
                                      timeout=300)[0]) for n in names}
        print(f"switch rep {rep + 1}: " + "; ".join(f"{n} interleaved {inter[n]:.1f} alone {alone[n]:.1f}"
                                                    for n in names), flush=True)


def run_defer(spec, prob) -> None:
    from flexpipe_ui.sim import simulate
    from kernel_runtime.measure.tuning import measure_plans
    lib = library_plans(prob)
    plans = {"1f1b": lib["1f1b"], "1f1b+split": reorder(lib["1f1b"], split_all=True),
             "zb-h1": lib["zb-h1"], "zb-h1 W-now": reorder(lib["zb-h1"], w_now=True),
             "zb-v": lib["zb-v"], "zb-v W-now": reorder(lib["zb-v"], w_now=True)}
    tls = measure_plans(list(plans.values()), model=spec, steps=4, warmup=1, repeat=4, devices="cpu", timeout=300)
    for (n, plan), t in zip(plans.items(), tls):
        kinds = per_kind(t)
        print(f"defer {n}: makespan {med(t):.1f} (predicted {simulate(plan, prob).makespan:.1f}); per rank and kind "
              "(ms a step): " + ", ".join(f"r{r}{k} {v:.1f}" for (r, k), v in kinds.items()), flush=True)


def run_split(spec, prob) -> None:
    from flexpipe_ui.library import build_named
    from kernel_runtime.measure.tuning import measure_plans
    plans = {"1f1b-alt": reorder(build_named("1f1b", prob), split_odd=True),
             "gpipe-alt": reorder(build_named("gpipe", prob), split_odd=True)}
    tls = measure_plans(list(plans.values()), model=spec, steps=4, warmup=1, repeat=4, devices="cpu", timeout=300)
    costs = prob.stage_costs(plans["1f1b-alt"].partition)
    for (n, plan), t in zip(plans.items(), tls):
        d = per_kind(t, key=lambda a, r: (a.stage, a.kind.name), stat=statistics.median)
        for s in range(plan.schedule.num_stages):
            i, w, b = d.get((s, "I"), 0.0), d.get((s, "W"), 0.0), d.get((s, "B"), float("nan"))
            pb = costs.bw[s] if costs.bw is not None else costs.b[s] + costs.w[s]
            print(f"split {n} stage {s}: F {d.get((s, 'F'), 0):.2f} I {i:.2f} W {w:.2f} B {b:.2f} ms; "
                  f"(I + W) / B measured {(i + w) / b:.3f}, profiled {(costs.b[s] + costs.w[s]) / pb:.3f}",
                  flush=True)


def run_partitions(spec, prob) -> None:
    from flexpipe_ui.library import build_named
    from flexpipe_ui.sim import simulate
    from kernel_runtime.measure.tuning import measure_plans
    plans = {}
    for name in ("1f1b", "zb-h1", "zb-h2", "zb-v", "interleaved-1f1b"):
        plans[name] = build_named(name, prob)
        plans[name + " balanced"] = build_named(name, prob, partition="balanced")
    tls = measure_plans(list(plans.values()), model=spec, steps=4, warmup=1, repeat=4, devices="cpu", timeout=300)
    for (n, plan), t in zip(plans.items(), tls):
        m, p = med(t), simulate(plan, prob).makespan
        print(f"partitions {n} {[len(x) for x in plan.partition]}: measured {m:.1f} predicted {p:.1f} "
              f"({m / p - 1:+.1%})", flush=True)


def run_probe(spec, stage: tuple[int, ...], reps: int) -> None:
    import torch

    from kernel_runtime.run.executor import MBState
    from kernel_runtime.models import as_spec
    from kernel_runtime.measure.profile_time import HANDLERS, STEADY, _one_rep, _Probe, unit_inputs
    torch.set_num_threads(1)
    spec = as_spec(spec, None)
    x, tgt = spec.batch(0, max(1, spec.batch_size // 8), torch.Generator().manual_seed(0))
    layers = spec.layers(range(spec.num_layers), 0, device=torch.device("cpu"), dtype=torch.float32)
    ins, gys = unit_inputs(layers, [stage], x, spec.loss_fn, tgt)
    p = _Probe([layers[i] for i in stage], spec.loss_fn, ins[stage], tgt, gys[stage],
               stage[0] == 0 and not x.is_floating_point(), stage[-1] == spec.num_layers - 1)

    def act(k, st):
        t = time.perf_counter()
        if k == "F":
            with p.saved.hooks():
                HANDLERS["F"](p, p.action("F"), st)
        else:
            HANDLERS[k](p, p.action(k), st)
        return (time.perf_counter() - t) * 1e3

    def groups(pattern):
        got = {"split": [], "fused": []}
        for g in pattern:
            st = MBState()
            t = 0.0
            for k in g:
                d = act(k, st)
                t += d if k != "F" else 0.0           # the backward's time: I + W, or B
            got["fused" if g == "FB" else "split"].append(t)
        for q in p.params:
            q.grad = None
        return got

    variants = {
        "old probe (F I W, then F B)": lambda: groups(("FIW", "FB")),
        "opposite (F B, then F I W)": lambda: groups(("FB", "FIW")),
        "steady (4 x F B, 4 x F I W)": lambda: groups(("FB",) * 4 + ("FIW",) * 4),
    }
    res = {k: collections.defaultdict(list) for k in variants}
    res["profiler now (profile_time._one_rep)"] = collections.defaultdict(list)
    for rep in range(reps):
        for name, fn in variants.items():
            for k, v in fn().items():
                res[name][k] += v
        r = _one_rep(p, torch.device("cpu"))
        res["profiler now (profile_time._one_rep)"]["split"] += [i + w for i, w in zip(r["b"], r["w"])]
        res["profiler now (profile_time._one_rep)"]["fused"] += list(r["bw"])
    for name, got in res.items():
        s, f = statistics.median(got["split"][2:]), statistics.median(got["fused"][2:])
        print(f"probe {name}: I + W {s:.2f} ms, B {f:.2f} ms, split / fused {s / f:.3f}", flush=True)
    print(f"(profiler now: {STEADY} microbatches of each pattern per repetition, the first not timed)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--what", default="switch,defer,split,partitions,probe")
    ap.add_argument("--model", default="gpt-heavy-head")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of 'switch'; x6 for 'probe'")
    ap.add_argument("--stage", default=None, help="layers of the stage 'probe' times (default: the "
                    "1F1B partition's last stage)")
    ap.add_argument("--small", action="store_true", help="tiny models (smoke test)")
    args = ap.parse_args(argv)
    from kernel_runtime.measure.profiler import profile
    spec = models(args.small)[args.model]
    what = args.what.split(",")
    prob = None
    if set(what) - {"probe"}:
        prob = profile(spec, ranks=2, microbatches=8, device="cpu")
    if "switch" in what:
        run_switch(spec, prob, args.reps)
    if "defer" in what:
        run_defer(spec, prob)
    if "split" in what:
        run_split(spec, prob)
    if "partitions" in what:
        run_partitions(spec, prob)
    if "probe" in what:
        if args.stage:
            stage = tuple(int(c) for c in args.stage.split(","))
        else:
            from kernel_runtime.models import as_spec
            n = as_spec(spec, None).num_layers
            stage = tuple(range(n // 2, n))
        run_probe(spec, stage, max(3, 6 * args.reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
