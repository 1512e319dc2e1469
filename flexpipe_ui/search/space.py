"""The search space: library seeds and DSL programs over chunks × placement × partition × rules.

Every candidate is lazy (``candidates.Candidate``): its bounds come from the partition and
placement, and the DSL/library runs only if the bound survives. The space, for ``p`` ranks and
``L`` layers:

- **chunks** v ∈ {1, 2, 3, 4} with ``p·v <= L``; **placement** ``looped(v)``, and ``vshape()`` /
  ``wave(v)`` for v >= 2;
- **partition**: ``even`` (by layer count), ``balanced`` (``partition.balanced_partition`` on that
  placement), under a memory cap ``balanced`` with the cap and 1F1B-like in-flight counts, and
  ``balanced+fill`` (``fill_split``: the extra layers moved to the ranks that start early);
- **rules** (``dsl.Rules``): fused B or split I/W; W filling bubbles, eager or by priority; depth-
  or breadth-first traversal; in-flight limits (the placement's 1F1B-like depth, or none); under a
  cap, the list scheduler's own ``memory_cap``.

``structure_rules`` are the two rule sets tried on every structure; ``all_rules`` are swept on the
best structures. ``memory_variants`` answers an over-memory candidate (a library seed: capped DSL
programs fit or fail) with capped in-flight rules and recompute.
"""
from __future__ import annotations

from typing import Iterable

from ..partition import PartitionError, balanced_partition
from ..problem import Problem, even_partition
from ..watch import tick
from .candidates import Candidate, ProgramKnobs
from .evaluate import Scored

__all__ = ["seed_candidates", "program_candidates", "structures", "structure_rules", "all_rules",
           "memory_variants", "recompute_candidates", "recompute_kind", "chunk_options"]

_LIB_CHUNKS = (None, 2, 3, 4)


def chunk_options(problem: Problem, chunks: Iterable[int] = (1, 2, 3, 4)) -> list[int]:
    return [v for v in chunks if problem.ranks * v <= problem.num_layers]


def _partitions(problem: Problem, placement: tuple[int, ...], cache: dict | None = None) -> list[tuple[str, tuple]]:
    """(name, split) for a placement: even, balanced, balanced under the cap (memoised per search)."""
    if cache is not None:
        hit = cache.get(("partitions", placement))
        if hit is None:
            hit = cache[("partitions", placement)] = _partitions(problem, placement)
        return hit
    S = len(placement)
    out = [("even", even_partition(problem.num_layers, S))]
    try:
        out.append(("balanced", balanced_partition(problem, S, placement=placement, memory_limit=None)))
    except PartitionError:
        pass
    if problem.memory_limit is not None:
        try:
            out.append(("balanced+memory", balanced_partition(problem, S, placement=placement)))
        except PartitionError:
            pass
    if len(out) > 1:
        out.append(("balanced+fill", fill_split(problem, placement, out[1][1])))
    seen, uniq = set(), []
    for name, part in out:  # the same split under two names is one candidate
        if part not in seen:
            seen.add(part)
            uniq.append((name, part))
    return uniq


def fill_split(problem: Problem, placement: tuple[int, ...], partition, *, receivers: int = 8) -> tuple:
    """The split from ``partition`` that lowers the structure's time bound by moving layers: while
    it improves ``bounds.time_bounds``, one layer leaves the rank that finishes last at the
    earliest (``bounds.rank_ends``: its work after its first input arrives) for one of the
    ``receivers`` ranks that finish first.

    Why: a balanced split says how much each rank carries, not which ranks carry the extra layer
    when loads cannot be equal; a rank far down the pipeline starts late, so it should carry
    less (at 128 ranks × 512 microbatches the V's bound drops from 3.8% to 0.05% over the plan
    bound). Uses bounds only: no schedule is built."""
    import numpy as np

    from ..partition import partition_from_sizes
    from .bounds import rank_ends, time_bounds
    place = np.asarray(placement)
    p, m = problem.ranks, problem.microbatches
    sizes = [len(x) for x in partition]

    def score(sz):
        costs = problem.stage_costs(partition_from_sizes(sz))
        return time_bounds(costs, placement, p, m).time, rank_ends(costs, placement, p, m)

    cur, ends = score(sizes)
    for _ in range(4 * p):
        tick()
        giver = int(np.argmax(ends))
        from_stages = [s for s in np.flatnonzero(place == giver) if sizes[s] >= 2]
        best = None
        for r in np.argsort(ends, kind="stable")[:receivers]:
            for to in np.flatnonzero(place == r):
                for fr in from_stages:
                    trial = list(sizes)
                    trial[fr] -= 1
                    trial[to] += 1
                    t, e = score(trial)
                    if t < cur * (1 - 1e-12) and (best is None or t < best[0]):
                        best = (t, trial, e)
        if best is None:
            break
        cur, sizes, ends = best
    return partition_from_sizes(sizes)


