"""``tune``: profile → auto → measure → calibrate → re-plan, until the plan stops changing.

Round 0 profiles the model (``profile``, in worker processes). Each round asks ``auto`` for its
``shortlist`` best plans on the current problem, runs them -- with the fastest plan measured so far,
interleaved in one launch so they see the same machine -- for a few steps, keeps the fastest
measured, refits the cost model on every run so far (``calibrate_runs``, pooled), and asks ``auto``
again. It stops when the model's best is the plan already kept, or the round keeps the plan the
previous one kept (or after ``rounds``). A cost model is a ranking with errors of several percent
(docs/cost_model.md); measuring the few plans it ranks best, as autotuners do, makes the plan
returned never slower than another plan it measured. Each round's prediction is made before its
plan runs. Progress goes to a callback as ``TuneEvent``s.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from flexpipe_ui.ir import Plan
from flexpipe_ui.problem import Problem

from .config import TuneConfig, tune_config

__all__ = ["tune", "TuneConfig", "TuneResult", "TuneRound", "TuneEvent", "measure_plans", "plan_key", "shortlist",
           "fastest_measured", "partition_neighbours", "with_neighbours"]


@dataclass(frozen=True)
class TuneEvent:
    """What the progress callback receives: a phase, the round, a line of text."""

    phase: str
    """"profile", "search", "run", "calibrate" or "done"."""
    round: int
    message: str
    predicted_ms: float | None = None
    measured_ms: float | None = None


@dataclass
class TuneRound:
    """One round: the plan run, predicted (before the run) and measured step makespan, ms."""

    index: int
    plan: Plan
    description: str
    predicted_ms: float
    measured_ms: float
    peak_predicted: tuple[float, ...] = ()
    peak_measured: tuple[float, ...] = ()
    tried: list[tuple[str, float, float]] = field(default_factory=list)
    """Every plan run this round: (description, predicted ms, measured ms), the kept one included."""


@dataclass
class TuneResult:
    """The tuned plan, the fitted problem, the profile it started from and every round."""

    plan: Plan
    problem: Problem
    profile: Problem
    rounds: list[TuneRound] = field(default_factory=list)
    stopped: str = ""
    """"converged" (the re-plan gave the plan just measured) or "max rounds"."""

    def table(self) -> str:
        lines = [f"{'round':>5}  {'predicted ms':>12}  {'measured ms':>11}  {'rel.err':>7}  plan"]
        for r in self.rounds:
            err = (r.measured_ms - r.predicted_ms) / r.predicted_ms if r.predicted_ms > 0 else float("nan")
            lines.append(f"{r.index:>5}  {r.predicted_ms:>12.2f}  {r.measured_ms:>11.2f}  {err:>+7.1%}  "
                         f"{r.description}")
            for desc, p, m in r.tried:
                if desc != r.description:
                    lines.append(f"{'':>5}  {p:>12.2f}  {m:>11.2f}  {(m - p) / p:>+7.1%}  (also run) {desc}")
        lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": self.table()}


def plan_key(plan: Plan) -> tuple:
    """What makes two plans the same run: partition, placement and every rank's order."""
    s = plan.schedule
    return (plan.partition, tuple(s.placement), tuple(tuple(str(a) for a in row) for row in s.order))


def measure_plans(plans: Sequence[Plan], *, model: Any, steps: int, warmup: int = 1, repeat: int = 1,
                  warm_pass: bool = True, **launch_kwargs) -> list[list]:
    """Run ``plans`` interleaved (``repeat`` passes of ``warmup + steps`` steps each, in one launch)
    and return, per plan, the measured timelines after each pass's warm-up steps. ``warm_pass``: one
    more pass first, not recorded (on bench_truth's GPT the first pass of a launch ran ~1.2x slower
    than later ones: allocator growth, first touches; the plan run first would pay it alone)."""
    from ..run.launcher import launch
    first = len(plans) if warm_pass else 0
    seq = [p for _ in range(max(1, repeat) + (1 if warm_pass else 0)) for p in plans]
    h = launch(seq, model=model, steps=warmup + steps, **launch_kwargs)
    h.wait()
    out: list[list] = [[] for _ in plans]
    for ev in h.step_events:
        if ev.step >= warmup and ev.plan_index >= first:
            out[ev.plan_index % len(plans)].append(ev.timeline)
    return out


def shortlist(found, k: int) -> list[tuple[Plan, str]]:
    """Up to ``k`` distinct plans of a search result (``auto_search(..., top=k)``), best predicted first."""
    out, seen = [], set()
    for plan, _sim, desc in found.candidates:
        if plan_key(plan) not in seen:
            seen.add(plan_key(plan))
            out.append((plan, desc))
        if len(out) >= k:
            break
    return out


