"""Simulator throughput on a ZB-V-shaped schedule (imported from torch) at 32 ranks × 128 microbatches.

Prints: actions, rounds, time per simulation (fresh schedule object: flatten + checks + timing +
memory metrics; and warm: same object, cached compiled form, e.g. new costs), then, last line,
``actions_per_s=<fresh figure>``. A plain per-rank Python event loop (the oracle in
tests/test_sim.py's style) is timed on the same schedule for comparison.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from flexpipe_ui import Schedule, simulate, uniform_costs  # noqa: E402
from flexpipe_ui.torch_interop import import_torch_schedule  # noqa: E402


def naive_event_loop(s: Schedule, dur: float = 1.0 / 2) -> float:
    ends: dict = {}
    ptr, t = [0] * s.ranks, [0.0] * s.ranks
    S = s.num_stages
    left = s.num_actions
    while left:
        for r in range(s.ranks):
            row = s.order[r]
            while ptr[r] < len(row):
                a = row[ptr[r]]
                k, st, m = a.kind.name, a.stage, a.microbatch
                if k == "F":
                    deps = [(st - 1, "F", m)] if st else []
                elif k == "I":
                    deps = [(st, "F", m)] + ([(st + 1, "I", m)] if st < S - 1 else [])
                else:
                    deps = [(st, "I", m)]
                if any(d not in ends for d in deps):
                    break
                start = max([t[r]] + [ends[d] for d in deps])
                t[r] = ends[(st, k, m)] = start + dur
                ptr[r] += 1
                left -= 1
    return max(t)


def main() -> None:
    p, m = 32, 128
    base = import_torch_schedule("zb-v", p, m)
    n = base.num_actions
    costs = uniform_costs(base.num_stages, p)
    fresh = []
    for _ in range(7):
        s = Schedule(base.ranks, base.microbatches, base.placement, base.order)
        t0 = time.perf_counter()
        res = simulate(s, costs)
        fresh.append(time.perf_counter() - t0)
    warm = []
    for _ in range(7):
        t0 = time.perf_counter()
        simulate(s, costs)
        warm.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    naive = naive_event_loop(base)
    t_naive = time.perf_counter() - t0
    assert naive == res.makespan, (naive, res.makespan)
    f, w = min(fresh), min(warm)
    print(f"schedule: torch ZBVZeroBubble, {p} ranks x {m} microbatches, {n} actions, "
          f"makespan {res.makespan}, {res.rounds} sweeps of the lane solver")
    print(f"fresh schedule : {f * 1e3:7.2f} ms  -> {n / f:,.0f} actions/s (best of 7)")
    print(f"warm (cached)  : {w * 1e3:7.2f} ms  -> {n / w:,.0f} actions/s")
    print(f"naive loop     : {t_naive * 1e3:7.2f} ms  -> {n / t_naive:,.0f} actions/s (same makespan)")
    print(f"actions_per_s={n / f:.0f}")


if __name__ == "__main__":
    main()
