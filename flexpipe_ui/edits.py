"""Programmatic edits of a schedule and the replayable trace that prints a plan as Python.

An edit step is a frozen dataclass (``Move``, ``Swap``, ``Insert``, ``Remove``, ``PinBefore``);
``apply_edit(schedule, step)`` returns the edited schedule (not validated: the Designer shows the
validator's verdict on it). ``plan.edit(step)`` records the step in ``plan.trace``, whose first
element is the source step (``FromNamed``, ``FromProgram``, ``FromText``, ``FromFile``), so
``replay(plan.trace)`` rebuilds the plan, ``undo(plan)`` drops the last step and
``plan.to_python()`` prints the whole history as a script that binds ``plan``.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, replace
from typing import Any

from .ir import ParseError, Plan, Schedule, parse_action

__all__ = ["Move", "Swap", "Insert", "Remove", "PinBefore", "EditError", "apply_edit", "edit_plan",
           "replay", "undo", "plan_to_python", "FromNamed", "FromProgram", "FromText", "FromFile",
           "source_of"]


class EditError(ValueError):
    """An edit that does not fit the schedule (rank or index out of range, unknown action)."""


def _row(s: Schedule, rank: int) -> list:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < s.ranks:
        raise EditError(f"rank {rank!r} out of range: the schedule has {s.ranks} ranks (0..{s.ranks - 1})")
    return list(s.order[rank])


def _index(row: list, rank: int, i: int, what: str, *, end: bool = False) -> int:
    hi = len(row) if end else len(row) - 1
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= hi:
        raise EditError(f"{what} {i!r} out of range: rank {rank} has {len(row)} actions "
                        f"(positions 0..{hi})")
    return i


def _parse(text: str, where: str):
    try:
        return parse_action(text, where)
    except ParseError as e:
        raise EditError(str(e)) from None


def _with_row(s: Schedule, rank: int, row: list) -> Schedule:
    order = list(s.order)
    order[rank] = tuple(row)
    return s.with_order(order)


@dataclass(frozen=True)
class Move:
    """Move rank ``rank``'s action at position ``src`` so that it ends up at position ``dst``."""

    rank: int
    src: int
    dst: int

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.src, "src")
        _index(row, self.rank, self.dst, "dst")
        row.insert(self.dst, row.pop(self.src))
        return _with_row(s, self.rank, row)


@dataclass(frozen=True)
class Swap:
    """Swap positions ``i`` and ``j`` of rank ``rank``."""

    rank: int
    i: int
    j: int

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.i, "i")
        _index(row, self.rank, self.j, "j")
        row[self.i], row[self.j] = row[self.j], row[self.i]
        return _with_row(s, self.rank, row)


@dataclass(frozen=True)
class Insert:
    """Insert ``action`` (text such as ``"0R3"``) at position ``index`` of rank ``rank``."""

    rank: int
    index: int
    action: str

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.index, "index", end=True)
        row.insert(self.index, _parse(self.action, "Insert"))
        return _with_row(s, self.rank, row)


@dataclass(frozen=True)
class Remove:
    """Remove the action at position ``index`` of rank ``rank``."""

    rank: int
    index: int

    def apply(self, s: Schedule) -> Schedule:
        row = _row(s, self.rank)
        _index(row, self.rank, self.index, "index")
        del row[self.index]
        return _with_row(s, self.rank, row)


@dataclass(frozen=True)
class PinBefore:
    """Move ``action`` to just before ``before`` (both text, on the same rank)."""

    action: str
    before: str

    def apply(self, s: Schedule) -> Schedule:
        a, b = str(_parse(self.action, "PinBefore")), str(_parse(self.before, "PinBefore"))
        where = {str(x): (r, i) for r, i, x in s.actions()}
        for name in (a, b):
            if name not in where:
                raise EditError(f"PinBefore: {name} is not in the schedule")
        (ra, ia), (rb, ib) = where[a], where[b]
        if ra != rb:
            raise EditError(f"PinBefore: {a} is on rank {ra} but {b} is on rank {rb}; an action can "
                            "only be pinned before another on the same rank")
        if a == b:
            raise EditError(f"PinBefore: cannot pin {a} before itself")
        row = list(s.order[ra])
        act = row.pop(ia)
        row.insert(ib - 1 if ia < ib else ib, act)
        return _with_row(s, ra, row)


_EDITS = (Move, Swap, Insert, Remove, PinBefore)


def apply_edit(schedule: Schedule, edit) -> Schedule:
    """The schedule with one edit applied (not validated)."""
    if not isinstance(edit, _EDITS):
        raise EditError(f"not an edit step: {edit!r} (use Move, Swap, Insert, Remove or PinBefore)")
    return edit.apply(schedule)


# -- source steps ---------------------------------------------------------------------------------
def _lit(x: Any) -> str:
    """A Python literal for plain data (JSON-like); anything else goes through JSON first."""
    text = repr(x)
    try:
        if ast.literal_eval(text) == x:
            return text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    return repr(json.loads(json.dumps(x, default=str)))


def _problem_py(problem) -> str:
    return "None" if problem is None else f"Problem.from_dict({_lit(problem.to_dict())})"