def _neighbour_sims(plan: Plan, problem: Problem) -> list[tuple[Any, Plan]]:
    """(simulation on ``problem``, plan) of every partition neighbour of ``plan`` within the memory
    cap, best predicted first (see ``partition_neighbours``)."""
    from flexpipe_ui.costmodel import fits
    from flexpipe_ui.partition import partition_from_sizes
    from flexpipe_ui.sim import simulate

    part = plan.partition
    if part is None or len(part) < 2:
        return []
    if [i for p in part for i in p] != list(range(sum(len(p) for p in part))):
        return []                                   # not contiguous in stage order: no boundaries to move
    sizes = [len(p) for p in part]
    found: list[tuple[float, int, Any, Plan]] = []
    for b in range(len(sizes) - 1):
        for d in (1, -1):                           # stage b takes a layer from b+1, or gives one
            s = list(sizes)
            s[b] += d
            s[b + 1] -= d
            if min(s) < 1:
                continue
            cand = replace(plan, partition=partition_from_sizes(s), trace=(),
                           meta={**plan.meta, "partition": "explicit"})
            sim = simulate(cand, problem)
            if fits(sim.metrics.max_peak_memory, problem.memory_limit):
                found.append((sim.makespan, len(found), sim, cand))
    found.sort(key=lambda x: x[:2])
    return [(sim, p) for _, _, sim, p in found]


def _neighbour_desc(plan: Plan, name: str) -> str:
    return f"{name}, layers {'+'.join(str(len(q)) for q in plan.partition)}"


def partition_neighbours(plan: Plan, problem: Problem, k: int = 2, desc: str = "") -> list[tuple[Plan, str]]:
    """Up to ``k`` plans with ``plan``'s schedule and one stage boundary moved by one layer (every
    stage keeps a layer, and the problem's memory cap), best predicted on ``problem`` first.

    The partition a model ranks best can lose to its neighbour on the machine: on bench_truth's GPT
    (2 ranks) 1F1B with 5+3 layers measured 1.20x faster than 4+4 while the profile ranked 6+2
    first (docs/cost_model.md). Measuring the neighbours alongside costs one launch."""
    if k <= 0:
        return []
    name = desc or str(plan.meta.get("name", "plan"))
    return [(p, _neighbour_desc(p, name)) for _, p in _neighbour_sims(plan, problem)[:k]]


def with_neighbours(cands: list[tuple[Plan, str]], problem: Problem, k: int,
                    sims: dict | None = None) -> list[tuple[Plan, str]]:
    """``cands`` (best first) and the ``k`` best partition neighbours of the first that are not in it
    already; each neighbour's simulation goes into ``sims`` (plan_key → result) when given."""
    if k <= 0 or not cands:
        return list(cands)
    have = {plan_key(p) for p, _ in cands}
    out = list(cands)
    for sim, p in _neighbour_sims(cands[0][0], problem)[:k]:
        if plan_key(p) not in have:
            out.append((p, _neighbour_desc(p, cands[0][1])))
            if sims is not None:
                sims[plan_key(p)] = sim
    return out


def fastest_measured(plans: Sequence[Plan], *, model: Any, steps: int, warmup: int = 1, repeat: int = 1,
                     **launch_kwargs) -> tuple[int, list[list], list[float]]:
    """Run ``plans`` interleaved in one launch; (index of the lowest median step makespan, the
    timelines per plan, the median step makespan per plan)."""
    tls = measure_plans(plans, model=model, steps=steps, warmup=warmup, repeat=repeat, **launch_kwargs)
    meds = [_median_makespan(t) for t in tls]
    return min(range(len(plans)), key=meds.__getitem__), tls, meds


def _median_makespan(tls) -> float:
    return float(statistics.median(tl.makespan for tl in tls))


def _median_peaks(tls) -> tuple[float, ...]:
    got = [tl.peak_memory_measured for tl in tls if tl.peak_memory_measured]
    if not got:
        return ()
    return tuple(float(statistics.median(x[r] for x in got)) for r in range(len(got[0])))


