"""The schedule IR: ``Action`` atoms, a ``Schedule`` (per-rank orders) and a ``Plan`` (+ partition).

Atoms print as torch.distributed.pipelining's action text (``2F0``, ``1I3``, ``0W5``, ``3B1``) and
parse back. Everything here is immutable; edits return new objects.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

from .kinds import Kind, get_kind
from .pysource import literal

__all__ = ["Action", "Schedule", "Plan", "parse_action", "kind_names", "ParseError", "EditError", "FromText",
           "edit_plan", "replay", "source_of", "plan_to_python"]

_ACTION = re.compile(r"^\s*(\d+)([A-Z][A-Z_]*?)(\d+)\s*$")


class ParseError(ValueError):
    """Action text that does not parse."""


class EditError(ValueError):
    """An edit that does not fit the schedule (rank or index out of range, unknown action)."""


@dataclass(frozen=True, slots=True, order=False)
class Action:
    """One computation: ``kind`` of virtual ``stage`` for ``microbatch``."""

    stage: int
    kind: Kind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.name}{self.microbatch}"

    def __repr__(self) -> str:
        return f"Action({self})"

    @classmethod
    def parse(cls, text: str) -> "Action":
        return parse_action(text)

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.stage, self.kind.name, self.microbatch)


def parse_action(text: str, where: str = "") -> Action:
    """Parse ``'2F0'`` into ``Action(2, F, 0)``; ``where`` names the place for the error."""
    if isinstance(text, Action):
        return text
    m = _ACTION.match(str(text))
    loc = f" ({where})" if where else ""
    if not m:
        raise ParseError(f"cannot parse action {text!r}{loc}: expected <stage><KIND><microbatch>, e.g. '2F0'")
    try:
        kind = get_kind(m.group(2))
    except ValueError as e:
        raise ParseError(f"action {text!r}{loc}: {e}") from None
    return Action(int(m.group(1)), kind, int(m.group(3)))


def kind_names(texts: Iterable[str]) -> set[str]:
    """The kind names in action texts (``{"F", "R"}`` for ``["0F0", "0R0"]``); unparsable ones are skipped."""
    return {m.group(2) for t in texts if (m := _ACTION.match(str(t)))}


@dataclass(frozen=True)
class Schedule:
    """Per-rank execution orders of compute actions.

    ``placement[s]`` is the rank of virtual stage ``s`` (stages in model order 0..S-1);
    ``order[r]`` is rank r's action list in execution order. Communication is derived, not listed.
    """

    ranks: int
    microbatches: int
    placement: tuple[int, ...]
    order: tuple[tuple[Action, ...], ...]
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """Values derived from the schedule, each computed once (``derived``): flat arrays, the
    dependency graph, positions, the validator's findings. Not part of the schedule's value."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "placement", tuple(int(r) for r in self.placement))
        object.__setattr__(self, "order", tuple(tuple(row) for row in self.order))
        if len(self.order) != self.ranks:
            raise ValueError(f"schedule has {len(self.order)} rank orders but ranks={self.ranks}")

    def derived(self, key: Hashable, make: Callable[["Schedule"], Any] | None = None) -> Any:
        """The value derived under ``key``: ``make(self)`` on first use, then kept (a Schedule never
        changes, so it never goes stale); None if it was never made and no ``make`` is given."""
        if key in self._derived:
            return self._derived[key]
        if make is None:
            return None
        value = self._derived[key] = make(self)
        return value

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Sequence[Iterable[str | Action]], microbatches: int | None = None,
                  placement: Sequence[int] | None = None) -> "Schedule":
        """Build from per-rank lists of actions or action text; infer what is not given."""
        order = tuple(tuple(parse_action(a, f"rank {r}, position {i}") for i, a in enumerate(row))
                      for r, row in enumerate(rows))
        acts = [a for row in order for a in row]
        if microbatches is None:
            microbatches = 1 + max((a.microbatch for a in acts), default=-1)
        if placement is None:
            placement = infer_placement(order)
        return cls(len(order), microbatches, tuple(placement), order)

    @classmethod
    def from_text(cls, text: str, microbatches: int | None = None,
                  placement: Sequence[int] | None = None) -> "Schedule":
        """Parse a rank grid: one line per rank, ``r0: 0F0 0F1 0I0 ...`` (the ``rN:`` is optional)."""
        rows: list[list[str]] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"^r?(\d+)\s*:\s*(.*)$", line)
            if m:
                if int(m.group(1)) != len(rows):
                    raise ParseError(f"line {lineno}: rank {m.group(1)} out of sequence (expected r{len(rows)})")
                line = m.group(2)
            toks = line.replace(",", " ").split()
            row = []
            for t in toks:
                try:
                    row.append(parse_action(t, f"line {lineno}"))
                except ParseError:
                    raise
            rows.append(row)
        return cls.from_rows(rows, microbatches, placement)

    # -- views ---------------------------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        return len(self.placement)

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return tuple(s for s, r in enumerate(self.placement) if r == rank)

    @property
    def chunks(self) -> int:
        """Virtual stages per rank (v); the maximum if uneven."""
        return max((len(self.stages_of(r)) for r in range(self.ranks)), default=0)

    def actions(self) -> Iterable[tuple[int, int, Action]]:
        """Yield (rank, position, action) for every action."""
        for r, row in enumerate(self.order):
            for i, a in enumerate(row):
                yield r, i, a

    @property
    def num_actions(self) -> int:
        return sum(len(row) for row in self.order)

    @property
    def position(self) -> dict[tuple[int, str, int], tuple[int, int]]:
        """(stage, kind, microbatch) → (rank, index); the last occurrence if duplicated."""
        return self.derived(Schedule.position, lambda s: {a.key: (r, i) for r, i, a in s.actions()})

    def kinds_used(self) -> set[str]:
        return {a.kind.name for row in self.order for a in row}

    def to_text(self) -> str:
        return "\n".join(f"r{r}: " + " ".join(map(str, row)) for r, row in enumerate(self.order))

    def with_order(self, order: Sequence[Sequence[Action]]) -> "Schedule":
        return replace(self, order=tuple(tuple(r) for r in order))

    def __str__(self) -> str:
        return self.to_text()


