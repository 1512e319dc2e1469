"""What a search returns or raises: ``SearchResult`` (best plan, top-K, statistics), the ``Progress``
events it reports, ``NoFeasiblePlan`` and ``SearchCancelled``; ``build_result`` assembles them."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..ir import Plan
from ..problem import Problem
from ..sim import SimResult
from .bounds import ideal_makespan, packing_makespan

__all__ = ["Progress", "SearchResult", "NoFeasiblePlan", "SearchCancelled", "build_result"]


class NoFeasiblePlan(ValueError):
    """No candidate fits the memory cap (or none could be built)."""

    def __init__(self, message: str, *, smallest_peak: float, memory_limit: float | None,
                 description: str = ""):
        super().__init__(message)
        self.smallest_peak = smallest_peak
        self.memory_limit = memory_limit
        self.description = description


class SearchCancelled(RuntimeError):
    """Cancelled before any usable plan was found."""


@dataclass(frozen=True, slots=True)
class Progress:
    """What the progress callback receives after each evaluation."""

    evaluated: int
    """Candidates simulated so far."""
    total: int | None
    """The evaluation budget (an upper bound on ``evaluated``)."""
    best_makespan: float
    """Best usable makespan so far (inf before the first)."""
    best_plan: Plan | None
    """The plan achieving it."""
    elapsed: float
    """Seconds since the search started."""
    phase: str = ""
    """seeds, explore, sweep, repair, refine or exact."""
    pruned: int = 0
    """Candidates skipped by their lower bound."""
    description: str = ""
    """Description of the best candidate."""
    best_result: Any = None
    """The best plan's ``SimResult`` (so a progress callback that draws it never re-simulates)."""
    fraction: float = 0.0
    """Share of the search done, roughly (by phase, then by candidates within the phase)."""
    estimate: float | None = None
    """Seconds still to go, roughly (elapsed time scaled by ``fraction``); None this early."""
    abandoned: int = 0
    """Builds ended early because they proved they could not win (``SearchOptions.abandon``)."""


@dataclass(frozen=True, eq=False)
class SearchResult:
    """The best plan, the top-K (plan, simulation, description) and the search statistics."""

    best: Plan
    candidates: list[tuple[Plan, SimResult, str]]
    stats: dict
    lower_bound: float
    """No plan of the problem can be faster (``bounds.plan_bound``: Σ work / ranks, indivisible
    layers, the pipeline fill, one microbatch's chain)."""
    best_seed: tuple[Plan, SimResult, str] | None = None

    @property
    def makespan(self) -> float:
        return self.candidates[0][1].makespan

    def __repr__(self) -> str:
        return (f"SearchResult(makespan={self.makespan:.4g}, lower_bound={self.lower_bound:.4g}, "
                f"best={self.candidates[0][2]!r}, evaluated={self.stats.get('evaluated')})")

    def table(self) -> str:
        """The top-K as text: rank, makespan, peak memory, candidate; then the statistics."""
        lines = [f"{'#':>2}  {'makespan':>12}  {'peak memory':>12}  candidate"]
        for k, (_, sim, desc) in enumerate(self.candidates, 1):
            lines.append(f"{k:>2}  {sim.makespan:>12.6g}  {sim.metrics.max_peak_memory:>12.6g}  {desc}")
        st = self.stats
        ratio = f"; best is {self.makespan / self.lower_bound:.3f}x of it" if self.lower_bound > 0 else ""
        lines.append(f"lower bound {self.lower_bound:.6g} (no plan is faster: work / ranks, whole layers, pipeline "
                     f"fill{ratio}); {st['evaluated'] - st.get('abandoned', 0)} simulated, "
                     f"{st.get('abandoned', 0)} abandoned mid-build, "
                     f"{st['pruned']} pruned, {st['over_memory']} over memory in {st['elapsed_s']:.2f} s "
                     f"(stopped: {st['stopped']})")
        if self.best_seed is not None:
            lines.append(f"best library seed {self.best_seed[1].makespan:.6g} ({self.best_seed[2]})")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": self.table()}


