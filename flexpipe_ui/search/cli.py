"""``flexpipe auto PROBLEM.json -o PLAN.json [--ranks P] [--microbatches M] [--time-limit S] [--top K]
[--seed N] [--exact S] [--write-problem FILE]`` (or ``--preset NAME`` instead of a file).

The plan files it writes carry the problem they were searched for (``meta["problem"]``), so
``flexpipe show/simulate`` show the same ms and MiB without ``--problem``. Prints the top-K table (makespan, peak memory, what it is) and the search statistics; writes the
best plan to ``-o`` and, with ``--top K``, the runners-up beside it as ``PLAN.2.json`` ... Progress
(each new best) goes to stderr unless ``--quiet``.
"""
from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["register"]


def _runner_up_path(out: Path, k: int) -> Path:
    return out.with_name(f"{out.stem}.{k}{out.suffix or '.json'}")


def _cmd_auto(args) -> int:
    from ..planfile import save_plan
    from ..problem import load_problem
    from .driver import auto_search

    if args.problem is None and args.preset is None:
        raise ValueError("give a problem file (flexpipe auto PROBLEM.json -o PLAN.json) or --preset NAME")
    if args.problem is not None and args.preset is not None:
        raise ValueError("give either a problem file or --preset, not both")
    if args.preset is not None:
        from ..presets import preset
        problem = preset(args.preset)
    else:
        problem = load_problem(args.problem)
    for flag, value in (("--ranks", args.ranks), ("--microbatches", args.microbatches)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.ranks is not None or args.microbatches is not None:
        if args.preset is not None:
            from ..presets import preset
            problem = preset(args.preset, ranks=args.ranks or problem.ranks,
                             microbatches=args.microbatches or problem.microbatches)
        else:
            problem = problem.with_(ranks=args.ranks or problem.ranks,
                                    microbatches=args.microbatches or problem.microbatches)
    if args.memory_limit is not None:
        problem = problem.with_(memory_limit=args.memory_limit)
    if args.write_problem:
        from ..problem import save_problem
        save_problem(problem, args.write_problem)
        print(f"wrote {args.write_problem} (the problem searched: {problem.ranks} ranks, "
              f"{problem.microbatches} microbatches, {problem.num_layers} layers)", file=sys.stderr)
    if args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    if args.time_limit is not None and args.time_limit <= 0:
        raise ValueError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    if args.exact < 0:
        raise ValueError(f"--exact must be >= 0 seconds, got {args.exact}")
    if args.exact > 0:
        from .exact import available
        if not available():
            raise ValueError("--exact needs OR-Tools: pip install ortools (or the package's [exact] extra)")

    best = [float("inf")]

    def progress(ev) -> None:
        if ev.best_makespan < best[0]:
            best[0] = ev.best_makespan
            left = f" (~{ev.estimate:.0f}s to go)" if ev.estimate is not None else ""
            print(f"[{ev.elapsed:6.2f}s] #{ev.evaluated:<4} {ev.phase:<7} best {ev.best_makespan:.6g}{left}  "
                  f"{ev.description}", file=sys.stderr)

    res = auto_search(problem, time_limit=args.time_limit, seed=args.seed, top=args.top,
                      progress=None if args.quiet else progress, max_evals=args.max_evals,
                      exact=args.exact)
    out = Path(args.output)
    save_plan(res.best, out, problem=problem)
    for k, (plan, _, _) in enumerate(res.candidates[1:], 2):
        save_plan(plan, _runner_up_path(out, k), problem=problem)
    print("\n".join(res.table().splitlines()[:len(res.candidates) + 1]))
    st = res.stats
    seed_txt = ""
    if res.best_seed is not None:
        seed_txt = (f"; best library schedule {res.best_seed[1].makespan:.6g} ({res.best_seed[2]}), "
                    f"speed-up {res.best_seed[1].makespan / res.makespan:.3f}x")
    limit = problem.memory_limit
    from .bounds import ideal_makespan
    lb = ideal_makespan(problem)
    ratio = (f"; auto is {res.makespan / res.lower_bound:.3f}x / {res.makespan / lb:.3f}x of them"
             if lb > 0 else "")
    print(f"lower bound {res.lower_bound:.6g} (no plan is faster; sum of work / ranks alone: {lb:.6g})"
          f"{ratio}{seed_txt}")
    for run in st.get("exact", []):
        if "before" in run:
            print(f"exact order ({run['status']}, {run['seconds']:.1f} s): {run['before']:.6g} -> {run['after']:.6g}, "
                  f"nothing on this structure beats {run['bound']:.6g}: {run['candidate']}")
        else:
            print(f"exact order: {run['status']}")
    if limit is not None:
        from ..memory_fit import memory_summary
        print(memory_summary(res.best, problem, res.makespan))
    print(f"memory limit {limit if limit is not None else 'none'}; evaluated {st['evaluated']}, "
          f"pruned {st['pruned']}, over memory {st['over_memory']}, failed {st['failed']} in "
          f"{st['elapsed_s']:.2f} s (stopped: {st['stopped']})")
    print(f"wrote {out}" + (f" and {len(res.candidates) - 1} runner-up plan(s)" if len(res.candidates) > 1 else ""))
    return 0


def register(sub) -> None:
    from .. import cli_types as T
    from ..limits import MAX_NUMBER, MAX_TIMEOUT
    p = sub.add_parser("auto", help="auto-schedule: best partition + schedule for a problem file")
    p.add_argument("problem", nargs="?", help="flexpipe-problem/1 JSON (e.g. written by `flexpipe profile`)")
    p.add_argument("-o", "--output", required=True, help="where to write the best plan")
    from ..presets import PRESETS
    p.add_argument("--preset", choices=list(PRESETS),
                   help="use a built-in problem preset (flexpipe_ui.presets) instead of a file")
    p.add_argument("--time-limit", type=T.seconds, default=None, metavar="S",
                   help="stop after S seconds with the best so far (makes the result machine-dependent)")
    p.add_argument("--top", type=T.integer(1, 100), default=1, metavar="K", help="also report and write the K best plans")
    p.add_argument("--seed", type=T.integer(0, 2**32 - 1), default=0, help="tie-break seed (same seed, same result)")
    p.add_argument("--max-evals", type=T.integer(1, 10**9), default=None, metavar="N", help="simulation budget")
    p.add_argument("--memory-limit", type=T.number(minimum=0.0, maximum=MAX_NUMBER, strict=True), default=None, help="override the problem's per-rank cap")
    p.add_argument("--ranks", type=T.ranks, default=None, metavar="P", help="override the problem's pipeline ranks")
    p.add_argument("--microbatches", type=T.microbatches, default=None, metavar="M",
                   help="override the problem's microbatches per step")
    p.add_argument("--write-problem", metavar="FILE",
                   help="also write the problem searched (a preset's, with the overrides) as flexpipe-problem/1")
    p.add_argument("--exact", type=T.number(minimum=0.0, maximum=MAX_TIMEOUT), default=0.0, metavar="S",
                   help="spend S seconds re-ordering the best structures' actions with CP-SAT (needs ortools; "
                        "wall-clock, so machine-dependent); prints each structure's proven lower bound")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=_cmd_auto)
