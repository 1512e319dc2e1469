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

The pieces: ``options`` (``SearchOptions``), ``state`` (budgets, pruning, scoring one candidate),
``phases`` (repair, sweep, refine, exact polish), ``space`` (the candidates), ``result``.
"""
from __future__ import annotations

from ..ir import Plan
from ..kinds import ensure_registered, scoped_kinds
from ..limits import MAX_AUTO_LAYERS, MAX_AUTO_MICROBATCHES
from ..problem import Problem, ProblemError
from . import phases
from . import space as sp
from .options import MEMORY_RESERVE, SearchOptions, default_budget, options_with
from .result import NoFeasiblePlan, Progress, SearchCancelled, SearchResult, build_result
from .state import SearchState, Stopped

__all__ = ["Progress", "SearchResult", "NoFeasiblePlan", "SearchCancelled", "SearchOptions",
           "auto_search", "auto", "default_budget"]


def auto_search(problem: Problem, options: SearchOptions | None = None, **fields) -> SearchResult:
    """Search partitions × schedules for the lowest simulated makespan that fits ``memory_limit``.

    ``options`` (a ``SearchOptions``; keyword ``fields`` override its fields by name: ``top=3``,
    ``stop=event.is_set``, ``exact=5``, ...) set the budgets, the progress callback and the stop.
    Raises ``NoFeasiblePlan`` when nothing fits, ``SearchCancelled`` when stopped before any
    usable plan. Kinds the search registers (recompute) stay registered only if a returned plan
    uses them.
    """
    opts = options_with(options, **fields)
    if problem.num_layers > MAX_AUTO_LAYERS or problem.microbatches > MAX_AUTO_MICROBATCHES:
        raise ProblemError(f"the auto-scheduler takes up to {MAX_AUTO_LAYERS} layers and "
                           f"{MAX_AUTO_MICROBATCHES} microbatches (flexpipe_ui.limits.MAX_AUTO_LAYERS, "
                           f"MAX_AUTO_MICROBATCHES); this problem has {problem.num_layers} layers and "
                           f"{problem.microbatches} microbatches: merge layers (profile coarser blocks) "
                           "or schedule fewer, larger microbatches")
    if sum(l.f + l.b + l.w for l in problem.layers) <= 0:
        raise ProblemError("every layer has f = b = w = 0, so every plan takes no time and there is "
                           "nothing to optimise; give the layers' costs (flexpipe profile measures them)")
    if problem.num_layers < problem.ranks:
        raise ProblemError(f"the problem has {problem.num_layers} layers but {problem.ranks} ranks: every "
                           f"rank needs at least one layer; use at most {problem.num_layers} ranks or "
                           "profile the model at a finer layer granularity")
    with scoped_kinds():
        res = _search(problem, opts)
    ensure_registered({a.kind for plan, _, _ in res.candidates for _, _, a in plan.schedule.actions()})
    return res


def _search(problem: Problem, opts: SearchOptions) -> SearchResult:
    """Seeds, exploration, then repair and sweep (repair first when memory binds), refinement and
    the optional exact polish."""
    d_evals, d_actions = default_budget(problem)
    S = SearchState(problem, seed=opts.seed, time_limit=opts.time_limit,
                    max_evals=opts.max_evals if opts.max_evals is not None else d_evals,
                    max_actions=opts.max_actions if opts.max_actions is not None else d_actions,
                    progress=opts.progress, stop=opts.stop or (lambda: False), top=opts.top,
                    abandon=opts.abandon)
    try:
        with S.watching():  # stop() ends even a long partitioning, build or simulation
            _phases(problem, opts, S)
    except Stopped:
        pass  # S.stopped says "cancelled"; what was found so far is the result
    return build_result(problem, S, opts.top)


def _phases(problem: Problem, opts: SearchOptions, S: SearchState) -> None:
    if problem.memory_limit is not None:
        S.hold_back(MEMORY_RESERVE)  # for the memory spending (phases.memory_repair)
    S.begin("seeds")
    # seeds first, cheapest bound first: a seed is skipped only when its lower bound already
    # cannot beat the incumbent, so the result is never worse than the best seed
    parts: dict = {}  # splits per placement, shared by seeds and programs
    S.run_list(sp.seed_candidates(problem, parts))
    S.begin("explore")
    structs = sp.structures(problem, opts.chunks, parts)
    S.run_list(sp.program_candidates(problem, only=structs))
    # memory binds when something faster than the best fitting plan was over the cap: then
    # repairing comes before sweeping rules
    binds = bool(S.over) and min(sc.makespan for sc, _ in S.over) < S.incumbent
    order = (phases.memory_repair, phases.sweep) if binds else (phases.sweep, phases.memory_repair)
    for phase in order:
        phase(S, structs)
    S.begin("refine")
    phases.refine(S)
    phases.rebalance(S)
    if opts.exact > 0:
        S.begin("exact")
        if S.stopped == "optimal":
            S.exact_runs = [{"status": "skipped: the best plan meets the plan bound (optimal)"}]
        else:
            phases.polish(S, float(opts.exact))


def auto(problem: Problem, options: SearchOptions | None = None, **fields) -> Plan:
    """The best plan found by ``auto_search`` (same arguments)."""
    return auto_search(problem, options, **fields).best
