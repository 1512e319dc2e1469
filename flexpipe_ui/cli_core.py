"""Core ``flexpipe`` subcommands: validate, simulate, show, export, import-torch."""
from __future__ import annotations

import argparse
import json
import sys

from .costmodel import fits
from .ir import Plan
from .limits import check_finite_tree
from . import cli_types as T
from .planfile import embedded_problem, load_plan, save_plan
from .problem import even_partition, load_problem
from .sim import simulate
from .validate import render_grid, validate

__all__ = ["register", "metrics_text", "ascii_gantt"]


UNIT_COSTS_NOTE = ("carries no problem and no --problem was given: UNIT COSTS (F = I = W = 1 per rank's share, "
                   "activation 1, no static memory), not ms or MiB")


def _load(args) -> tuple[Plan, object]:
    """The plan and its problem: ``--problem``, else the one the plan file carries, else None."""
    plan = load_plan(args.plan)
    problem = load_problem(args.problem) if getattr(args, "problem", None) else None
    if problem is None:
        problem = embedded_problem(plan, args.plan)
    if problem is not None and plan.partition is not None and plan.num_layers != problem.num_layers:
        raise ValueError(f"{args.plan} partitions {plan.num_layers} layers but {args.problem} has "
                         f"{problem.num_layers}")
    if problem is not None and plan.partition is None:
        try:   # the simulator splits the layers evenly: say now if it cannot
            even_partition(problem.num_layers, plan.schedule.num_stages)
        except ValueError as e:
            raise ValueError(f"{args.plan} with {args.problem}: {e}") from None
    if problem is not None and problem.ranks != plan.ranks:
        print(f"flexpipe: warning: {args.problem} says ranks={problem.ranks}, the plan has "
              f"{plan.ranks}; using the plan's", file=sys.stderr)
    return plan, problem


def metrics_text(m, memory_limit: float | None = None) -> str:
    lines = [f"makespan   {m.makespan:.6g}", f"bubble     {m.bubble:.2%}"]
    lines.append("rank  busy        bubble   peak_memory  (static + activations)")
    for r, (b, bb, pk, st) in enumerate(zip(m.busy, m.bubble_per_rank, m.peak_memory, m.static_memory)):
        flag = "  > memory_limit!" if not fits(pk, memory_limit) else ""
        lines.append(f"{r:>4}  {b:<10.6g}  {bb:>6.1%}   {pk:<11.6g}  ({st:g} + {pk - st:g}){flag}")
    return "\n".join(lines)


def ascii_gantt(tl, width: int = 100) -> str:
    """One line per rank, time across: the kind letter while busy, '.' while idle."""
    span = tl.makespan or 1.0
    rows = [["."] * width for _ in range(tl.ranks)]
    for r, a, s, e in zip(tl.rank, tl.actions, tl.start, tl.end):
        lo, hi = int(s / span * width), max(int(s / span * width) + 1, int(round(e / span * width)))
        for x in range(lo, min(hi, width)):
            rows[r][x] = a.kind.name[0]
    return "\n".join(f"rank {r:<3}|" + "".join(row) + "|" for r, row in enumerate(rows))


def _cmd_validate(args) -> int:
    plan, _ = _load(args)  # with --problem, also checks the partition covers its layers
    validate(plan.schedule)
    s = plan.schedule
    print(f"ok: {args.plan}: {s.ranks} ranks, {s.num_stages} stages, {s.microbatches} microbatches, "
          f"{s.num_actions} actions")
    return 0


def _note_unit_costs(args, problem) -> None:
    if problem is None:
        print(f"flexpipe {args.command}: note: {args.plan} {UNIT_COSTS_NOTE}", file=sys.stderr)


def _cmd_simulate(args) -> int:
    plan, problem = _load(args)
    res = simulate(plan, problem, comm=args.comm)
    _note_unit_costs(args, problem)       # after the plan proved valid: a refusal stays one line
    m = res.metrics
    limit = problem.memory_limit if problem is not None else None
    if args.json:
        d = m.to_dict()
        d["memory_limit"] = limit
        d["fits_memory"] = fits(m.max_peak_memory, limit)
        d["unit_costs"] = problem is None
        check_finite_tree(d, "simulate --json output")
        print(json.dumps(d, allow_nan=False))
    else:
        print(metrics_text(m, limit))
    return 0