# -- library seeds ------------------------------------------------------------------------------
def seed_candidates(problem: Problem, cache: dict | None = None) -> list[Candidate]:
    """Every library schedule × its chunk counts × {even, balanced(, balanced+memory)} split."""
    from ..library import NAMED, build_named
    out: list[Candidate] = []
    for name in NAMED:
        for chunks in _LIB_CHUNKS:
            try:
                probe = build_named(name, None, ranks=problem.ranks, microbatches=1, chunks=chunks)
            except ValueError:
                continue
            placement = probe.schedule.placement
            if len(placement) > problem.num_layers:
                continue
            if chunks is not None and any(c.knobs.get("lib") == name and
                                          c.placement == placement for c in out):
                continue  # same shape as the default chunks
            for pname, part in _partitions(problem, placement, cache):
                if pname == "balanced+fill":
                    continue   # the fill split is for DSL programs (library seeds: as published)
                def make(partition, name=name, chunks=chunks):
                    return build_named(name, problem, chunks=chunks, partition=partition)
                v = len(placement) // problem.ranks
                out.append(Candidate(description=f"library {name} (v={v}, {pname} split)", family="library",
                                     placement=placement, partition=part, make=make,
                                     knobs={"lib": name, "chunks": v, "split": pname},
                                     key=f"lib:{name}:{v}"))
    return out


# -- DSL programs -------------------------------------------------------------------------------
def _placements(problem: Problem, chunks: Iterable[int]):
    from ..dsl import looped, vshape, wave
    for v in chunk_options(problem, chunks):
        yield looped(v)
        if v == 2:
            yield vshape()
        elif v > 2:
            yield wave(v)


def structures(problem: Problem, chunks: Iterable[int] = (1, 2, 3, 4),
               cache: dict | None = None) -> list[tuple]:
    """(placement object, stage→rank tuple, split name, partition) for every structure."""
    out = []
    for pl in _placements(problem, chunks):
        placement = tuple(pl(problem.ranks))
        for pname, part in _partitions(problem, placement, cache):
            out.append((pl, placement, pname, part))
    return out


def one_f_one_b_depth(pl) -> str:
    """The in-flight formula of the placement's 1F1B-like warm-up: ``p - r`` for one stage per rank,
    Megatron's interleaved ``2(p-r-1) + (v-1)p + 1`` for looped(v), ``2p`` for V and wave shapes."""
    r = repr(pl)
    if r == "looped(1)":
        return "p-r"
    if r.startswith("looped"):
        return "2*(p-r-1) + (v-1)*p + 1"
    return "v*p"


def structure_rules(problem: Problem, pl) -> list:
    """The two rule sets tried on every structure: zero-bubble-like and 1F1B-like."""
    from ..dsl import Rules
    cap = problem.memory_limit
    zb = Rules(backward="split", priority=("I", "F", "W"), w_policy="priority", memory_cap=cap)
    ofob = Rules(backward="fused", priority=("B", "F"), in_flight=one_f_one_b_depth(pl), memory_cap=cap)
    return [zb, ofob]


def all_rules(problem: Problem, pl) -> list:
    """The rule grid swept on the best structures (a superset of ``structure_rules``)."""
    from ..dsl import Rules
    cap = problem.memory_limit
    depth = one_f_one_b_depth(pl)
    out = []
    for prio, wp in ((("I", "F", "W"), "fill"), (("I", "F", "W"), "eager"), (("F", "I", "W"), "fill"),
                     (("I", "W", "F"), "priority"), (("I", "F", "W"), "priority")):
        for trav in ("depth", "breadth"):
            for infl in (None, depth):
                out.append(Rules(backward="split", priority=prio, w_policy=wp, traversal=trav,
                                 in_flight=infl, memory_cap=cap))
    for prio, trav, infl in ((("B", "F"), "depth", depth), (("B", "F"), "depth", None),
                             (("B", "F"), "breadth", depth), (("F", "B"), "breadth", None)):
        out.append(Rules(backward="fused", priority=prio, traversal=trav, in_flight=infl, memory_cap=cap))
    return out