@dataclass(frozen=True)
class FromNamed:
    """``library.build_named(name, problem, ...)``."""

    name: str
    problem: Any = None
    ranks: int | None = None
    microbatches: int | None = None
    chunks: int | None = None
    partition: Any = "even"

    def build(self) -> Plan:
        from .library import build_named
        return build_named(self.name, self.problem, ranks=self.ranks, microbatches=self.microbatches,
                           chunks=self.chunks, partition=self.partition)

    def python(self) -> tuple[list[str], str]:
        imps = ["from flexpipe_ui.library import build_named"]
        if self.problem is not None:
            imps.append("from flexpipe_ui.problem import Problem")
        return imps, (f"build_named({self.name!r}, {_problem_py(self.problem)}, ranks={self.ranks!r}, "
                      f"microbatches={self.microbatches!r}, chunks={self.chunks!r}, "
                      f"partition={self.partition!r})")


@dataclass(frozen=True)
class FromProgram:
    """``Program(...).plan(...)``: a DSL program (kept as its source text)."""

    program: str
    ranks: int | None = None
    microbatches: int | None = None
    problem: Any = None
    partition: Any = "even"

    def build(self) -> Plan:
        from .dsl import program_from_source
        return program_from_source(self.program).plan(ranks=self.ranks, microbatches=self.microbatches,
                                                      problem=self.problem, partition=self.partition)

    def python(self) -> tuple[list[str], str]:
        imps = ["from flexpipe_ui.dsl import *"]
        if self.problem is not None:
            imps.append("from flexpipe_ui.problem import Problem")
        return imps, (f"{self.program}.plan(ranks={self.ranks!r}, microbatches={self.microbatches!r}, "
                      f"problem={_problem_py(self.problem)}, partition={self.partition!r})")


@dataclass(frozen=True)
class FromText:
    """A hand order: the rank grid text, placement, partition and metadata."""

    text: str
    microbatches: int
    placement: tuple[int, ...]
    partition: Any = None
    meta: Any = None

    def build(self) -> Plan:
        s = Schedule.from_text(self.text, self.microbatches, self.placement)
        return Plan(s, self.partition, dict(self.meta or {}), (self,))

    def python(self) -> tuple[list[str], str]:
        return (["from flexpipe_ui.ir import Plan, Schedule"],
                f"Plan(Schedule.from_text({self.text!r}, {self.microbatches!r}, {tuple(self.placement)!r}), "
                f"{self.partition!r}, {_lit(dict(self.meta or {}))})")


@dataclass(frozen=True)
class FromFile:
    """``load_plan(path)``."""

    path: str

    def build(self) -> Plan:
        from .planfile import load_plan
        return replace(load_plan(self.path), trace=(self,))

    def python(self) -> tuple[list[str], str]:
        return ["from flexpipe_ui.planfile import load_plan"], f"load_plan({self.path!r})"


_SOURCES = (FromNamed, FromProgram, FromText, FromFile)


def source_of(plan: Plan):
    """The plan's source step; a plan built without one gets its own text as the source."""
    if plan.trace and isinstance(plan.trace[0], _SOURCES):
        return plan.trace[0]
    s = plan.schedule
    return FromText(s.to_text(), s.microbatches, tuple(s.placement), plan.partition,
                    json.loads(json.dumps(dict(plan.meta), default=str)))


# -- the trace ---------------------------------------------------------------------------------
def edit_plan(plan: Plan, step) -> Plan:
    """``plan.edit(step)``: the edited plan, with the step appended to its trace."""
    sched = apply_edit(plan.schedule, step)
    trace = (plan.trace if plan.trace else (source_of(plan),)) + (step,)
    n = sum(1 for t in trace if isinstance(t, _EDITS))
    return replace(plan, schedule=sched, meta={**plan.meta, "edits": n}, trace=trace)


def replay(trace) -> Plan:
    """Rebuild a plan from its trace: the source step, then each edit."""
    trace = tuple(trace)
    if not trace or not isinstance(trace[0], _SOURCES):
        raise EditError("a trace starts with a source step (FromNamed, FromProgram, FromText, FromFile)")
    plan = trace[0].build()
    for step in trace[1:]:
        plan = edit_plan(plan, step)
    return plan


def undo(plan: Plan) -> Plan:
    """The plan before its last edit (the plan itself when it has none)."""
    if len(plan.trace) <= 1:
        return plan
    return replay(plan.trace[:-1])


def plan_to_python(plan: Plan) -> str:
    """A script that binds ``plan`` to an equal plan: imports, the source step, the edits."""
    src = source_of(plan)
    imps, expr = src.python()
    edits = [t for t in plan.trace[1:]] if plan.trace else []
    kinds = sorted({type(e).__name__ for e in edits})
    if kinds:
        imps.append(f"from flexpipe_ui.edits import {', '.join(kinds)}")
    lines = list(dict.fromkeys(imps)) + ["", f"plan = {expr}"]
    lines += [f"plan = plan.edit({e!r})" for e in edits]
    return "\n".join(lines) + "\n"
