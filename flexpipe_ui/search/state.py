"""The search's state: budgets and stops, the incumbent, the pruning threshold and every scored
candidate. ``consider`` is the one place a candidate is pruned (memory, time bound, memory-throughput
bound) or built and simulated (``evaluate``); the phases (``phases``) only choose what to consider.

Every build is watched (``flexpipe_ui.watch``): the list scheduler reports a lower bound on the
makespan every few thousand actions, and a candidate whose bound reaches the pruning threshold is
abandoned there (it could not have been kept; ``SearchOptions.abandon``). The search keeps plans
and simulations only for the few candidates that may still be returned or built on (``_trim``),
and ``stop`` ends even a long build or partitioning within milliseconds.
"""
from __future__ import annotations

import math
import random
import time
from typing import Callable, Sequence

from ..costmodel import fits
from ..problem import Problem
from .bounds import memory_time_bound, plan_bound, stage_costs_cached
from .candidates import Candidate, with_bounds
from ..watch import Abandoned, watching
from .evaluate import Scored, abandoned, evaluate
from .result import Progress

__all__ = ["SearchState", "Stopped", "SIM_CACHE_MAX"]

SIM_CACHE_MAX = 4096
"""Ranks × microbatches up to which simulations are kept for schedules that repeat (different
rules often give the same order once a cap binds); above, they would hold hundreds of MB."""

PHASES = (("seeds", 0.15), ("explore", 0.25), ("sweep", 0.25), ("repair", 0.15), ("refine", 0.2))
"""The phases in their usual order and the share of a search's time each takes, roughly (for the
progress events' estimate; memory-bound problems repair before they sweep)."""


class Stopped(Exception):
    """Raised by the watcher when ``stop()`` says so; the search ends with what it has."""


