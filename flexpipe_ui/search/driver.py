"""The auto-scheduler loop: seeds, bounded exploration, memory repair, local refinement.

Phases (each candidate is pruned when its lower bound cannot beat the incumbent, or with ``top`` K
the K-th best plan so far; under a memory cap a DSL program — which fits or fails — also by
``bounds.memory_time_bound``):

1. **seeds** — every library schedule on an even and a balanced split (``space.seed_candidates``),
   so the result is never worse than the best of them;
2. **explore** — two DSL rule sets on every structure (chunks × placement × partition), cheapest
   bound first; **sweep** — the whole rule grid on the best structure, its six best rule sets on
   the runner-up;
3. **repair** — candidates over the memory cap (library seeds and their re-splits: a DSL program
   with the cap never overshoots it) are re-split with the per-stage in-flight counts measured on
   their own simulation, and answered with capped DSL rules and recompute (before the sweep when
   memory binds: something faster than the best fitting plan overflowed);
4. **refine** — hill-climb on the best few: move one stage boundary of the busiest rank by one
   layer and rebuild the same program.

A schedule that repeats one already simulated (different rules often give the same order once
the cap binds) reuses that simulation; it still counts against the budgets, so the search path
does not depend on the cache.

Determinism: the order of evaluation depends only on the problem and ``seed`` (ties and the
refinement's neighbour order are shuffled by ``random.Random(seed)``); the budgets
(``max_evals`` simulations, ``max_actions`` simulated actions) are counts, so ``time_limit`` and
cancellation are the only machine-dependent stops (``stats["stopped"]`` says which ended it;
``"optimal"`` when the best plan meets ``bounds.plan_bound``, which no plan can beat).
"""
from __future__ import annotations

import gc
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..ir import Plan
from ..partition import PartitionError, balanced_partition, rank_loads
from ..problem import Problem, ProblemError
from ..sim import SimResult
from .bounds import ideal_makespan, memory_time_bound, packing_makespan, plan_bound, stage_costs_cached
from .candidates import Candidate, with_bounds
from .evaluate import Scored, evaluate, stage_inflight

__all__ = ["Progress", "SearchResult", "NoFeasiblePlan", "SearchCancelled", "auto_search", "auto"]


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
    """seeds, explore, repair or refine."""
    pruned: int = 0
    """Candidates skipped by their lower bound."""
    description: str = ""
    """Description of the best candidate."""
    best_result: Any = None
    """The best plan's ``SimResult`` (so a progress callback that draws it never re-simulates)."""


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
                     f"fill{ratio}); {st['evaluated']} simulated, "
                     f"{st['pruned']} pruned, {st['over_memory']} over memory in {st['elapsed_s']:.2f} s "
                     f"(stopped: {st['stopped']})")
        if self.best_seed is not None:
            lines.append(f"best library seed {self.best_seed[1].makespan:.6g} ({self.best_seed[2]})")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": self.table()}


def default_budget(problem: Problem) -> tuple[int, int]:
    """(evaluations, simulated actions) allowed by default.

    Generation + simulation cost grows with the action count, so the budget is also a number of
    actions: 185k per 256 rank-microbatches (<= 2 s at 8×32 and ~5 s at 16×64 on one core, see
    benchmarks/bench_auto.py). Both are counts, so the search stays deterministic.
    """
    size = problem.ranks * problem.microbatches
    return 400, int(185_000 * max(size, 64) / 256)


