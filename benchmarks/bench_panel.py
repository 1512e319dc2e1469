"""AutoPanel overhead: the panel's wall time over ``auto_search``'s on the same problem.

    python benchmarks/bench_panel.py [--preset gpt] [--ranks 4] [--microbatches 8] [--repeats 3]

Runs ``auto_search(problem)`` and ``AutoPanel(problem).run(wait=True)`` (no front end: the widget
messages go nowhere, as in a kernel whose page is closed) alternately ``--repeats`` times, both
with the panel's default keywords and no time limit, so both run the same deterministic search.
Last line: ``autopanel_overhead=<median panel seconds / median auto_search seconds>``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from flexpipe_ui.presets import preset
    from flexpipe_ui.search import auto_search
    from flexpipe_ui.widgets import AutoPanel

    problem = preset(args.preset, ranks=args.ranks, microbatches=args.microbatches)
    panel = AutoPanel(problem, time_limit=0, top=5)          # time 0: no time limit (same search)
    opts = {k: v for k, v in panel.search_options().items() if k not in ("progress", "stop")}
    auto_search(problem, **opts)                              # warm caches and imports for both
    t_auto, t_panel, same = [], [], True
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = auto_search(problem, **opts)
        t_auto.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        panel.run(wait=True)
        t_panel.append(time.perf_counter() - t0)
        same &= panel.result is not None and abs(panel.result.makespan - res.makespan) < 1e-9
    a, p = statistics.median(t_auto), statistics.median(t_panel)
    print(f"{args.preset} {args.ranks}x{args.microbatches}: auto_search median {a:.3f} s "
          f"({', '.join(f'{x:.3f}' for x in t_auto)}), AutoPanel median {p:.3f} s "
          f"({', '.join(f'{x:.3f}' for x in t_panel)}); same best plan: {same}; "
          f"{panel.result.stats['evaluated']} evaluations")
    print(f"autopanel_overhead={p / a:.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
