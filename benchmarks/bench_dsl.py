"""Benchmark: generate + simulate every library schedule (and typical DSL programs) at 8 ranks x 32
microbatches, and the peer table (ours vs torch.distributed.pipelining, same simulator).

    .venv/bin/python benchmarks/bench_dsl.py [--repeat N] [--no-torch]

The last line is ``ms_per_schedule=<n>``: the slowest library schedule's median time (ms) for
``build_named`` + ``simulate`` with uniform costs (target < 20 ms: the auto-scheduler evaluates
thousands).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flexpipe_ui.dsl import Program, Rules, looped, vshape, wave  # noqa: E402
from flexpipe_ui.library import NAMED, build_named  # noqa: E402
from flexpipe_ui.problem import Layer, Problem  # noqa: E402
from flexpipe_ui.sim import simulate  # noqa: E402

P, M = 8, 32


def _median_ms(fn, repeat: int) -> float:
    fn()  # warm caches (kind registry, numpy)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()

    print(f"generate + simulate at p={P}, m={M} (median of {args.repeat}, ms)")
    lib = {}
    for name in NAMED:
        lib[name] = _median_ms(lambda: simulate(build_named(name, None, ranks=P, microbatches=M)),
                               args.repeat)
        print(f"  library {name:<18} {lib[name]:7.2f}")
    prob = Problem(ranks=P, microbatches=M, comm=0.05, memory_limit=40.0,
                   layers=(Layer(f=2.0, b=2.0, w=1.0, act=2.0, mem=4.0),)
                   + tuple(Layer(f=1.0, b=1.1, w=0.9, act=1.0, mem=1.0) for _ in range(32))
                   + (Layer(f=3.0, b=3.0, w=2.0, act=1.0, mem=4.0),))
    programs = {
        "zb rules, vshape, 34 layers": Program(placement=vshape(), rules=Rules(
            backward="split", priority=("I", "F", "W"), w_policy="fill", in_flight="2*p")),
        "1f1b rules + memory cap": Program(rules=Rules(in_flight="p - r", memory_cap=40.0)),
        "wave(4), split, eager W": Program(placement=wave(4), rules=Rules(backward="split", w_policy="eager")),
        "looped(2), breadth": Program(placement=looped(2), rules=Rules(traversal="breadth", in_flight="v*p")),
    }
    for label, prog in programs.items():
        def run(prog=prog):
            plan = prog.plan(problem=prob)
            simulate(plan, prob)
        print(f"  program {label:<30} {_median_ms(run, args.repeat):7.2f}")

    if not args.no_torch:
        from flexpipe_ui.torch_interop import import_torch_schedule
        from flexpipe_ui.validate import check
        print(f"\nours vs torch.distributed.pipelining, uniform costs, comm 0, p={P}, m={M}")
        print(f"  {'schedule':<18} {'ours':>8} {'torch':>8}   {'our peak mem':>12} {'torch peak mem':>14}")
        for name in NAMED:
            ours = simulate(build_named(name, None, ranks=P, microbatches=M))
            try:
                t = import_torch_schedule(name, P, M)
                tr = None if check(t) else simulate(t)
            except ValueError:
                tr = None
            tm = f"{tr.makespan:8.1f}" if tr else "       -"
            tmem = f"{max(tr.metrics.peak_memory):14.1f}" if tr else "             -"
            note = "" if tr else ("  (torch's 1F1B fails validation)" if name == "1f1b" else "  (not in torch)")
            print(f"  {name:<18} {ours.makespan:8.1f} {tm}   {max(ours.metrics.peak_memory):12.1f} {tmem}{note}")
    worst = max(lib, key=lib.get)
    print(f"\nslowest library schedule: {worst}")
    print(f"ms_per_schedule={lib[worst]:.2f}")


if __name__ == "__main__":
    main()