def recompute_kind() -> str:
    """``"R"``, the recompute kind of ``flexpipe_ui.ops``, registering it if no ``R`` exists yet
    (a user's own ``R`` is used as it is). ``auto_search`` runs inside ``kinds.scoped_kinds``, so
    the registration ends with the search unless a returned plan uses it."""
    from ..kinds import kinds
    from ..ops import register_recompute
    if "R" not in kinds():
        register_recompute()
    return "R"


def _program_candidate(problem: Problem, pl, placement, pname, part, rules, *, tag: str = "",
                       extra: dict | None = None) -> Candidate:
    from ..dsl import Program
    prog = Program(placement=pl, rules=rules, extra=extra or {})
    src = prog.source()

    def make(partition, prog=prog):
        # Program.plan records the program in the plan's trace, so plan.to_python() replays it
        return prog.plan(problem=problem, partition=partition)

    recompute = bool(extra)
    frac = 0.0
    if recompute:
        where = next(iter(extra.values()))
        frac = 1.0 if where == "all" else len(where) / max(len(placement), 1)
    return Candidate(description=f"{src}{tag} ({pname} split)", family="dsl", placement=placement,
                     partition=part, make=make,
                     knobs={"program": src, "split": pname, "chunks": len(placement) // problem.ranks,
                            "recompute": recompute},
                     key=src + tag, program=ProgramKnobs(pl, rules, dict(extra or {}), tag),
                     extra_work=1.0 if (recompute and frac == 1.0) else 0.0)


def program_candidates(problem: Problem, *, chunks: Iterable[int] = (1, 2, 3, 4), rules=None,
                       only: list[tuple] | None = None) -> list[Candidate]:
    """DSL candidates: ``rules(problem, placement)`` (default ``structure_rules``) on every
    structure (or on ``only``)."""
    out = []
    for pl, placement, pname, part in (only if only is not None else structures(problem, chunks)):
        for r in (structure_rules(problem, pl) if rules is None else rules(problem, pl)):
            out.append(_program_candidate(problem, pl, placement, pname, part, r))
    return out


def memory_variants(problem: Problem, c: Candidate, s: Scored) -> list[Candidate]:
    """Answers to an over-memory candidate: DSL rules with the list scheduler's memory cap and
    fewer in flight, and recompute."""
    from ..dsl import Rules
    cap = problem.memory_limit
    out = []
    # (a DSL program with the cap never overshoots it: the list scheduler gates every allocation)
    if c.family == "refine":
        return out
    pl = _placement_object(c.placement, problem.ranks)
    if pl is None:
        return out
    depth = one_f_one_b_depth(pl)
    split = c.knobs.get("split", "?")
    for infl in (depth, f"max(v, ({depth})//2)"):
        for backward, prio, wp in (("split", ("I", "F", "W"), "eager"), ("fused", ("B", "F"), "priority")):
            r = Rules(backward=backward, priority=prio, w_policy=wp, in_flight=infl, memory_cap=cap)
            out.append(_program_candidate(problem, pl, c.placement, split, c.partition, r, tag=" [memory]"))
    R = recompute_kind()
    # recompute the stages of the ranks that overflowed, then everywhere
    over = [r for r, pk in enumerate(s.peaks) if cap is not None and pk > cap]
    stages = tuple(st for st, r in enumerate(c.placement) if r in over)
    for where in ([stages] if stages and len(stages) < len(c.placement) else []) + ["all"]:
        for r in (Rules(backward="split", priority=("I", "F", "W"), w_policy="fill", memory_cap=cap),
                  Rules(backward="fused", priority=("B", "F"), in_flight=depth, memory_cap=cap)):
            out.append(_program_candidate(problem, pl, c.placement, split, c.partition, r,
                                          tag=" [recompute]", extra={R: where}))
    return out


def _placement_object(placement: tuple[int, ...], ranks: int):
    from ..dsl import explicit, looped, vshape, wave
    v = len(placement) // ranks
    for pl in ([looped(v)] + ([vshape()] if v == 2 else [wave(v)] if v > 2 else [])):
        if tuple(pl(ranks)) == placement:
            return pl
    try:
        return explicit(list(placement))
    except ValueError:
        return None


def recompute_candidates(problem: Problem, structs: list) -> list[Candidate]:
    """Full recomputation (``extra={"R": "all"}``) with the two structure rule sets."""
    R = recompute_kind()
    out = []
    for pl, placement, pname, part in structs:
        for r in structure_rules(problem, pl):
            out.append(_program_candidate(problem, pl, placement, pname, part, r, tag=" [recompute]",
                                          extra={R: "all"}))
    return out