def build_result(problem: Problem, S, top: int) -> SearchResult:
    """The ``SearchResult`` of a finished search ``S`` (a ``state.SearchState``), or the error that
    says why there is none."""
    good = sorted((s for s in S.scored if s.ok), key=lambda s: (s.makespan, s.peak))
    stats = {"evaluated": len(S.scored), "pruned": S.pruned, "failed": S.failed,
             "abandoned": S.abandoned, "over_memory": len(S.over), "elapsed_s": round(S.elapsed(), 4),
             "stopped": S.stopped or "exhausted", "budget": S.max_evals, "actions": S.actions,
             "action_budget": S.max_actions}
    if S.exact_runs is not None:
        stats["exact"] = S.exact_runs
    if not good:
        raise _no_plan_error(problem, S)
    # distinct plans for the top-K
    seen, cands = set(), []
    for s in good:
        key = (s.description, s.sizes)
        if key in seen:
            continue
        seen.add(key)
        cands.append(s)
        if len(cands) >= top:
            break
    lb = S.floor
    out = []
    for rank_i, s in enumerate(cands):
        meta = {"name": "auto", "candidate": s.description,
                "search": {**stats, "rank": rank_i + 1, "makespan": s.makespan,
                           "peak_memory": s.peak, "lower_bound": lb,
                           "ideal_bound": ideal_makespan(problem),
                           "packing_bound": packing_makespan(problem),
                           "best_seed": S.best_seed.description if S.best_seed else None,
                           "best_seed_makespan": S.best_seed.makespan if S.best_seed else None},
                "knobs": dict(s.knobs),
                "source_meta": dict(S.plan_of(s).meta)}
        out.append((S.plan_of(s).with_meta(**meta), S.result_of(s), s.description))
    seed = None
    if S.best_seed is not None:
        seed = (S.best_seed.plan, S.best_seed.result, S.best_seed.description)
    return SearchResult(out[0][0], out, stats, lb, seed)


def _no_plan_error(problem: Problem, S) -> Exception:
    """Why the search has nothing to return: cancelled first, nothing built, or nothing fits."""
    limit = problem.memory_limit
    if S.stopped == "cancelled":
        return SearchCancelled(f"search cancelled after {len(S.scored)} evaluations, before any plan "
                               "fitting the memory cap was found")
    built = [s for s in S.scored if s.built]
    if not built:
        low, desc = S.min_memory
        if limit is not None and low > limit:
            return NoFeasiblePlan(
                f"nothing fits memory_limit={limit:g}: every candidate needs at least {low:.6g} on "
                f"some rank (static memory + one microbatch's activation of its largest stage; "
                f"best: {desc}). A cap of {low:.6g} is the least that could fit; otherwise "
                f"recompute activations, shard the weights, or use more ranks than {problem.ranks}.",
                smallest_peak=low, memory_limit=limit, description=desc)
        reasons = "; ".join(dict.fromkeys(s.error for s in S.scored[:5]))
        return NoFeasiblePlan(f"no candidate could be built ({len(S.scored)} tried): {reasons}",
                              smallest_peak=math.inf, memory_limit=limit)
    low = min(built, key=lambda s: s.peak)
    static = max(S.result_of(low).metrics.static_memory)
    return NoFeasiblePlan(
        f"nothing fits memory_limit={limit:g}: the smallest simulated per-rank peak among "
        f"{len(built)} plans is {low.peak:.6g} ({low.description}; static {static:.6g} of it). "
        f"A cap of {low.peak:.6g} would fit; otherwise hold fewer microbatches in flight "
        f"(fewer microbatches than {problem.microbatches}), recompute activations, or use more "
        f"ranks than {problem.ranks}.",
        smallest_peak=low.peak, memory_limit=limit, description=low.description)
