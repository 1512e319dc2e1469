"""The search's memory spending: plans that overflow the cap, fitted by per-microbatch recompute
and offload (``memory_fit.fit_memory``) instead of fewer microbatches in flight or recompute
everywhere.

The source: the fastest candidates already simulated over the cap (library seeds, DSL programs,
re-splits). (The best structures' DSL rules under a looser cap, fitted after, found nothing
better on bench_memory's problems and took 15 s of a 64 × 256 search: left out.) A fitted
candidate keeps its source's lower bound (recompute and copies only add time), so pruning stays
sound, and a fit gives up once its plan is slower than the incumbent.
"""
from __future__ import annotations

from dataclasses import replace

from ..memory_fit import fit_memory
from .candidates import Candidate
from .state import SearchState

__all__ = ["fitted", "spend_memory"]


def fitted(c: Candidate, problem, incumbent=None) -> Candidate:
    """``c`` whose plan is fitted under the problem's cap by per-microbatch recompute/offload;
    ``incumbent()``: the makespan to beat, past which the fit gives up."""
    def make(partition, mk=c.make):
        plan = mk(partition)
        bar = incumbent() if incumbent is not None else None
        fr = fit_memory(plan, problem, give_up_above=bar if bar is not None and bar < float("inf") else None)
        out = fr.plan if fr.plan is not None else plan
        return out.with_meta(memory_ops={"recompute": len(fr.recompute), "offload": len(fr.offload),
                                           "w_early": len(fr.w_early)})
    family = "fit" if c.family == "library" else c.family
    # program=None: a fitted plan is no longer "the program under the cap", so the memory-time
    # bound (which assumes every forward keeps its activation) does not apply to it
    return replace(c, make=make, key=(c.key or c.description) + " [fit]", family=family, bounds=None,
                   program=None,
                   description=c.description + " + per-microbatch recompute/offload",
                   knobs={**c.knobs, "memory_fit": True})


def spend_memory(S: SearchState, over: int = 8) -> None:
    """Fit the ``over`` fastest over-cap candidates that are faster than the incumbent."""
    cap = S.problem.memory_limit
    if cap is None:
        return
    # (part of the "repair" phase for progress)
    seen, todo = set(), []
    for s, c in sorted(S.over, key=lambda sc: sc[0].makespan):
        if s.makespan >= S.threshold:
            break            # a fit only adds time: an over-cap plan slower than the incumbent cannot win
        if c.knobs.get("memory_fit") or c.key in seen:
            continue
        seen.add(c.key)
        todo.append(fitted(c, S.problem, lambda: S.threshold))
        if len(todo) >= over:
            break
    S.run_list(todo)