def _cmd_show(args) -> int:
    plan, problem = _load(args)
    res = simulate(plan, problem, comm=args.comm)
    _note_unit_costs(args, problem)
    name = plan.meta.get("name", args.plan)
    print(f"{name}: {plan.ranks} ranks, {plan.schedule.num_stages} stages, {plan.microbatches} microbatches")
    print(render_grid(plan.schedule, width=args.steps))
    print()
    print(ascii_gantt(res.timeline))
    print()
    print(metrics_text(res.metrics, problem.memory_limit if problem else None))
    if args.html:
        from .export import save_html
        from .gantt import gantt_figure  # plotly only when asked for
        fig = gantt_figure(res.timeline, res.costs, title=str(name), metrics=res.metrics,
                           memory_limit=problem.memory_limit if problem else None,
                           unit_costs=problem is None)
        save_html(fig, args.html)
        print(f"wrote {args.html}")
    return 0


def _cmd_export(args) -> int:
    plan = load_plan(args.plan)
    validate(plan.schedule)
    if not (args.torch_csv or args.megatron_layout):
        raise ValueError("give --torch-csv OUT and/or --megatron-layout")
    if args.torch_csv:
        from .torch_interop import export_torch_csv
        export_torch_csv(plan.schedule, args.torch_csv)
        print(f"wrote {args.torch_csv}")
    if args.megatron_layout:
        from .layout import format_layout
        if plan.partition is None:
            raise ValueError(f"{args.plan} has no layer partition (stages.layers): nothing to write as a "
                             "Megatron layout; make the plan with --problem")
        text = format_layout(plan.partition, args.layer_kinds)
        if plan.schedule.placement != tuple(s % plan.ranks for s in range(plan.schedule.num_stages)):
            print(f"flexpipe export: warning: the plan places stages {plan.schedule.placement}, Megatron "
                  "puts stage s on rank s mod ranks: only the layer split carries over", file=sys.stderr)
        print(text)
    return 0


def _cmd_import_torch(args) -> int:
    from .limits import check_plan_size
    from .progress import heartbeat
    check_plan_size(args.ranks * (args.chunks or 2), args.microbatches)
    with heartbeat(f"building torch's {args.name} schedule for {args.ranks} ranks x {args.microbatches} "
                   "microbatches (importing torch; torch builds a long order slowly)"):
        from .torch_interop import import_torch_schedule
        sched = import_torch_schedule(args.name, args.ranks, args.microbatches, args.chunks)
    if not args.no_validate:
        with heartbeat(f"validating {sched.num_actions} actions"):
            validate(sched)
    partition = problem = None
    if args.problem:
        problem = load_problem(args.problem)
        partition = even_partition(problem.num_layers, sched.num_stages)
    plan = Plan(sched, partition, {"name": f"torch:{args.name}", "source": "torch.distributed.pipelining"})
    save_plan(plan, args.output, problem=problem)
    print(f"wrote {args.output}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a plan file; explains what is wrong")
    p.add_argument("plan")
    p.add_argument("--problem", help="also check the partition against this problem file")
    p.set_defaults(func=_cmd_validate)

    for name, func, helptext in (("simulate", _cmd_simulate, "simulate a plan: makespan, bubble, memory"),
                                 ("show", _cmd_show, "text grid + metrics; --html writes the Gantt")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("plan")
        p.add_argument("--problem", help="flexpipe-problem/1 costs (default: the one the plan file carries, "
                                         "else uniform F=I=W=1 per rank: unit costs)")
        p.add_argument("--comm", type=T.nonnegative, default=None, help="override the cross-rank latency")
        if name == "simulate":
            p.add_argument("--json", action="store_true", help="print metrics as JSON")
        else:
            p.add_argument("--html", metavar="OUT", help="write the Gantt chart as standalone HTML")
            p.add_argument("--steps", type=T.integer(1, 10000), default=24, help="grid columns to show")
        p.set_defaults(func=func)

    p = sub.add_parser("export", help="export a plan to torch.distributed.pipelining's CSV or a Megatron layout")
    p.add_argument("plan")
    p.add_argument("--torch-csv", metavar="OUT")
    p.add_argument("--megatron-layout", action="store_true",
                   help="print the stage split as a Megatron-Core --pipeline-model-parallel-layout string")
    p.add_argument("--layer-kinds", metavar="LETTERS",
                   help="one letter per layer (E, t, m, L); default E + t * blocks + L")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("import-torch", help="import a torch.distributed.pipelining built-in schedule")
    p.add_argument("name", help="gpipe, 1f1b, interleaved-1f1b, looped-bfs, interleaved-zb, zb-v, dualpipe-v")
    p.add_argument("--ranks", type=T.ranks, required=True)
    p.add_argument("--microbatches", type=T.microbatches, required=True)
    p.add_argument("--chunks", type=T.integer(1, 64), default=None, help="stages per rank")
    p.add_argument("--problem", help="add an even layer split for this problem")
    p.add_argument("--no-validate", action="store_true", help="write it even if it fails validation")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=_cmd_import_torch)
