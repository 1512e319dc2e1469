"""``Family``: one named schedule of the library — how to generate it and its DSL source text."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..dsl import Placement, Program
from ..ir import Schedule
from ..problem import StageCosts

__all__ = ["Family", "LibraryError"]


class LibraryError(ValueError):
    """An unknown schedule name or a shape the schedule does not support."""


@dataclass(frozen=True, kw_only=True)
class Family:
    """A library schedule: a DSL ``Program`` (rules) or a phase-written order function."""

    name: str
    """CLI name, e.g. ``"zb-h1"``."""
    description: str
    """One line for ``flexpipe plan --list``."""
    placement: Callable[[int], Placement]
    """chunks → placement."""
    default_chunks: int = 1
    """Stages per rank when ``chunks`` is not given."""
    allowed_chunks: tuple[int, ...] | None = None
    """The chunk counts it supports; None: any >= 1."""
    program: Callable[[int], Program] | None = None
    """chunks → the DSL program (rule-generated families)."""
    order: Callable[..., Schedule] | None = None
    """``order(ranks, microbatches, chunks)`` → schedule (phase-written families)."""
    order_source: str = ""
    """Python path of ``order`` for the plan's ``meta["program"]``."""
    min_microbatches: Callable[[int, int], int] | None = None
    """(ranks, chunks) → the fewest microbatches it supports (None: 1)."""

    def chunks_for(self, chunks: int | None) -> int:
        v = self.default_chunks if chunks is None else chunks
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LibraryError(f"{self.name}: chunks must be an integer >= 1, got {chunks!r}")
        if self.allowed_chunks is not None and v not in self.allowed_chunks:
            raise LibraryError(f"{self.name} runs {', '.join(map(str, self.allowed_chunks))} stage(s) "
                               f"per rank, not --chunks {v}")
        return v

    def generate(self, ranks: int, microbatches: int, chunks: int,
                 costs: StageCosts | None) -> tuple[Schedule, str]:
        """(schedule, DSL source) for this shape; ``costs`` drive rule-generated families."""
        if self.min_microbatches is not None:
            lo = self.min_microbatches(ranks, chunks)
            if microbatches < lo:
                raise LibraryError(f"{self.name} needs at least {lo} microbatches with {ranks} ranks "
                                   f"and {chunks} chunk(s), got {microbatches}")
        if self.program is not None:
            prog = self.program(chunks)
            return prog.schedule(ranks=ranks, microbatches=microbatches, costs=costs), prog.source()
        sched = self.order(ranks, microbatches, chunks)
        return sched, f"{self.order_source}(ranks={ranks}, microbatches={microbatches}, chunks={chunks})"