class _Search:
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
        key = (c.knobs.get("key", c.description), tuple(len(p) for p in c.partition))
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
        if limit is not None and c.bounds.memory > limit * (1 + 1e-9):
            self.pruned += 1
            return None
        bar = self.threshold
        if not force and c.bound >= bar * (1 - 1e-9):
            self.pruned += 1
            return None
        if not force and limit is not None and "program" in c.knobs and self.best is not None:
            # a DSL program with the cap fits or fails, so the memory-throughput bound applies
            # (library seeds are exempt: over the cap they still seed the memory repair)
            costs = stage_costs_cached(self.problem, c.partition, self.cache)
            mt = memory_time_bound(costs, c.placement, self.problem.ranks, self.problem.microbatches,
                                   limit, _extra_stages(c.knobs.get("_extra") or {}))
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
        self._notify()
        return s

    def _notify(self) -> None:
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

    # -- phases --------------------------------------------------------------------------------
    def repair(self, make_variants, max_evals: int = 70) -> None:
        """Re-split over-memory candidates with their measured in-flight counts; try rule variants
        (about ``max_evals`` simulations at most: checked between candidates)."""
        limit = self.problem.memory_limit
        if limit is None:
            return
        done: set = set()
        self._repair_stop = len(self.scored) + max_evals
        for _ in range(3):  # up to three rounds: the next seeds, and re-splits that still overshoot
            fresh = [sc for sc in sorted(self.over, key=lambda sc: sc[0].makespan) if id(sc[0]) not in done]
            # re-split seeds that still overshoot first, then the next few seeds by makespan
            todo = [sc for sc in fresh if sc[1].family != "library"][:6]
            todo += [sc for sc in fresh if sc[1].family == "library"][:8 - len(todo)]
            if not todo or self.out_of_budget():
                return
            for s, _ in todo:
                done.add(id(s))
            self._repair_round(todo, make_variants, limit)

    def _repair_round(self, todo, make_variants, limit) -> None:
        for s, c in todo:
            if self.out_of_budget() or len(self.scored) >= self._repair_stop:
                return
            infl = stage_inflight(s.result)
            try:
                part = balanced_partition(self.problem, len(c.placement), placement=c.placement,
                                          inflight=infl, memory_limit=limit)
            except PartitionError:
                part = None
            if part is not None and part != c.partition:
                self.consider(c.moved(part, _base(c.description) + ", memory-aware split (measured in-flight)"),
                              force=self.best is None)
            for v in make_variants(c, s):
                if self.out_of_budget() or len(self.scored) >= self._repair_stop:
                    return
                self.consider(v, force=self.best is None)

    def refine(self, rounds: int = 6) -> None:
        """Hill-climb on the three best candidates: move one stage boundary by one layer
        (``_neighbours``), rebuild the same program, keep the first improvement."""
        pool = sorted((s for s in self.scored if s.ok), key=lambda s: s.makespan)
        starts = []
        for s in pool:
            c = self._cand_of.get(id(s))
            if c is not None and c not in starts:
                starts.append(c)
            if len(starts) >= 3:
                break
        for c in starts:
            cur_s = next(s for s in pool if self._cand_of.get(id(s)) is c)
            cur, cur_ms = c, cur_s.makespan
            for _ in range(rounds):
                if self.out_of_budget():
                    return
                improved = False
                for nb in self._neighbours(cur, cur_s):
                    s = self.consider(nb)
                    if s is not None and s.ok and s.makespan < cur_ms * (1 - 1e-12):
                        cur, cur_ms, cur_s, improved = nb, s.makespan, s, True
                        break
                    if self.out_of_budget():
                        return
                if not improved:
                    break

    def exact(self, seconds: float, structures: int = 3) -> None:
        """Polish the best plan of each of the ``structures`` best distinct (placement, partition)
        pairs with CP-SAT, sharing ``seconds``; a faster order joins the scored plans."""
        from . import exact as ex
        self.exact_runs: list[dict] = []
        if not ex.available():
            self.exact_runs.append({"status": "ortools not installed (pip install ortools)"})
            return
        pool, seen = [], set()
        for s in sorted((s for s in self.scored if s.ok), key=lambda s: s.makespan):
            key = (s.plan.schedule.placement, s.plan.partition)
            if key not in seen:
                seen.add(key)
                pool.append(s)
            if len(pool) >= structures:
                break
        deadline = time.perf_counter() + seconds
        for k, s in enumerate(pool):
            left = deadline - time.perf_counter()
            if left <= 0.05 or self.stop():
                break
            r = ex.polish(s.plan, self.problem, time_limit=left / (len(pool) - k), seed=self.rng.randrange(2 ** 31))
            self.exact_runs.append({"candidate": s.description, "before": s.makespan, "after": r.makespan,
                                    "bound": r.bound, "status": r.status, "seconds": round(r.seconds, 3)})
            if r.plan is None:
                continue
            scored = evaluate(lambda plan=r.plan: plan, self.problem, description=s.description + ", exact order",
                              bound=r.bound, knobs={**s.knobs, "exact": True}, sims=self.sims)
            self.scored.append(scored)
            if scored.ok and scored.makespan < self.incumbent * (1 - 1e-12):
                self.best = scored
            self._notify()

    def _neighbours(self, c: Candidate, scored: Scored) -> list[Candidate]:
        """Splits that give one layer of the busiest rank — and, under a memory cap, of the rank
        with the highest simulated peak (memory throttles it) — to a neighbouring stage."""
        p = self.problem
        loads = rank_loads(p, c.partition, c.placement)
        relieve = {int(loads.argmax())}
        if p.memory_limit is not None and scored.result is not None:
            peaks = scored.result.metrics.peak_memory
            relieve.add(int(max(range(len(peaks)), key=peaks.__getitem__)))
        sizes = [len(x) for x in c.partition]
        out = []
        for s, r in enumerate(c.placement):
            if r not in relieve or sizes[s] < 2:
                continue
            for t in (s - 1, s + 1):  # give one layer to the neighbouring stage
                if 0 <= t < len(sizes):
                    ns = list(sizes)
                    ns[s] -= 1
                    ns[t] += 1
                    part, k = [], 0
                    for n in ns:
                        part.append(tuple(range(k, k + n)))
                        k += n
                    out.append(c.moved(part, _base(c.description) + f", refined split {_sizes_text(ns)}"))
        self.rng.shuffle(out)
        return out


