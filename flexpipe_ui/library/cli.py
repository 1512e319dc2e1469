"""``flexpipe plan``: write a named library schedule (or a DSL program) as a plan file.

    flexpipe plan NAME --problem PROBLEM.json -o PLAN.json [--chunks V] [--partition even|balanced]
    flexpipe plan --program "Program(placement=vshape(), rules=Rules(backward='split'))" --problem P -o PLAN
    flexpipe plan --list
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["register"]


def register(sub) -> None:
    from .. import cli_types as T
    p = sub.add_parser("plan", help="write a named schedule (or a DSL program) as a plan file",
                       description="Write a library schedule or a DSL program as a flexpipe-plan/1 file.")
    p.add_argument("name", nargs="?", help="schedule name (see --list)")
    p.add_argument("--list", action="store_true", help="list the named schedules and exit")
    p.add_argument("--program", help="a DSL program instead of a name, e.g. \"Program(placement=vshape(), "
                                     "rules=Rules(backward='split', priority=('I', 'F', 'W')))\"")
    p.add_argument("--problem", help="flexpipe-problem/1 file (ranks, microbatches, layer costs)")
    p.add_argument("--ranks", type=T.ranks, help="ranks (default: the problem's; required without one)")
    p.add_argument("--microbatches", type=T.microbatches, help="microbatches (default: the problem's)")
    p.add_argument("--chunks", type=T.integer(1, 64), help="stages per rank (default: the schedule's own)")
    p.add_argument("--partition", default="even", choices=("even", "balanced"),
                   help="layer split: even by count (earlier stages take the extra) or cost-balanced")
    p.add_argument("--recompute", action="store_true",
                   help="with --program: recompute every stage's forward before its backward (kind R)")
    p.add_argument("--layout", metavar="STR",
                   help="stage split as a Megatron-Core --pipeline-model-parallel-layout string, "
                        "e.g. 'Et*3|t*4|t*3L' (E embedding, t block, L loss/head, | between stages)")
    p.add_argument("-o", "--output", help="plan file to write")
    p.set_defaults(func=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    from . import list_named
    if args.list:
        for name, desc in list_named():
            print(f"{name:<18} {desc}")
        return 0
    if bool(args.name) == bool(args.program):
        raise ValueError("give a schedule NAME or --program (see flexpipe plan --list)")
    if not args.output:
        raise ValueError("give -o PLAN.json to write the plan")
    from ..planfile import save_plan
    from ..problem import load_problem
    from ..costmodel import fits
    from ..sim import simulate
    from ..validate import validate
    from . import NAMED
    if args.name and args.name not in NAMED:
        raise ValueError(f"unknown schedule {args.name!r}; known: {', '.join(NAMED)} (flexpipe plan --list)")
    problem = load_problem(args.problem) if args.problem else None
    if problem is None and args.ranks is None:
        raise ValueError("give --problem PROBLEM.json, or --ranks and --microbatches for uniform costs")
    if problem is None and args.microbatches is None:
        raise ValueError("give --microbatches (or --problem)")
    from ..limits import check_plan_size
    ranks = args.ranks if args.ranks is not None else problem.ranks
    check_plan_size(ranks * (args.chunks or 2), args.microbatches or problem.microbatches)
    layout = None
    if args.layout:
        from ..layout import parse_layout
        layout = parse_layout(args.layout, problem.num_layers if problem else None)
        if args.partition != "even":
            print("flexpipe plan: warning: --partition has no effect with --layout", file=sys.stderr)
        ranks = args.ranks or problem.ranks
        if args.name and args.name in NAMED and args.chunks is None and len(layout) % ranks == 0:
            try:                              # the layout's stages per rank, if the family has that
                NAMED[args.name].chunks_for(len(layout) // ranks)
                args.chunks = len(layout) // ranks
            except ValueError:
                pass
        if problem is not None:
            args.partition = layout
    if args.program:
        from ..dsl import program_from_source
        prog = program_from_source(args.program)
        if args.recompute:
            from ..ops import register_recompute
            register_recompute()
            prog = prog.with_(extra={**prog.extra, "R": "all"})
        if args.chunks is not None:
            print("flexpipe plan: warning: --chunks has no effect with --program (the placement "
                  "decides)", file=sys.stderr)
        plan = prog.plan(ranks=args.ranks, microbatches=args.microbatches, problem=problem,
                         partition=args.partition)
    else:
        if args.recompute:
            raise ValueError("--recompute works with --program; named schedules have fixed orders")
        from . import build_named
        plan = build_named(args.name, problem, ranks=args.ranks, microbatches=args.microbatches,
                           chunks=args.chunks, partition=args.partition)
    if layout is not None:
        if plan.schedule.num_stages != len(layout):
            raise ValueError(f"--layout {args.layout!r} has {len(layout)} stages but the schedule has "
                             f"{plan.schedule.num_stages} ({plan.ranks} ranks): give as many stages, "
                             "or --chunks to match")
        from dataclasses import replace as _replace
        plan = _replace(plan, partition=layout, meta={**plan.meta, "megatron_layout": args.layout})
    validate(plan.schedule)
    res = simulate(plan, problem)
    m = res.metrics
    save_plan(plan, args.output, problem=problem)   # the file carries its costs (meta["problem"])
    s = plan.schedule
    print(f"wrote {args.output}: {plan.meta.get('name')} — {s.ranks} ranks, {s.num_stages} stages, "
          f"{s.microbatches} microbatches, {s.num_actions} actions; makespan {m.makespan:.6g}, "
          f"bubble {m.bubble:.1%}, peak memory {max(m.peak_memory):.6g}")
    if problem is not None and not fits(max(m.peak_memory), problem.memory_limit):
        print(f"flexpipe plan: warning: peak memory {max(m.peak_memory):.6g} exceeds the problem's "
              f"memory_limit {problem.memory_limit:g}", file=sys.stderr)
    return 0