class SearchState:
    """One search's budgets, incumbent and every scored candidate; ``consider`` prunes, builds and
    simulates one candidate, ``run_list`` a batch cheapest bound first."""

    def __init__(self, problem: Problem, *, seed: int, time_limit: float | None, max_evals: int,
                 max_actions: int, progress, stop: Callable[[], bool], top: int,
                 abandon: bool = True):
        self.problem = problem
        self.abandon = bool(abandon)
        self._bar: float | None = None   # abandonment threshold of the build in progress
        self._ticks = 0
        self.abandoned = 0
        self._done = 0.0                 # share of the phases before the current one
        self._within = 0.0               # share of the current phase done
        self.rng = random.Random(seed)
        self.t0 = time.perf_counter()
        self.time_limit = time_limit
        self.max_evals = max_evals
        self.max_actions = max_actions
        self._reserve = (0, 0)           # (evaluations, actions) held back for a later phase
        self.actions = 0
        self.progress = progress
        self.stop = stop
        self.top = max(1, top)
        self.floor = plan_bound(problem)  # no plan is faster: meeting it ends the search (top 1)
        self.cache: dict = {}
        self.sims: dict = {}   # (placement, order, partition) → SimResult: repeats are not re-simulated
        self._cache_sims = problem.ranks * problem.microbatches <= SIM_CACHE_MAX
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

    def hold_back(self, share: float) -> None:
        """Hold ``share`` of both budgets back until ``release``: the phases before it cannot
        spend them (under a cap the exploration alone can use every action, and the memory
        spending that follows would then fit nothing)."""
        ev, ac = int(self.max_evals * share), int(self.max_actions * share)
        self.max_evals -= ev
        self.max_actions -= ac
        self._reserve = (self._reserve[0] + ev, self._reserve[1] + ac)

    def release(self) -> None:
        """Give back what ``hold_back`` kept; a search stopped only by the smaller budget goes on."""
        ev, ac = self._reserve
        self.max_evals += ev
        self.max_actions += ac
        self._reserve = (0, 0)
        if self.stopped in ("max_evals", "max_actions"):
            self.stopped = ""

    def watch(self, bound: float | None) -> None:
        """The watcher of every build, simulation and partitioning (``flexpipe_ui.watch``): ends
        it on ``stop()``, or, during a build, once ``bound`` reaches the bar (``abandon``)."""
        self._ticks += 1
        if self.stop():
            self.stopped = "cancelled"
            raise Stopped()
        if bound is not None and self._bar is not None and bound >= self._bar * (1 - 1e-9):
            raise Abandoned(bound)

    def watching(self):
        return watching(self.watch)

    # -- progress ------------------------------------------------------------------------------
    def begin(self, phase: str) -> None:
        """Enter ``phase`` (progress and estimate follow ``PHASES``)."""
        shares = dict(PHASES)
        if phase in shares and phase != self.phase:
            self._done = min(1.0, self._done + shares.get(self.phase, 0.0))
            self._within = 0.0
        self.phase = phase

    def fraction(self) -> float:
        """Share of the search done, roughly (phases by ``PHASES``, within one by candidates)."""
        share = dict(PHASES).get(self.phase, 0.0)
        return min(1.0, self._done + share * self._within)

    def estimate(self) -> float | None:
        """Seconds still to go, roughly: elapsed time scaled by the share done (None this early);
        never past ``time_limit``."""
        f = self.fraction()
        if f < 0.05:
            return None
        left = self.elapsed() * (1 - f) / f
        if self.time_limit is not None:
            left = min(left, max(0.0, self.time_limit - self.elapsed()))
        return left

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
                key = (x.description, x.sizes)
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
        s = self._evaluate(c, math.inf if force else bar)
        if s is None:
            return None
        self.scored.append(s)
        self._cand_of[id(s)] = c
        if s.plan is not None:
            self.actions += s.plan.schedule.num_actions
        if s.error.startswith("abandoned"):
            self.abandoned += 1
        elif not s.built:
            self.failed += 1
        elif not s.fits:
            self.over.append((s, c))
        elif s.makespan < self.incumbent * (1 - 1e-12):
            self.best = s
        if c.family == "library" and s.ok and (self.best_seed is None or s.makespan < self.best_seed.makespan):
            self.best_seed = s
        self._trim()
        self.notify()
        return s

    def _evaluate(self, c: Candidate, bar: float) -> Scored | None:
        """Build and simulate ``c`` under the watcher, abandoning the build once its bound
        reaches ``bar`` (only DSL programs report one). None when ``stop()`` ended it."""
        self._bar = bar if self.abandon and math.isfinite(bar) else None
        self._ticks = 0
        try:
            with self.watching():
                return evaluate(c.build, self.problem, description=c.description, bound=c.bound,
                                knobs=dict(c.knobs), sims=self.sims if self._cache_sims else None)
        except Abandoned as e:
            self.actions += self._ticks * 512   # the scheduler ticks every 512 actions
            return abandoned(c.description, c.bound, e.bound, dict(c.knobs))
        except Stopped:
            return None
        finally:
            self._bar = None

    def _trim(self) -> None:
        """Drop the plans and simulations nothing will use: keep the best ``top + 3`` fitting
        plans (results, refinement starts) and the best seed (over the cap, what the repair needs
        stays in the score: peaks, in-flight counts)."""
        keep = {id(self.best_seed)}
        fitting = sorted((x for x in self.scored if x.ok), key=lambda x: x.makespan)
        keep.update(id(x) for x in fitting[:self.top + 3])
        slimmed: dict[int, Scored] = {}
        for i, x in enumerate(self.scored):
            if x.plan is not None and id(x) not in keep:
                slim = slimmed[id(x)] = x.slim()
                self.scored[i] = slim
                self._cand_of[id(slim)] = self._cand_of.pop(id(x))
        if slimmed:
            self.over = [(slimmed.get(id(x), x), c) for x, c in self.over]
            self.best = slimmed.get(id(self.best), self.best)

    def plan_of(self, s: Scored):
        """``s``'s plan, rebuilt from its candidate if it was dropped (``_trim``)."""
        if s.plan is not None:
            return s.plan
        c = self.candidate_of(s)
        return c.build() if c is not None else None

    def result_of(self, s: Scored):
        """``s``'s simulation, redone if it was dropped (``_trim``)."""
        if s.result is not None:
            return s.result
        from ..sim import simulate
        return simulate(self.plan_of(s), self.problem)

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
                                   b.description if b else "", b.result if b else None,
                                   self.fraction(), self.estimate(), self.abandoned))

    def run_list(self, cands: Sequence[Candidate], *, force: bool = False) -> None:
        cands = [with_bounds(c, self.problem, self.cache) for c in cands]
        tie = list(range(len(cands)))
        self.rng.shuffle(tie)  # equal bounds: the seed decides
        for k, i in enumerate(sorted(range(len(cands)), key=lambda i: (cands[i].bound, tie[i]))):
            if self.out_of_budget():
                return
            self._within = max(self._within, k / max(1, len(cands)))
            self.consider(cands[i], force=force)
        self._within = 1.0


def _extra_stages(extra) -> tuple[int, ...] | str:
    """Stages any extra operation touches (``"all"`` if one covers every stage)."""
    if any(where == "all" for where in extra.values()):
        return "all"
    return tuple(sorted({s for where in extra.values() for s in where}))
