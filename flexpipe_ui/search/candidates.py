"""Candidates: a lazily built plan plus what the search needs to rank it before building it.

A ``Candidate`` is a description, a partition, a placement and ``make(partition) -> Plan`` (a
library schedule or a DSL program applied to that split). Bounds come from the partition and
placement alone (``bounds.time_bounds``), so pruning costs nothing; ``make`` runs only for
survivors, and local refinement calls it again with a moved boundary.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..ir import Plan
from ..problem import Problem
from .bounds import Bounds, stage_costs_cached, time_bounds

__all__ = ["Candidate", "ProgramKnobs", "with_bounds"]


@dataclass(frozen=True, slots=True)
class ProgramKnobs:
    """How a DSL candidate was made, for the search's own use (re-running its rules elsewhere,
    bounding its recomputation); never recorded in the plan."""

    placement: object
    """The DSL placement object (``looped(v)``, ``vshape()``, ...)."""
    rules: object
    """The ``dsl.Rules``."""
    extra: Mapping = field(default_factory=dict)
    """Extra operations (``{"R": "all"}``)."""
    tag: str = ""
    """Suffix of the description and key (" [memory]", " [recompute]")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One point of the search space, not yet built."""

    description: str
    """Human-readable: source (library name or DSL program), chunks, partition mode."""
    family: str
    """"library" (a seed), "dsl" or "refine"."""
    placement: tuple[int, ...]
    """Stage → rank."""
    partition: tuple[tuple[int, ...], ...]
    """Stage → layer indices."""
    make: Callable[[tuple[tuple[int, ...], ...]], Plan]
    """Builds the plan for a partition (same program, any split)."""
    knobs: Mapping = field(default_factory=dict)
    """The knob values, recorded in the plan's meta."""
    key: str = ""
    """Identity for de-duplication with the partition's shape (default: the description)."""
    program: ProgramKnobs | None = None
    """For DSL candidates: the program's parts."""
    bounds: Bounds | None = None
    """Filled by ``with_bounds``."""
    extra_work: float = 0.0
    """Fraction of F re-run per microbatch (recompute) for the work bound."""

    @property
    def bound(self) -> float:
        return self.bounds.time if self.bounds is not None else 0.0

    def build(self) -> Plan:
        return self.make(self.partition)

    def moved(self, partition, description: str) -> "Candidate":
        return replace(self, partition=tuple(partition), description=description, family="refine",
                       bounds=None)


def with_bounds(c: Candidate, problem: Problem, cache: dict) -> Candidate:
    costs = stage_costs_cached(problem, c.partition, cache)
    extra = costs.f * c.extra_work if c.extra_work else None
    return replace(c, bounds=time_bounds(costs, c.placement, problem.ranks, problem.microbatches, extra))
