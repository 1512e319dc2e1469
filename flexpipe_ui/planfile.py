"""Read and write ``flexpipe-plan/1`` JSON (DESIGN.md, contract 3).

A plan made from a problem carries it: ``save_plan(plan, path, problem=...)`` (or ``embed_problem``)
puts the problem, in ``flexpipe-problem/1`` form, in ``meta["problem"]``; ``embedded_problem``
reads it back, so ``flexpipe simulate/show`` and the widgets show the plan's real costs (ms, MiB)
without a ``--problem``, instead of unit costs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .jsonio import read_json, write_json
from .ir import Action, ParseError, Plan, Schedule, infer_placement, kind_names, parse_action
from .limits import MAX_ACTIONS, MAX_MICROBATCHES, MAX_RANKS, MAX_STAGES
from .ops import register_missing

__all__ = ["PlanFileError", "plan_to_dict", "plan_from_dict", "load_plan", "save_plan", "PLAN_FORMAT", "FromFile",
           "embed_problem", "embedded_problem"]

PLAN_FORMAT = "flexpipe-plan/1"


class PlanFileError(ValueError):
    """A plan file is corrupt, foreign or of another version."""


def plan_to_dict(plan: Plan) -> dict:
    s = plan.schedule
    stages = []
    for i, rank in enumerate(s.placement):
        st: dict[str, Any] = {"rank": rank}
        if plan.partition is not None:
            st["layers"] = list(plan.partition[i])
        stages.append(st)
    return {"format": PLAN_FORMAT, "ranks": s.ranks, "microbatches": s.microbatches,
            "stages": stages,
            "order": {str(r): [str(a) for a in row] for r, row in enumerate(s.order)},
            "meta": _jsonable(dict(plan.meta))}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):  # numpy scalars
        return x.item()
    return str(x)


def _int(v: Any, where: str, minimum: int = 0, maximum: int | None = None, limit: str = "") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        shown = v if not isinstance(v, (list, dict, str)) or len(repr(v)) < 60 else type(v).__name__
        raise PlanFileError(f"{where}: expected an integer >= {minimum}, got {shown!r}")
    if maximum is not None and v > maximum:
        raise PlanFileError(f"{where}: {v} is beyond the limit of {maximum}{limit}")
    return v


def plan_from_dict(d: Any, source: str = "plan") -> Plan:
    if not isinstance(d, dict):
        raise PlanFileError(f"{source}: expected a JSON object, got {type(d).__name__}")
    fmt = d.get("format")
    if fmt is None:
        raise PlanFileError(f"{source}: no 'format' key; not a {PLAN_FORMAT} file")
    if fmt != PLAN_FORMAT:
        hint = " (a problem file? pass it with --problem)" if str(fmt).startswith("flexpipe-problem") else ""
        raise PlanFileError(f"{source}: format is {fmt!r}, this version reads {PLAN_FORMAT!r}{hint}")
    for key in ("ranks", "microbatches", "order"):
        if key not in d:
            raise PlanFileError(f"{source}: missing key {key!r}")
    ranks = _int(d["ranks"], f"{source}: 'ranks'", 1, MAX_RANKS, " ranks (flexpipe_ui.limits.MAX_RANKS)")
    mbs = _int(d["microbatches"], f"{source}: 'microbatches'", 1, MAX_MICROBATCHES,
               " microbatches (flexpipe_ui.limits.MAX_MICROBATCHES)")
    order_in = d["order"]
    if not isinstance(order_in, dict):
        raise PlanFileError(f"{source}: 'order' must be an object mapping rank (\"0\"...) to action lists")
    total = sum(len(row) for row in order_in.values() if isinstance(row, list))
    if total > MAX_ACTIONS:
        raise PlanFileError(f"{source}: 'order' lists {total} actions, beyond the limit of {MAX_ACTIONS} "
                            "(flexpipe_ui.limits.MAX_ACTIONS)")
    extra = sorted(set(order_in) - {str(r) for r in range(ranks)}, key=str)
    if extra:
        shown = ", ".join(repr(str(x)[:20]) for x in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise PlanFileError(f"{source}: 'order' has ranks {shown} outside 0..{ranks - 1}")
    _register_example_kinds(order_in)
    order = []
    parsed: dict[str, Action] = {}     # each distinct action text parsed once
    for r in range(ranks):
        row = order_in.get(str(r), [])
        if not isinstance(row, list):
            raise PlanFileError(f"{source}: order of rank {r} must be a list of action strings")
        bad = next((i for i, a in enumerate(row) if not isinstance(a, str)), None)
        if bad is not None:
            raise PlanFileError(f"{source}: order of rank {r}, position {bad}: expected an action string "
                                f"like '0F0', got {type(row[bad]).__name__}")
        try:
            order.append(tuple(parsed[a] if a in parsed else
                               parsed.setdefault(a, parse_action(a, f"{source}, rank {r}, position {i}"))
                               for i, a in enumerate(row)))
        except ParseError as e:
            raise PlanFileError(str(e)) from None
    stages_in = d.get("stages")
    partition = None
    if stages_in is None:
        top = max((a.stage for row in order for a in row), default=0)
        if top >= MAX_STAGES:
            raise PlanFileError(f"{source}: action stage {top} is beyond the limit of {MAX_STAGES} stages "
                                "(flexpipe_ui.limits.MAX_STAGES)")
        try:
            placement = infer_placement(order)
        except ValueError as e:
            raise PlanFileError(f"{source}: no 'stages' and {e}") from None
    else:
        if not isinstance(stages_in, list) or not stages_in:
            raise PlanFileError(f"{source}: 'stages' must be a non-empty list")
        if len(stages_in) > MAX_STAGES:
            raise PlanFileError(f"{source}: 'stages' has {len(stages_in)} stages, beyond the limit of "
                                f"{MAX_STAGES} (flexpipe_ui.limits.MAX_STAGES)")
        placement, layers = [], []
        for i, st in enumerate(stages_in):
            if not isinstance(st, dict) or "rank" not in st:
                raise PlanFileError(f"{source}: stage {i} must be an object with a 'rank'")
            rank = _int(st["rank"], f"{source}: stage {i} 'rank'")
            if rank >= ranks:
                raise PlanFileError(f"{source}: stage {i} is on rank {rank}, but ranks={ranks}")
            placement.append(rank)
            if "layers" in st:
                ls = st["layers"]
                if not isinstance(ls, list) or not ls:
                    raise PlanFileError(f"{source}: stage {i} 'layers' must be a non-empty list")
                layers.append(tuple(_int(x, f"{source}: stage {i} layers") for x in ls))
        if layers:
            if len(layers) != len(stages_in):
                raise PlanFileError(f"{source}: some stages have 'layers' and some do not")
            flat = [x for ls in layers for x in ls]
            if flat != list(range(len(flat))):
                shown = str([list(x) for x in layers])
                shown = shown if len(shown) < 200 else shown[:200] + "..."
                raise PlanFileError(f"{source}: stage layers must be contiguous, in model order and "
                                    f"cover every layer once; got {shown}")
            partition = tuple(layers)
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise PlanFileError(f"{source}: 'meta' must be an object")
    try:
        sched = Schedule(ranks, mbs, tuple(placement), tuple(order))
        return Plan(sched, partition, meta)
    except ValueError as e:
        raise PlanFileError(f"{source}: {e}") from None


def _register_example_kinds(order_in: dict) -> None:
    """The example kinds a plan file names (recompute R, offload OFF/LOAD) register on load, so the
    file parses in a fresh process; anything else unknown is reported by the parser."""
    texts = {a for row in order_in.values() if isinstance(row, list) for a in row if isinstance(a, str)}
    register_missing(kind_names(texts))     # each distinct text once (a plan may repeat one a million times)


def load_plan(path: str | Path) -> Plan:
    return plan_from_dict(read_json(path, PlanFileError, "plan file"), str(path))


def save_plan(plan: Plan | Schedule, path: str | Path, problem: Any = None) -> None:
    """Write a plan file atomically; with ``problem``, the file carries it (``meta["problem"]``)."""
    if isinstance(plan, Schedule):
        plan = Plan(plan)
    if problem is not None:
        plan = embed_problem(plan, problem)
    write_json(plan_to_dict(plan), path)


def embed_problem(plan: Plan, problem: Any) -> Plan:
    """The plan with ``problem`` (its ranks and microbatches set to the plan's) in ``meta["problem"]``."""
    s = plan.schedule
    if problem.ranks != s.ranks or problem.microbatches != s.microbatches:
        problem = problem.with_(ranks=s.ranks, microbatches=s.microbatches)
    return replace(plan, meta={**plan.meta, "problem": problem.to_dict()})


def embedded_problem(plan: Plan, source: str = "plan") -> Any:
    """The ``Problem`` a plan file carries in ``meta["problem"]``, or None."""
    d = plan.meta.get("problem") if isinstance(plan.meta, dict) else None
    if d is None:
        return None
    from .problem import Problem, ProblemError
    try:
        problem = Problem.from_dict(d, f"{source}: meta.problem")
    except ProblemError as e:
        raise PlanFileError(str(e)) from None
    if plan.partition is not None and sum(len(p) for p in plan.partition) != problem.num_layers:
        raise PlanFileError(f"{source}: meta.problem has {problem.num_layers} layers but the plan's stages "
                            f"cover {sum(len(p) for p in plan.partition)}")
    return problem


@dataclass(frozen=True)
class FromFile:
    """Trace source step ``load_plan(path)``."""

    path: str

    def build(self) -> Plan:
        return replace(load_plan(self.path), trace=(self,))

    def python(self) -> tuple[list[str], str]:
        return ["from flexpipe_ui.planfile import load_plan"], f"load_plan({self.path!r})"
