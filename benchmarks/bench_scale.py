"""The auto-scheduler at the scale people train: 8 × 32 up to 128 ranks × 512 microbatches.

Problems (``scale_problem``): GPT-like, an embedding, 3 decoder blocks per rank (Llama-3-8B-sized,
one 1,024-token sequence per microbatch) and an LM head three times a block (its vocabulary sized
so), under the 80 GiB device cap of ``presets.Device``: ranks × 4 microbatches, 8 × 32 to 128 × 512
(the head rank can hold the head alone while three ranks carry a fourth block, so the plan bound's
packing term is what a good plan has to approach).

Per size, each search in a fresh process (peak RSS is the process's): search seconds (median of
``--repeat`` runs, CPU seconds beside), peak RSS, candidates built / abandoned / pruned, auto's
makespan / the plan bound (``search.plan_bound`` = ``SearchResult.lower_bound``), and the best
library plan's makespan / auto's (every library schedule × chunk count × even and balanced split,
simulated independently of the search; "OOM" when none fits). ``--stop`` also measures how long a
64 × 256 search takes to return after ``stop()`` turns true (in a thread, stop set after 3 s).

Last line: ``scale_search_s_p64=<64 × 256 search seconds> scale_bound_ratio_max=<worst auto / bound>``.

    .venv/bin/python benchmarks/bench_scale.py                 # all sizes (several minutes on one core)
    .venv/bin/python benchmarks/bench_scale.py --max-ranks 64  # skip 128 × 512
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

SIZES = ((8, 32), (16, 64), (32, 128), (64, 256), (128, 512))


def scale_problem(ranks: int, microbatches: int, *, blocks_per_rank: int = 3, head: float = 3.0,
                  seq: int = 1024):
    """Embedding + ``blocks_per_rank`` × ranks decoder blocks + an LM head ``head`` times a block
    (F + I + W), Llama-3-8B block shapes, ``seq`` tokens per microbatch, 80 GiB cap."""
    from flexpipe_ui.presets import Transformer, gpt
    t = Transformer()
    # head flops 2·n·h·V per pass vs a block's 2·n·P + attention 2·n·s·h (same F:I:W split of 1:1:1
    # for the head's matmul, and the block's F + I + W = 6nP + 6ns·h): V = head · (P / h + s)
    vocab = int(round(head * (t.block_params / t.hidden + seq)))
    return gpt(ranks, microbatches, model=Transformer(blocks=blocks_per_rank * ranks, vocab=vocab, seq=seq),
               name="scale_gpt")


def best_library(problem) -> tuple[float, str]:
    """Fastest fitting library plan (every schedule × chunks × even/balanced split), simulated."""
    from flexpipe_ui.costmodel import fits
    from flexpipe_ui.search import space as sp
    from flexpipe_ui.sim import simulate
    best, desc = math.inf, "none fits"
    for c in sp.seed_candidates(problem):
        try:
            res = simulate(c.build(), problem)
        except ValueError:
            continue
        if fits(res.metrics.max_peak_memory, problem.memory_limit) and res.makespan < best:
            best, desc = res.makespan, c.description
    return best, desc


def one(ranks: int, microbatches: int, library: bool) -> dict:
    """One search (this process): the figures of one size as a dict."""
    from flexpipe_ui.search import auto_search, plan_bound
    problem = scale_problem(ranks, microbatches)
    phases: dict = {}

    def progress(ev) -> None:
        phases.setdefault(ev.phase, ev.elapsed)

    t0, c0 = time.perf_counter(), time.process_time()
    res = auto_search(problem, progress=progress)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    bound = plan_bound(problem)
    assert res.lower_bound == bound
    out = {"ranks": ranks, "microbatches": microbatches, "layers": problem.num_layers, "wall": wall, "cpu": cpu,
           "rss_mb": rss, "makespan": res.makespan, "bound": bound, "stats": res.stats,
           "best": res.candidates[0][2], "actions": res.best.schedule.num_actions, "phases": phases}
    if library:
        lib, desc = best_library(problem)
        out.update(library=lib, library_desc=desc)
    return out


def stop_latency(ranks: int = 64, microbatches: int = 256, after: float = 3.0) -> tuple[float, str]:
    """Seconds from ``stop()`` turning true to ``auto_search`` returning (or raising)."""
    from flexpipe_ui.search import SearchCancelled, auto_search
    problem = scale_problem(ranks, microbatches)
    ev = threading.Event()
    done: dict = {}

    def run() -> None:
        try:
            r = auto_search(problem, stop=ev.is_set)
            done["how"] = r.stats["stopped"]
        except SearchCancelled:
            done["how"] = "cancelled before a plan"
        done["t"] = time.perf_counter()

    th = threading.Thread(target=run)
    th.start()
    time.sleep(after)
    t_stop = time.perf_counter()
    ev.set()
    th.join()
    return done["t"] - t_stop, done["how"]


def _child(ranks: int, microbatches: int, library: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", str(ranks), str(microbatches)]
    if not library:
        cmd.append("--no-library")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="searches per size up to 64 ranks (median); 1 at 128")
    ap.add_argument("--max-ranks", type=int, default=128)
    ap.add_argument("--stop", action="store_true", help="also measure the stop latency at 64 x 256")
    ap.add_argument("--one", nargs=2, type=int, metavar=("RANKS", "MICROBATCHES"), help=argparse.SUPPRESS)
    ap.add_argument("--no-library", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, library=not args.no_library)))
        return 0
    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    print(f"{'size':>9} {'layers':>6} {'search s':>9} {'CPU s':>6} {'RSS MB':>7} {'built':>5} {'aband.':>6} "
          f"{'pruned':>6} {'auto/bound':>10} {'lib/auto':>8}  best")
    rows = []
    for ranks, mbs in SIZES:
        if ranks > args.max_ranks:
            continue
        runs = [_child(ranks, mbs, library=True)]
        for _ in range((args.repeat if ranks <= 64 else 1) - 1):
            runs.append(_child(ranks, mbs, library=False))
        r = runs[0]
        for x in runs[1:]:
            assert x["makespan"] == r["makespan"] and x["best"] == r["best"], "the search is deterministic"
        wall = statistics.median(x["wall"] for x in runs)
        cpu = statistics.median(x["cpu"] for x in runs)
        rss = max(x["rss_mb"] for x in runs)
        st = r["stats"]
        ratio = r["makespan"] / r["bound"]
        lib = r["library"] / r["makespan"] if math.isfinite(r["library"]) else math.nan
        rows.append((ranks, mbs, wall, ratio, lib, rss))
        print(f"{ranks:>4}x{mbs:<4} {r['layers']:>6} {wall:>9.2f} {cpu:>6.2f} {rss:>7.0f} "
              f"{st['evaluated'] - st.get('abandoned', 0):>5} {st.get('abandoned', 0):>6} {st['pruned']:>6} "
              f"{ratio:>10.4f} {f'{lib:.4f}' if math.isfinite(lib) else 'OOM':>8}  {r['best'][:90]}", flush=True)
        phases = ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
        print(f"{'':>10}phases start at (s): {phases}; {r['actions']} actions; stopped: {st['stopped']}; "
              f"best library {r['library']:.1f} ({r['library_desc']}); runs {[round(x['wall'], 2) for x in runs]}",
              flush=True)
    if args.stop:
        lat, how = stop_latency()
        print(f"stop at 3 s into a 64 x 256 search: returned {lat * 1e3:.0f} ms later ({how})")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    p64 = [r for r in rows if r[0] == 64]
    print(f"scale_search_s_p64={p64[0][2]:.2f} " if p64 else "scale_search_s_p64=nan ", end="")
    print(f"scale_bound_ratio_max={max(r[3] for r in rows):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