def tune(model: Any = None, *, problem: Problem | None = None,
         progress: Callable[[TuneEvent], Any] | None = None, config: TuneConfig | None = None,
         **fields) -> TuneResult:
    """Tune a plan for ``model`` on ``ranks`` ranks × ``microbatches`` microbatches (see module).

    Settings are ``config`` (a ``TuneConfig``) and/or its fields as keywords (``ranks`` and
    ``microbatches`` required). ``problem``: start from this problem instead of profiling.
    ``steps`` measured steps per plan and pass (after ``warmup``), ``passes`` interleaved passes
    per round; ``time_limit``: seconds of ``auto`` search per round; ``search``: more keywords for
    ``auto_search``; ``shortlist_size``: plans run per round (1: only the model's best);
    ``neighbours``: when more than one plan runs, that many of the model's best plan's
    ``partition_neighbours`` run with them. ``dtype`` is the profile's and every run's.
    """
    from flexpipe_ui.calibrate import calibrate_runs
    from flexpipe_ui.search import auto_search
    from flexpipe_ui.sim import simulate

    c = tune_config(config, fields)
    say = progress or (lambda ev: None)
    problem = _starting_problem(model, problem, c, say)
    seed = c.seed
    devices, time_limit, search, steps, warmup, neighbours = (c.devices, c.time_limit, c.search, c.steps,
                                                              c.warmup, c.neighbours)
    base, fitted = problem, problem
    runs: list[tuple[Plan, list]] = []
    result = TuneResult(plan=None, problem=problem, profile=base)   # type: ignore[arg-type]
    kw = dict(devices=devices, seed=seed, timeout=c.timeout, threads=c.threads, dtype=c.dtype)
    k = max(1, int(c.shortlist_size))
    kept: tuple[Plan, str] | None = None
    for r in range(max(1, c.rounds)):
        found = auto_search(fitted, time_limit=time_limit, seed=seed, **{"top": k, **(search or {})})
        cands = shortlist(found, k)
        if kept is not None and plan_key(cands[0][0]) == plan_key(kept[0]):
            result.stopped = "converged"
            say(TuneEvent("search", r, f"the re-fitted model picks the plan kept ({kept[1]}): done"))
            break
        searched = {plan_key(p): sim for p, sim, _ in found.candidates}   # the search simulated them on fitted
        if k > 1:
            cands = with_neighbours(cands, fitted, neighbours, searched)
        if kept is not None and k > 1 and plan_key(kept[0]) not in {plan_key(p) for p, _ in cands}:
            cands.append(kept)                      # the one to beat, measured alongside
        sims = [searched.get(plan_key(p)) or simulate(p, fitted) for p, _ in cands]
        for (p, desc), sim in zip(cands, sims):
            say(TuneEvent("search", r, f"plan {desc}: predicted {sim.makespan:.2f} ms", sim.makespan))
        best, tls, meds = fastest_measured([p for p, _ in cands], model=model, steps=steps, warmup=warmup,
                                           repeat=c.passes if len(cands) > 1 else 1, **kw)
        plan, desc, sim = cands[best][0], cands[best][1], sims[best]
        say(TuneEvent("run", r, f"measured {meds[best]:.2f} ms ({(meds[best] - sim.makespan) / sim.makespan:+.1%})"
                      + (f", fastest of {len(cands)} plans run" if len(cands) > 1 else ""),
                      sim.makespan, meds[best]))
        result.rounds.append(TuneRound(r, plan, desc, sim.makespan, meds[best], tuple(sim.metrics.peak_memory),
                                       _median_peaks(tls[best]),
                                       [(d, s.makespan, m) for (_, d), s, m in zip(cands, sims, meds)]))
        runs.extend((p, t) for (p, _), t in zip(cands, tls))
        fitted = calibrate_runs(runs, base)
        say(TuneEvent("calibrate", r, f"re-fitted the cost model on {len(runs)} run(s)"))
        same = kept is not None and plan_key(plan) == plan_key(kept[0])
        kept = (plan, desc)
        if same:
            result.stopped = "converged"
            say(TuneEvent("search", r, f"the plan kept is still the fastest measured ({desc}): done"))
            break
    else:
        result.stopped = "max rounds"
        if k == 1:                                  # rounds never ran side by side: the fastest of all
            fastest = min(result.rounds, key=lambda x: x.measured_ms)
            kept = (fastest.plan, fastest.description)
    result.plan, result.problem = kept[0], fitted
    say(TuneEvent("done", len(result.rounds), f"{result.stopped}: {len(result.rounds)} round(s)"))
    return result


def _starting_problem(model, problem: Problem | None, c: TuneConfig, say) -> Problem:
    """The problem round 0 plans on: ``problem`` for ``c``'s ranks and microbatches, else a fresh
    ``profile`` of the model in worker processes."""
    if problem is not None:
        return problem.with_(ranks=c.ranks, microbatches=c.microbatches)
    from .profiler import profile
    say(TuneEvent("profile", 0, f"profiling the model on {c.ranks} worker processes"))
    t = time.perf_counter()
    problem = profile(model, ranks=c.ranks, microbatches=c.microbatches,
                      device="cuda" if c.devices == "cuda" else "cpu", dtype=c.dtype, repeats=c.repeats,
                      threads=c.threads, memory_limit=c.memory_limit, seed=c.seed)
    say(TuneEvent("profile", 0, f"profiled {problem.num_layers} layers in {time.perf_counter() - t:.1f} s"))
    return problem
