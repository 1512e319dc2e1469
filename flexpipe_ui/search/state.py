"""The search's state: budgets and stops, the incumbent, the pruning threshold and every scored
candidate. ``consider`` is the one place a candidate is pruned (memory, time bound, memory-throughput
bound) or built and simulated (``evaluate``); the phases (``phases``) only choose what to consider."""
from __future__ import annotations

import math
import random
import time
from typing import Callable, Sequence

from ..costmodel import fits
from ..problem import Problem
from .bounds import memory_time_bound, plan_bound, stage_costs_cached
from .candidates import Candidate, with_bounds
from .evaluate import Scored, evaluate
from .result import Progress

__all__ = ["SearchState"]


class SearchState:
    """One search's budgets, incumbent and every scored candidate; ``consider`` prunes, builds and
    simulates one candidate, ``run_list`` a batch cheapest bound first."""

    def __init__(self, problem: Problem, *, seed: int, time_limit: float | None, max_evals: int,
                 max_actions: int, progress, stop: Callable[[], bool], top: int):
        self.problem = problem
        self.rng = random.Random(seed)
        self.t0 = time.perf_counter()
        self.time_limit = time_limit
        self.max_evals = max_evals
        self.max_actions = max_actions
        self.actions = 0
        self.progress = progress
        self.stop = stop
        self.top = max(1, top)
        self.floor = plan_bound(problem)  # no plan is faster: meeting it ends the search (top 1)
        self.cache: dict = {}
        self.sims: dict = {}   # (placement, order, partition) → SimResult: repeats are not re-simulated
        self.seen: set = set()
        self.scored: list[Scored] = []
        self.over: list[tuple[Scored, Candidate]] = []   # built but over the memory cap
        self.best: Scored | None = None
        self.best_seed: Scored | None = None
        self.pruned = 0
        self.failed = 0
        self.phase = ""
        self.stopped = ""
        self._cand_of: dict[int, Candidate] = {}   # id(Scored) → its candidate, for refinement
        self.min_memory: tuple[float, str] = (math.inf, "")  # smallest memory lower bound seen
        self.exact_runs: list[dict] | None = None  # the exact polish's runs, when it was asked for

    # -- budget --------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def out_of_budget(self) -> bool:
        if self.stopped:
            return True
        if self.top == 1 and self.best is not None and self.best.makespan <= self.floor * (1 + 1e-9):
            self.stopped = "optimal"  # meets bounds.plan_bound: nothing left to find
        elif len(self.scored) >= self.max_evals:
            self.stopped = "max_evals"
        elif self.actions >= self.max_actions:
            self.stopped = "max_actions"
        elif (self.time_limit is not None and self.best is not None and self.phase != "seeds"
              and self.elapsed() >= self.time_limit):
            # only once a usable plan exists and every library seed was tried: a time limit never
            # returns nothing, nor anything worse than the best library schedule
            self.stopped = "time_limit"
        elif self.stop():
            self.stopped = "cancelled"
        return bool(self.stopped)

    @property
    def incumbent(self) -> float:
        return self.best.makespan if self.best is not None else math.inf

    @property
    def threshold(self) -> float:
        """What a candidate's lower bound must beat to matter: the incumbent, or with ``top`` K > 1
        the K-th best distinct fitting plan so far (a candidate could still enter the top K)."""
        if self.top == 1:
            return self.incumbent
        best: dict = {}
        for x in self.scored:
            if x.ok:
                key = (x.description, tuple(len(p) for p in x.plan.partition or ()))
                best[key] = min(best.get(key, math.inf), x.makespan)
        spans = sorted(best.values())
        return spans[self.top - 1] if len(spans) >= self.top else math.inf

    # -- one candidate -------------------------------------------------------------------------
    def consider(self, c: Candidate, *, force: bool = False) -> Scored | None:
        key = (c.key or c.description, tuple(len(p) for p in c.partition))
        if key in self.seen:
            return None
        if self.out_of_budget():
            return None
        self.seen.add(key)
        if c.bounds is None:
            c = with_bounds(c, self.problem, self.cache)
        limit = self.problem.memory_limit
        if c.bounds.memory < self.min_memory[0]:
            self.min_memory = (c.bounds.memory, c.description)
        if not fits(c.bounds.memory, limit):
            self.pruned += 1
            return None
        bar = self.threshold
        if not force and c.bound >= bar * (1 - 1e-9):
            self.pruned += 1
            return None
        if not force and limit is not None and c.program is not None and self.best is not None:
            # a DSL program with the cap fits or fails, so the memory-throughput bound applies
            # (library seeds are exempt: over the cap they still seed the memory repair)
            costs = stage_costs_cached(self.problem, c.partition, self.cache)
            mt = memory_time_bound(costs, c.placement, self.problem.ranks, self.problem.microbatches,
                                   limit, _extra_stages(c.program.extra))
            if mt >= bar * (1 - 1e-9):
                self.pruned += 1
                return None
        s = evaluate(c.build, self.problem, description=c.description, bound=c.bound,
                     knobs=dict(c.knobs), sims=self.sims)
        self.scored.append(s)
        self._cand_of[id(s)] = c
        if s.plan is not None:
            self.actions += s.plan.schedule.num_actions
        if s.plan is None:
            self.failed += 1
        elif not s.fits:
            self.over.append((s, c))
        elif s.makespan < self.incumbent * (1 - 1e-12):
            self.best = s
        if c.family == "library" and s.ok and (self.best_seed is None or s.makespan < self.best_seed.makespan):
            self.best_seed = s
        self.notify()
        return s

    def candidate_of(self, s: Scored) -> Candidate | None:
        """The candidate a scored plan came from (None for the exact polish's orders)."""
        return self._cand_of.get(id(s))

    def add_scored(self, s: Scored) -> None:
        """Record a plan scored outside ``consider`` (the exact polish's orders)."""
        self.scored.append(s)
        if s.ok and s.makespan < self.incumbent * (1 - 1e-12):
            self.best = s
        self.notify()

    def notify(self) -> None:
        """One progress event (after each evaluation)."""
        if self.progress is not None:
            b = self.best
            self.progress(Progress(len(self.scored), self.max_evals, self.incumbent,
                                   b.plan if b else None, self.elapsed(), self.phase, self.pruned,
                                   b.description if b else "", b.result if b else None))

    def run_list(self, cands: Sequence[Candidate], *, force: bool = False) -> None:
        cands = [with_bounds(c, self.problem, self.cache) for c in cands]
        tie = list(range(len(cands)))
        self.rng.shuffle(tie)  # equal bounds: the seed decides
        for i in sorted(range(len(cands)), key=lambda i: (cands[i].bound, tie[i])):
            if self.out_of_budget():
                return
            self.consider(cands[i], force=force)


def _extra_stages(extra) -> tuple[int, ...] | str:
    """Stages any extra operation touches (``"all"`` if one covers every stage)."""
    if any(where == "all" for where in extra.values()):
        return "all"
    return tuple(sorted({s for where in extra.values() for s in where}))
