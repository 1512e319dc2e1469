"""``SearchOptions``: what ``auto_search`` may spend and how it reports and stops, in one value.

``auto_search(problem, SearchOptions(top=3))`` or, equally, ``auto_search(problem, top=3)``
(keywords are field names). The budgets are counts, so a search is deterministic for its ``seed``;
``time_limit`` and ``stop`` are the only machine-dependent ends.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..problem import Problem

__all__ = ["SearchOptions", "options_with", "default_budget"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchOptions:
    """Options of one search (all optional)."""

    time_limit: float | None = None
    """Seconds after which the search ends with the best plan so far (only once some plan fits)."""
    seed: int = 0
    """Tie-break seed: equal bounds and the refinement's neighbour order are shuffled by it."""
    progress: Callable[[Any], Any] | None = None
    """Called with a ``Progress`` after each evaluation (and each exact-polish run)."""
    top: int = 1
    """How many distinct best plans to return (``SearchResult.candidates``)."""
    stop: Callable[[], bool] | None = None
    """Asked after each evaluation; True ends the search with the best so far (e.g. an
    ``threading.Event``'s ``is_set``). The one way to cancel a search."""
    max_evals: int | None = None
    """Simulations allowed (default: ``default_budget``)."""
    max_actions: int | None = None
    """Simulated actions allowed, over all candidates (default: ``default_budget``)."""
    chunks: tuple[int, ...] = (1, 2, 3, 4)
    """Stages per rank the DSL programs may use (the library seeds try their own)."""
    exact: float = 0.0
    """Seconds of CP-SAT re-ordering of the best few structures (``exact.polish``, needs OR-Tools);
    it runs for wall-clock time, so with it the result can differ between machines and runs."""
    abandon: bool = True
    """End a DSL candidate's build as soon as its partial schedule proves it cannot beat the plan
    to beat (each lane's free time plus its remaining work; ``state.SearchState.watch``). Such a
    candidate could not have been kept; it scores as abandoned rather than by its makespan, so the
    search path may differ from building every candidate in full (False), not the plans it could
    return. At 64 ranks × 256 microbatches most losing rule sets end within a tenth of their build."""


def options_with(options: SearchOptions | None, **overrides) -> SearchOptions:
    """``options`` (default ``SearchOptions()``) with ``overrides``, which must be field names."""
    from ..configs import config_with_fields
    if "chunks" in overrides:
        overrides["chunks"] = tuple(overrides["chunks"])
    return config_with_fields(SearchOptions, options, overrides, arg="options", caller="auto_search",
                              hint=" (to cancel, pass stop=event.is_set)")


# Under a memory cap, the share of both budgets the phases before the memory spending may not use
# (SearchState.hold_back): at 8 x 32 with a cap the exploration alone spent every action, so no
# over-cap plan was ever fitted by per-microbatch recompute/offload (benchmarks/bench_memory.py).
MEMORY_RESERVE = 0.25


def default_budget(problem: Problem) -> tuple[int, int]:
    """(evaluations, simulated actions) allowed by default.

    Generation + simulation cost grows with the action count, so the budget is also a number of
    actions: 185k per 256 rank-microbatches (<= 2 s at 8×32 and ~5 s at 16×64 on one core, see
    benchmarks/bench_auto.py). Both are counts, so the search stays deterministic.
    """
    size = problem.ranks * problem.microbatches
    return 400, int(185_000 * max(size, 64) / 256)