def infer_placement(order: Sequence[Sequence[Action]]) -> tuple[int, ...]:
    """Stage → rank from where its actions appear (first appearance wins; the validator checks)."""
    where: dict[int, int] = {}
    for r, row in enumerate(order):
        for a in row:
            where.setdefault(a.stage, r)
    if not where:
        return ()
    n = max(where) + 1
    missing = [s for s in range(n) if s not in where]
    if missing:
        raise ValueError(f"stages {missing} have no actions, so their rank is unknown; give a placement")
    return tuple(where[s] for s in range(n))


@dataclass(frozen=True)
class Plan:
    """A schedule plus the layer partition (stage → layer indices) and free-form metadata."""

    schedule: Schedule
    partition: tuple[tuple[int, ...], ...] | None = None
    meta: Mapping = field(default_factory=dict)
    trace: tuple = field(default=(), compare=False)
    """How the plan was made: a source step (named schedule, DSL program, hand text, loaded file)
    then edit steps (``flexpipe_ui.edits``); replayable, prints as Python (``to_python``)."""

    def __post_init__(self) -> None:
        if self.partition is not None:
            part = tuple(tuple(int(x) for x in p) for p in self.partition)
            object.__setattr__(self, "partition", part)
            if len(part) != self.schedule.num_stages:
                raise ValueError(f"partition has {len(part)} stages but the schedule has "
                                 f"{self.schedule.num_stages}")

    @property
    def ranks(self) -> int:
        return self.schedule.ranks

    @property
    def microbatches(self) -> int:
        return self.schedule.microbatches

    @property
    def num_layers(self) -> int | None:
        return None if self.partition is None else sum(len(p) for p in self.partition)

    def with_meta(self, **meta) -> "Plan":
        return replace(self, meta={**self.meta, **meta})

    def edit(self, step) -> "Plan":
        """Apply one edit step (``flexpipe_ui.edits.Move``/``Swap``/...) and record it in the trace."""
        return edit_plan(self, step)

    def to_python(self) -> str:
        """Python source that, exec'd, binds ``plan`` to a plan equal to this one (source + edits)."""
        return plan_to_python(self)


