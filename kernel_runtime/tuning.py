"""``tune``: profile → auto → measure → calibrate → re-plan, until the plan stops changing.

Round 0 profiles the model (``profile``, in worker processes) and asks ``auto`` for a plan. Each
round then runs its plan for a few steps, refits the cost model on every run so far
(``calibrate_runs``, pooled), and asks ``auto`` again on the refitted problem. It stops when the
new plan is the one just measured (or after ``rounds``). Each round's prediction is made before
its plan runs. Progress goes to a callback as ``TuneEvent``s.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from flexpipe_ui.ir import Plan
from flexpipe_ui.problem import Problem

__all__ = ["tune", "TuneResult", "TuneRound", "TuneEvent", "measure_plans", "plan_key"]


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
        lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": self.table()}


def plan_key(plan: Plan) -> tuple:
    """What makes two plans the same run: partition, placement and every rank's order."""
    s = plan.schedule
    return (plan.partition, tuple(s.placement), tuple(tuple(str(a) for a in row) for row in s.order))


def measure_plans(plans: Sequence[Plan], *, model: Any, steps: int, warmup: int = 1, repeat: int = 1,
                  **launch_kwargs) -> list[list]:
    """Run ``plans`` interleaved (``repeat`` passes of ``warmup + steps`` steps each, in one launch)
    and return, per plan, the measured timelines after each pass's warm-up steps."""
    from .launcher import launch
    seq = [p for _ in range(max(1, repeat)) for p in plans]
    h = launch(seq, model=model, steps=warmup + steps, **launch_kwargs)
    h.wait()
    out: list[list] = [[] for _ in plans]
    for ev in h.step_events:
        if ev.step >= warmup:
            out[ev.plan_index % len(plans)].append(ev.timeline)
    return out


def _median_makespan(tls) -> float:
    return float(statistics.median(tl.makespan for tl in tls))


def _median_peaks(tls) -> tuple[float, ...]:
    got = [tl.peak_memory_measured for tl in tls if tl.peak_memory_measured]
    if not got:
        return ()
    return tuple(float(statistics.median(x[r] for x in got)) for r in range(len(got[0])))


def tune(model: Any = None, *, ranks: int, microbatches: int, rounds: int = 3, steps: int = 4,
         warmup: int = 1, progress: Callable[[TuneEvent], Any] | None = None, devices: str = "cpu",
         problem: Problem | None = None, time_limit: float = 10.0, repeats: int = 21,
         threads: int | None = None, memory_limit: float | None = None, seed: int = 0,
         timeout: float = 120.0, search: dict | None = None) -> TuneResult:
    """Tune a plan for ``model`` on ``ranks`` ranks × ``microbatches`` microbatches (see module).

    ``problem``: start from this problem instead of profiling. ``steps`` measured steps per round
    (after ``warmup``); ``time_limit``: seconds of ``auto`` search per round; ``search``: more
    keywords for ``auto_search``.
    """
    from flexpipe_ui.search import auto_search
    from flexpipe_ui.sim import simulate

    from .calibrate import calibrate_runs
    from .profiler import profile

    say = progress or (lambda ev: None)
    dev = "cuda" if devices == "cuda" else "cpu"
    if problem is None:
        say(TuneEvent("profile", 0, f"profiling the model on {ranks} worker processes"))
        t = time.perf_counter()
        problem = profile(model, ranks=ranks, microbatches=microbatches, device=dev, repeats=repeats,
                          threads=threads, memory_limit=memory_limit, seed=seed)
        say(TuneEvent("profile", 0, f"profiled {problem.num_layers} layers in {time.perf_counter() - t:.1f} s"))
    else:
        problem = problem.with_(ranks=ranks, microbatches=microbatches)
    base, fitted = problem, problem
    runs: list[tuple[Plan, list]] = []
    result = TuneResult(plan=None, problem=problem, profile=base)   # type: ignore[arg-type]
    kw = dict(devices=devices, seed=seed, timeout=timeout, threads=threads)
    plan = None
    for r in range(max(1, rounds)):
        found = auto_search(fitted, time_limit=time_limit, seed=seed, **(search or {}))
        new = found.best
        desc = found.candidates[0][2]
        if plan is not None and plan_key(new) == plan_key(plan):
            result.stopped = "converged"
            say(TuneEvent("search", r, f"the re-fitted model picks the same plan ({desc}): done"))
            break
        plan = new
        sim = simulate(plan, fitted)
        say(TuneEvent("search", r, f"plan {desc}: predicted {sim.makespan:.2f} ms", sim.makespan))
        tls = measure_plans([plan], model=model, steps=steps, warmup=warmup, **kw)[0]
        meas = _median_makespan(tls)
        say(TuneEvent("run", r, f"measured {meas:.2f} ms ({(meas - sim.makespan) / sim.makespan:+.1%})",
                      sim.makespan, meas))
        result.rounds.append(TuneRound(r, plan, desc, sim.makespan, meas, tuple(sim.metrics.peak_memory),
                                       _median_peaks(tls)))
        runs.append((plan, tls))
        fitted = calibrate_runs(runs, base)
        say(TuneEvent("calibrate", r, f"re-fitted the cost model on {len(runs)} run(s)"))
    else:
        result.stopped = "max rounds"
        best = min(result.rounds, key=lambda x: x.measured_ms)      # the fastest plan measured
        plan = best.plan
    result.plan, result.problem = plan, fitted
    say(TuneEvent("done", len(result.rounds), f"{result.stopped}: {len(result.rounds)} round(s)"))
    return result