def _best_structures(S: _Search, structs: list, k: int) -> list:
    """The k structures (placement, split) whose best evaluated candidate is fastest; over-memory
    ones count by their makespan too when nothing fits yet."""
    best: dict = {}
    for sc in S.scored:
        c = S._cand_of.get(id(sc))
        if c is None or sc.plan is None:
            continue
        key = (c.placement, c.partition)
        val = sc.makespan if sc.fits else sc.makespan * 10
        best[key] = min(best.get(key, float("inf")), val)
    ranked = sorted(best, key=best.get)[:k]
    return [st for st in structs if (st[1], st[3]) in ranked]


def _extra_stages(extra) -> tuple[int, ...] | str:
    """Stages any extra operation touches (``"all"`` if one covers every stage)."""
    if any(where == "all" for where in extra.values()):
        return "all"
    return tuple(sorted({s for where in extra.values() for s in where}))


def _sizes_text(sizes) -> str:
    """Layers per stage, runs compressed: [1x27, 2, 1, 1, 2, 1]."""
    out, k = [], 0
    while k < len(sizes):
        j = k
        while j < len(sizes) and sizes[j] == sizes[k]:
            j += 1
        out.append(f"{sizes[k]}x{j - k}" if j - k > 2 else ", ".join([str(sizes[k])] * (j - k)))
        k = j
    return "[" + ", ".join(out) + "]"


def _base(desc: str) -> str:
    return desc.split(", refined split")[0]


