"""The search's phases after the seeds and the exploration: memory repair, rule sweep, local
refinement and the exact polish. Each only chooses candidates; ``SearchState.consider`` prunes and
scores them."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..partition import PartitionError, balanced_partition, partition_from_sizes, rank_loads
from . import exact as ex
from .candidates import Candidate
from .evaluate import Scored, evaluate, stage_inflight
from .state import SearchState

__all__ = ["repair", "memory_repair", "refine", "rebalance", "polish", "sweep", "best_structures"]


def repair(S: SearchState, make_variants, max_evals: int = 70) -> None:
    """Re-split over-memory candidates with their measured in-flight counts; try rule variants
    (about ``max_evals`` simulations at most: checked between candidates)."""
    limit = S.problem.memory_limit
    if limit is None:
        return
    done: set = set()
    stop_at = len(S.scored) + max_evals
    for _ in range(3):  # up to three rounds: the next seeds, and re-splits that still overshoot
        fresh = [sc for sc in sorted(S.over, key=lambda sc: sc[0].makespan) if id(sc[0]) not in done]
        # re-split seeds that still overshoot first, then the next few seeds by makespan
        todo = [sc for sc in fresh if sc[1].family != "library"][:6]
        todo += [sc for sc in fresh if sc[1].family == "library"][:8 - len(todo)]
        if not todo or S.out_of_budget():
            return
        for s, _ in todo:
            done.add(id(s))
        _repair_round(S, todo, make_variants, limit, stop_at)

def _repair_round(S: SearchState, todo, make_variants, limit, stop_at: int) -> None:
    for s, c in todo:
        if S.out_of_budget() or len(S.scored) >= stop_at:
            return
        infl = np.asarray(s.inflight) if s.inflight else stage_inflight(S.result_of(s))
        try:
            part = balanced_partition(S.problem, len(c.placement), placement=c.placement,
                                      inflight=infl, memory_limit=limit)
        except PartitionError:
            part = None
        if part is not None and part != c.partition:
            S.consider(c.moved(part, _base(c.description) + ", memory-aware split (measured in-flight)"),
                          force=S.best is None)
        for v in make_variants(c, s):
            if S.out_of_budget() or len(S.scored) >= stop_at:
                return
            S.consider(v, force=S.best is None)

def refine(S: SearchState, rounds: int = 6) -> None:
    """Hill-climb on the three best candidates: move one stage boundary by one layer
    (``_neighbours``), rebuild the same program, keep the first improvement."""
    pool = sorted((s for s in S.scored if s.ok), key=lambda s: s.makespan)
    starts: list = []   # (candidate, its best score), taken now: later scores may be trimmed copies
    for s in pool:
        c = S.candidate_of(s)
        if c is not None and all(c is not x for x, _ in starts):
            starts.append((c, s))
        if len(starts) >= 3:
            break
    for c, cur_s in starts:
        cur, cur_ms = c, cur_s.makespan
        for _ in range(rounds):
            if S.out_of_budget():
                return
            improved = False
            for nb in _neighbours(S, cur, cur_s):
                s = S.consider(nb)
                if s is not None and s.ok and s.makespan < cur_ms * (1 - 1e-12):
                    cur, cur_ms, cur_s, improved = nb, s.makespan, s, True
                    break
                if S.out_of_budget():
                    return
            if not improved:
                break

def rebalance(S: SearchState, rounds: int = 4) -> None:
    """Move layers between distant ranks by measured idle time: the busiest ranks that idled most
    in the best plan's simulation give a layer each to lighter ranks that idled least
    (``_transfers``); keep a rebuild that is faster, up to ``rounds`` times.

    Why: which of several equally loaded ranks carries the extra layer decides how much of the
    fill it waits through (in a V the first ranks wait for the microbatch to come back, under a
    memory cap they cannot cover that with forwards), which no bound sees; one-layer moves between
    neighbours (``refine``) would need dozens of steps to carry it there."""
    for _ in range(rounds):
        if S.out_of_budget() or S.best is None:
            return
        best = S.best
        c = S.candidate_of(best)
        if c is None:
            return
        improved = False
        for nb in _transfers(S, c, S.result_of(best)):
            s = S.consider(nb)
            if s is not None and s.ok and s.makespan < best.makespan * (1 - 1e-12):
                improved = True
                break
            if S.out_of_budget():
                return
        if not improved:
            return


def _transfers(S: SearchState, c: Candidate, res) -> list[Candidate]:
    """Splits that move one layer from each of the busiest ranks with the most idle time to the
    light ranks with the least (all of them at once, then the single best move), predicting each
    rank's end as its busy time (changed by the moved work) plus the idle time it had."""
    p = S.problem
    m = p.microbatches
    place = np.asarray(c.placement)
    sizes = [len(x) for x in c.partition]
    work = np.array([l.f + l.b + l.w for l in p.layers], float)
    tl = res.timeline
    busy = np.bincount(tl.rank, weights=tl.end - tl.start, minlength=p.ranks)
    idle = res.makespan - busy
    loads = _loads(work, sizes, place, p.ranks)
    top = loads.max()

    def predicted(sz):
        new = _loads(work, sz, place, p.ranks)
        return float(np.max(busy + (new - loads) * m + idle)), new

    cur = predicted(sizes)[0]
    givers = [int(r) for r in np.argsort(-idle, kind="stable") if loads[r] >= top * (1 - 1e-9)]
    moves = []
    batch = list(sizes)
    for g in givers:
        st = [s for s in np.flatnonzero(place == g) if batch[s] >= 2]
        if not st:
            continue
        gs = max(st, key=lambda s: (batch[s], s))
        best = None
        for r in np.argsort(idle, kind="stable"):
            if loads[r] >= top * (1 - 1e-9):
                continue
            for rs in np.flatnonzero(place == r):
                trial = list(batch)
                trial[gs] -= 1
                trial[rs] += 1
                pred, new = predicted(trial)
                if new.max() <= top * (1 + 1e-9) and (best is None or pred < best[0]):
                    best = (pred, trial)
            if best is not None:
                break   # the least idle light rank that can take it
        if best is not None and best[0] < cur:
            if len(moves) == 0:
                moves.append(best[1])
            batch = best[1]
    out = []
    for sz in ([batch] if batch != sizes else []) + [x for x in moves if x != batch]:
        out.append(c.moved(partition_from_sizes(sz), _base(c.description) + f", refined split {_sizes_text(sz)}"))
    return out


