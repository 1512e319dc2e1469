"""The schedule IR: ``Action`` atoms, a ``Schedule`` (per-rank orders) and a ``Plan`` (+ partition).

Atoms print as torch.distributed.pipelining's action text (``2F0``, ``1I3``, ``0W5``, ``3B1``) and
parse back. Everything here is immutable; edits return new objects.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Iterable, Mapping, Sequence

from .kinds import Kind, get_kind
from .limits import MAX_INDEX_DIGITS

__all__ = ["Action", "Schedule", "Plan", "parse_action", "ParseError"]

_ACTION = re.compile(r"^\s*(\d+)([A-Z][A-Z_]*?)(\d+)\s*$")


class ParseError(ValueError):
    """Action text that does not parse."""


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
        raise ParseError(f"cannot parse action {str(text)[:40]!r}{loc}: expected <stage><KIND><microbatch>, e.g. '2F0'")
    if len(m.group(2)) > 32:
        raise ParseError(f"action {str(text)[:40]!r}...{loc}: kind names have at most 32 letters")
    if len(m.group(1)) > MAX_INDEX_DIGITS or len(m.group(3)) > MAX_INDEX_DIGITS:
        raise ParseError(f"action {str(text)[:40]!r}{loc}: stage and microbatch numbers have at most "
                         f"{MAX_INDEX_DIGITS} digits (flexpipe_ui.limits.MAX_INDEX_DIGITS)")
    try:
        kind = get_kind(m.group(2))
    except ValueError as e:
        raise ParseError(f"action {text!r}{loc}: {e}") from None
    return Action(int(m.group(1)), kind, int(m.group(3)))


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "placement", tuple(int(r) for r in self.placement))
        object.__setattr__(self, "order", tuple(tuple(row) for row in self.order))
        if len(self.order) != self.ranks:
            raise ValueError(f"schedule has {len(self.order)} rank orders but ranks={self.ranks}")

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

    @cached_property
    def position(self) -> dict[tuple[int, str, int], tuple[int, int]]:
        """(stage, kind, microbatch) → (rank, index); the last occurrence if duplicated."""
        return {a.key: (r, i) for r, i, a in self.actions()}

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

    def with_schedule(self, schedule: Schedule) -> "Plan":
        return replace(self, schedule=schedule)

    def with_meta(self, **meta) -> "Plan":
        return replace(self, meta={**self.meta, **meta})

    def edit(self, step) -> "Plan":
        """Apply one edit step (``flexpipe_ui.edits.Move``/``Swap``/...) and record it in the trace."""
        from .edits import edit_plan
        return edit_plan(self, step)

    def to_python(self) -> str:
        """Python source that, exec'd, binds ``plan`` to a plan equal to this one (source + edits)."""
        from .edits import plan_to_python
        return plan_to_python(self)