def auto_search(problem: Problem, *, time_limit: float | None = None, seed: int = 0,
                progress: Callable[[Progress], Any] | None = None, top: int = 1,
                cancel=None, should_stop: Callable[[], bool] | None = None,
                max_evals: int | None = None, max_actions: int | None = None,
                space: dict | None = None, exact: float = 0.0) -> SearchResult:
    """Search partitions × schedules for the lowest simulated makespan that fits ``memory_limit``.

    ``exact`` > 0 adds the exact polish (``exact.polish``, needs OR-Tools): that many seconds of
    CP-SAT on the best few structures, re-ordering their actions optimally or as well as the time
    allows; ``stats["exact"]`` records each run and its proven bound for the structure. It runs for
    wall-clock time, so with it the result can differ between machines and runs.

    ``cancel`` is a ``threading.Event``-like object (``is_set()``) and ``should_stop`` a callable;
    either stops the search after the current evaluation and returns the best so far.
    ``time_limit`` (seconds) stops likewise, but only once some plan fits.
    ``max_evals`` caps simulations and ``max_actions`` the actions simulated in all (defaults:
    ``default_budget``); ``space`` passes options to
    ``space.program_candidates`` (e.g. ``{"chunks": (1, 2)}``). Raises ``NoFeasiblePlan`` when
    nothing fits, ``SearchCancelled`` when stopped before any usable plan.
    """
    # the search allocates millions of short-lived tuples and no garbage cycles to speak of; the
    # cyclic collector's passes over a heap that holds torch and Jupyter cost ~15% of the time
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _auto_search(problem, time_limit=time_limit, seed=seed, progress=progress, top=top,
                            cancel=cancel, should_stop=should_stop, max_evals=max_evals,
                            max_actions=max_actions, space=space, exact=exact)
    finally:
        if was_enabled:
            gc.enable()


def _auto_search(problem: Problem, *, time_limit, seed, progress, top, cancel, should_stop, max_evals,
                 max_actions, space, exact) -> SearchResult:
    from . import space as sp

    if problem.num_layers < problem.ranks:
        raise ProblemError(f"the problem has {problem.num_layers} layers but {problem.ranks} ranks: every "
                           f"rank needs at least one layer; use at most {problem.num_layers} ranks or "
                           "profile the model at a finer layer granularity")

    def stop() -> bool:
        return bool((cancel is not None and cancel.is_set()) or (should_stop is not None and should_stop()))

    d_evals, d_actions = default_budget(problem)
    S = _Search(problem, seed=seed, time_limit=time_limit,
                max_evals=max_evals if max_evals is not None else d_evals,
                max_actions=max_actions if max_actions is not None else d_actions,
                progress=progress, stop=stop, top=top)
    opts = dict(space or {})
    S.phase = "seeds"
    # seeds first, cheapest bound first: a seed is skipped only when its lower bound already
    # cannot beat the incumbent, so the result is never worse than the best seed
    parts: dict = {}  # splits per placement, shared by seeds and programs
    S.run_list(sp.seed_candidates(problem, parts))
    S.phase = "explore"
    chunks = tuple(opts.get("chunks", (1, 2, 3, 4)))
    structs = sp.structures(problem, chunks, parts) if sp.dsl_available() else []
    S.run_list(sp.program_candidates(problem, only=structs))
    def sweep() -> None:
        S.phase = "sweep"
        top2 = _best_structures(S, structs, 2)
        first = sp.program_candidates(problem, only=top2[:1], rules=sp.all_rules)
        S.run_list(first)
        if len(top2) > 1:
            # the runner-up structure gets only the six rule sets that did best on the winner
            keys = {c.knobs["key"] for c in first}
            ranked = sorted((s for s in S.scored if s.knobs.get("key") in keys and "_rules" in s.knobs),
                            key=lambda s: s.score)
            rules = [s.knobs["_rules"] for s in ranked[:6]]
            S.run_list(sp.program_candidates(problem, only=top2[1:], rules=lambda problem, pl: rules))

    def repair() -> None:
        S.phase = "repair"
        S.repair(lambda c, s: sp.memory_variants(problem, c, s))
        if problem.memory_limit is not None and sp.recompute_kind() is not None:
            # memory may bind even when the capped list scheduler fits: try recompute on the best
            # structures too (pruned by a bound that charges the re-run forwards)
            S.run_list(sp.recompute_candidates(problem, _best_structures(S, structs, 2)))

    # memory binds when something faster than the best fitting plan was over the cap: then
    # repairing comes before sweeping rules
    binds = bool(S.over) and min(sc.makespan for sc, _ in S.over) < S.incumbent
    for phase in ((repair, sweep) if binds else (sweep, repair)):
        phase()
    S.phase = "refine"
    S.refine()
    if exact > 0:
        S.phase = "exact"
        if S.stopped == "optimal":
            S.exact_runs = [{"status": "skipped: the best plan meets the plan bound (optimal)"}]
        else:
            S.exact(float(exact))
    return _result(problem, S, top)