def _loads(work: np.ndarray, sizes, place: np.ndarray, ranks: int) -> np.ndarray:
    """Per-rank work of one microbatch for layer counts per stage."""
    edges = np.r_[0, np.cumsum(sizes)]
    pre = np.r_[0.0, np.cumsum(work)]
    return np.bincount(place, weights=pre[edges[1:]] - pre[edges[:-1]], minlength=ranks)


def polish(S: SearchState, seconds: float, structures: int = 3) -> None:
    """Polish the best plan of each of the ``structures`` best distinct (placement, partition)
    pairs with CP-SAT, sharing ``seconds``; a faster order joins the scored plans."""
    S.exact_runs = []
    if not ex.available():
        S.exact_runs.append({"status": "ortools not installed (pip install ortools)"})
        return
    pool, seen = [], set()
    for s in sorted((s for s in S.scored if s.ok), key=lambda s: s.makespan):
        c = S.candidate_of(s)
        plan = s.plan if s.plan is not None or c is None else S.plan_of(s)
        if plan is None:
            continue
        s = replace(s, plan=plan) if s.plan is None else s
        key = (plan.schedule.placement, plan.partition)
        if key not in seen:
            seen.add(key)
            pool.append(s)
        if len(pool) >= structures:
            break
    deadline = time.perf_counter() + seconds
    for k, s in enumerate(pool):
        left = deadline - time.perf_counter()
        if left <= 0.05 or S.stop():
            break
        r = ex.polish(s.plan, S.problem, time_limit=left / (len(pool) - k), seed=S.rng.randrange(2 ** 31))
        S.exact_runs.append({"candidate": s.description, "before": s.makespan, "after": r.makespan,
                             "bound": r.bound, "status": r.status, "seconds": round(r.seconds, 3)})
        if r.plan is None:
            continue
        S.add_scored(evaluate(lambda plan=r.plan: plan, S.problem, description=s.description + ", exact order",
                              bound=r.bound, knobs={**s.knobs, "exact": True}, sims=S.sims))


def _neighbours(S: SearchState, c: Candidate, scored: Scored) -> list[Candidate]:
    """Splits that give one layer of the busiest rank — and, under a memory cap, of the rank
    with the highest simulated peak (memory throttles it) — to a neighbouring stage."""
    p = S.problem
    loads = rank_loads(p, c.partition, c.placement)
    relieve = {int(loads.argmax())}
    if p.memory_limit is not None and scored.peaks:
        peaks = scored.peaks
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
    S.rng.shuffle(out)
    return out


def best_structures(S: SearchState, structs: list, k: int) -> list:
    """The k structures (placement, split) whose best evaluated candidate is fastest; over-memory
    ones count by their makespan too when nothing fits yet."""
    best: dict = {}
    for sc in S.scored:
        c = S.candidate_of(sc)
        if c is None or not sc.built:
            continue
        key = (c.placement, c.partition)
        val = sc.makespan if sc.fits else sc.makespan * 10
        best[key] = min(best.get(key, float("inf")), val)
    ranked = sorted(best, key=best.get)[:k]
    # best first (the sweep takes the first as "the best structure")
    return sorted((st for st in structs if (st[1], st[3]) in ranked), key=lambda st: ranked.index((st[1], st[3])))


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


def sweep(S: SearchState, structs: list) -> None:
    """The whole rule grid on the best structure; on the runner-up only the six rule sets that
    did best on the winner."""
    from . import space as sp
    S.begin("sweep")
    top2 = best_structures(S, structs, 2)
    first = sp.program_candidates(S.problem, only=top2[:1], rules=sp.all_rules)
    S.run_list(first)
    if len(top2) > 1:
        keys = {c.key for c in first}
        tried = [(s, S.candidate_of(s)) for s in S.scored]
        ranked = sorted((s for s, c in tried if c is not None and c.key in keys and c.program is not None),
                        key=lambda s: s.score)
        rules = [S.candidate_of(s).program.rules for s in ranked[:6]]
        S.run_list(sp.program_candidates(S.problem, only=top2[1:], rules=lambda problem, pl: rules))


def memory_repair(S: SearchState, structs: list) -> None:
    """``repair`` with the space's memory variants; under a cap also full recompute on the best
    structures (memory may bind even when the capped list scheduler fits), pruned by a bound that
    charges the re-run forwards."""
    from . import space as sp
    S.begin("repair")
    repair(S, lambda c, s: sp.memory_variants(S.problem, c, s))
    if S.problem.memory_limit is not None:
        S.run_list(sp.recompute_candidates(S.problem, best_structures(S, structs, 2)))
        from . import spend
        S.release()   # the budget held back for this (driver._phases)
        spend.spend_memory(S)