# -- the trace: a source step, then edit steps -------------------------------------------------
# A source step (``FromText`` here, ``library.FromNamed``, ``dsl.program.FromProgram``,
# ``planfile.FromFile``, each beside what it builds) has ``build() -> Plan`` and
# ``python() -> (imports, expression)``; an edit step (``flexpipe_ui.edits``) has
# ``apply(schedule) -> schedule`` and a ``repr`` that is its Python source.
def _is_source(step) -> bool:
    return callable(getattr(step, "build", None)) and callable(getattr(step, "python", None))


@dataclass(frozen=True)
class FromText:
    """A hand order: the rank grid text, placement, partition and metadata."""

    text: str
    microbatches: int
    placement: tuple[int, ...]
    partition: object = None
    meta: object = None

    def build(self) -> Plan:
        s = Schedule.from_text(self.text, self.microbatches, self.placement)
        return Plan(s, self.partition, dict(self.meta or {}), (self,))

    def python(self) -> tuple[list[str], str]:
        return (["from flexpipe_ui.ir import Plan, Schedule"],
                f"Plan(Schedule.from_text({self.text!r}, {self.microbatches!r}, {tuple(self.placement)!r}), "
                f"{self.partition!r}, {literal(dict(self.meta or {}))})")


def source_of(plan: Plan):
    """The plan's source step; a plan built without one gets its own text as the source."""
    if plan.trace and _is_source(plan.trace[0]):
        return plan.trace[0]
    s = plan.schedule
    return FromText(s.to_text(), s.microbatches, tuple(s.placement), plan.partition,
                    json.loads(json.dumps(dict(plan.meta), default=str)))


def edit_plan(plan: Plan, step) -> Plan:
    """``plan.edit(step)``: the edited plan, with the step appended to its trace."""
    if not callable(getattr(step, "apply", None)):
        raise EditError(f"not an edit step: {step!r} (use Move, Swap, Insert, Remove or PinBefore)")
    sched = step.apply(plan.schedule)
    trace = (plan.trace if plan.trace else (source_of(plan),)) + (step,)
    return replace(plan, schedule=sched, meta={**plan.meta, "edits": len(trace) - 1}, trace=trace)


def replay(trace) -> Plan:
    """Rebuild a plan from its trace: the source step, then each edit."""
    trace = tuple(trace)
    if not trace or not _is_source(trace[0]):
        raise EditError("a trace starts with a source step (FromNamed, FromProgram, FromText, FromFile)")
    plan = trace[0].build()
    for step in trace[1:]:
        plan = edit_plan(plan, step)
    return plan


def plan_to_python(plan: Plan) -> str:
    """A script that binds ``plan`` to an equal plan: imports, the source step, the edits."""
    imps, expr = source_of(plan).python()
    edits = list(plan.trace[1:]) if plan.trace else []
    by_module: dict[str, set[str]] = {}
    for e in edits:
        by_module.setdefault(type(e).__module__, set()).add(type(e).__name__)
    for mod, names in sorted(by_module.items()):
        imps.append(f"from {mod} import {', '.join(sorted(names))}")
    lines = list(dict.fromkeys(imps)) + ["", f"plan = {expr}"]
    lines += [f"plan = plan.edit({e!r})" for e in edits]
    return "\n".join(lines) + "\n"