def _result(problem: Problem, S: _Search, top: int) -> SearchResult:
    limit = problem.memory_limit
    good = sorted((s for s in S.scored if s.ok), key=lambda s: (s.makespan, s.peak))
    stats = {"evaluated": len(S.scored), "pruned": S.pruned, "failed": S.failed,
             "over_memory": len(S.over), "elapsed_s": round(S.elapsed(), 4),
             "stopped": S.stopped or "exhausted", "budget": S.max_evals, "actions": S.actions,
             "action_budget": S.max_actions}
    if getattr(S, "exact_runs", None) is not None:
        stats["exact"] = S.exact_runs
    if not good:
        if S.stopped == "cancelled":
            raise SearchCancelled(f"search cancelled after {len(S.scored)} evaluations, before any plan "
                                  "fitting the memory cap was found")
        built = [s for s in S.scored if s.plan is not None]
        if not built:
            low, desc = S.min_memory
            if limit is not None and low > limit:
                raise NoFeasiblePlan(
                    f"nothing fits memory_limit={limit:g}: every candidate needs at least {low:.6g} on "
                    f"some rank (static memory + one microbatch's activation of its largest stage; "
                    f"best: {desc}). A cap of {low:.6g} is the least that could fit; otherwise "
                    f"recompute activations, shard the weights, or use more ranks than {problem.ranks}.",
                    smallest_peak=low, memory_limit=limit, description=desc)
            reasons = "; ".join(dict.fromkeys(s.error for s in S.scored[:5]))
            raise NoFeasiblePlan(f"no candidate could be built ({len(S.scored)} tried): {reasons}",
                                 smallest_peak=math.inf, memory_limit=limit)
        low = min(built, key=lambda s: s.peak)
        static = max(low.result.metrics.static_memory)
        raise NoFeasiblePlan(
            f"nothing fits memory_limit={limit:g}: the smallest simulated per-rank peak among "
            f"{len(built)} plans is {low.peak:.6g} ({low.description}; static {static:.6g} of it). "
            f"A cap of {low.peak:.6g} would fit; otherwise hold fewer microbatches in flight "
            f"(fewer microbatches than {problem.microbatches}), recompute activations, or use more "
            f"ranks than {problem.ranks}.",
            smallest_peak=low.peak, memory_limit=limit, description=low.description)
    # distinct plans for the top-K
    seen, cands = set(), []
    for s in good:
        key = (s.description, tuple(len(p) for p in s.plan.partition or ()))
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
                "knobs": {k: v for k, v in s.knobs.items() if k != "key" and not k.startswith("_")},
                "source_meta": dict(s.plan.meta)}
        out.append((s.plan.with_meta(**meta), s.result, s.description))
    seed = None
    if S.best_seed is not None:
        seed = (S.best_seed.plan, S.best_seed.result, S.best_seed.description)
    return SearchResult(out[0][0], out, stats, lb, seed)


def auto(problem: Problem, *, time_limit: float | None = None, seed: int = 0,
         progress: Callable[[Progress], Any] | None = None, top: int = 1, **kwargs) -> Plan:
    """The best plan found by ``auto_search`` (same arguments)."""
    return auto_search(problem, time_limit=time_limit, seed=seed, progress=progress, top=top, **kwargs).best
