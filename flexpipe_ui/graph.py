"""Compile a ``Schedule`` into flat arrays and its dependency edges (DESIGN.md, contract 4).

The validator and the simulator both read this one compiled form, so the dependency rules exist once.
Actions are numbered rank by rank in list order; a *lane* is (rank, stream): the compute stream
runs its actions one at a time in list order, and so does every other stream. An action on another
stream (a copy) also waits for the compute action before it in its rank's list: that is where the
runtime issues it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import Action, Schedule
from .kinds import Kind
from .limits import MAX_ACTIONS

__all__ = ["Graph", "compile_schedule", "Finding", "structure_problems", "wait_cycle", "action_names",
           "flat_arrays", "locate", "reordered"]


@dataclass(frozen=True, eq=False)
class Graph:
    """Flat arrays over the N actions of a schedule (numbered rank-major in list order)."""

    schedule: Schedule
    actions: tuple[Action, ...]
    kinds: tuple[Kind, ...]          # kind id → Kind
    rank: np.ndarray
    stage: np.ndarray
    kind: np.ndarray                 # kind id
    mb: np.ndarray
    pos: np.ndarray                  # index in its rank's list
    lane: np.ndarray                 # rank * n_streams + stream id
    lane_pos: np.ndarray             # index within its lane
    n_lanes: int
    src: np.ndarray                  # dependency edges src → dst (src must end before dst starts)
    dst: np.ndarray
    missing: tuple[tuple[int, int], ...]   # (action index, dep index in kind.after) not found
    issued: int = 0                  # the last ``issued`` edges come from list order (_issue_edges), not the kinds

    @property
    def n(self) -> int:
        return len(self.actions)


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a schedule: a message and the (rank, position) cells it concerns."""

    message: str
    cells: tuple[tuple[int, int], ...] = ()
    actions: tuple[str, ...] = ()


def kind_ids(acts: tuple[Action, ...]) -> tuple[np.ndarray, list[Kind]]:
    """Kind id per action and the id → Kind list (mapped by name: str hashes are cached)."""
    names = [a.kind.name for a in acts]
    kmap = {name: i for i, name in enumerate(dict.fromkeys(names))}
    by_name = {a.kind.name: a.kind for a in (acts[names.index(n)] for n in kmap)}
    return np.array([kmap[n] for n in names], dtype=np.int64), [by_name[n] for n in kmap]


def action_arrays(acts: tuple[Action, ...], schedule: Schedule | None = None):
    """(kind ids, kinds, stages) of an action tuple; reuses the schedule's cache when it is its own."""
    flat = schedule.derived(_flat_arrays) if schedule is not None else None
    if flat is not None and flat[0] is acts:
        return flat[4], list(flat[1]), flat[5]
    kid, klist = kind_ids(acts)
    return kid, klist, np.array([a.stage for a in acts], dtype=np.int64)


def _flatten(s: Schedule):
    """Flat per-action arrays, made once per (immutable) schedule."""
    return s.derived(_flat_arrays, _flat_arrays)


def _flat_arrays(s: Schedule):
    acts = tuple(a for row in s.order for a in row)
    n = len(acts)
    lens = [len(row) for row in s.order]
    rank = np.repeat(np.arange(s.ranks), lens)
    pos = np.concatenate([np.arange(k) for k in lens]) if n else np.zeros(0, np.int64)
    kid, klist = kind_ids(acts)
    stage = np.array([a.stage for a in acts], dtype=np.int64)
    mb = np.array([a.microbatch for a in acts], dtype=np.int64)
    return (acts, tuple(klist), rank, pos, kid, stage, mb)


_SHOWN = 10
"""Findings listed per class of structure problem; the rest are counted in one more finding."""


def _more(out: list, n: int, what: str) -> None:
    if n > _SHOWN:
        out.append(Finding(f"... {n - _SHOWN} more {what} (showing the first {_SHOWN})"))


def reordered(parent: Schedule, child: Schedule, rank: int) -> Schedule:
    """Mark ``child`` as ``parent`` with only rank ``rank``'s row permuted (an editor's move or
    swap): it takes the parent's flat arrays, permuted within that row, and, since a permutation
    within one rank changes no range, placement, duplicate or completeness, the parent's structure
    verdict. Nothing is taken that was not made for the parent; returns ``child``."""
    verdict = parent.derived(_structure)
    if verdict is not None:
        child.derived(_structure, lambda c: verdict)
    flat = parent.derived(_flat_arrays)
    if flat is None:
        return child
    acts, klist, rnk, pos, kid, stage, mb = flat
    lo = sum(len(r) for r in parent.order[:rank])
    old, new = parent.order[rank], child.order[rank]
    hi = lo + len(old)
    where = {id(a): lo + i for i, a in enumerate(old)}
    take = np.array([where.get(id(a), -1) for a in new], dtype=np.int64)
    if len(new) != len(old) or (take < 0).any():      # not a permutation of that row's objects
        return child
    perm = np.arange(len(acts))
    perm[lo:hi] = take
    kid2 = kid[perm]
    # kinds are numbered in first-seen order (``kind_ids``): renumber, as a fresh flatten would
    first = [int(np.argmax(kid2 == k)) for k in range(len(klist))]
    seq = sorted(range(len(klist)), key=first.__getitem__)
    if seq != list(range(len(klist))):
        new_id = np.empty(len(klist), np.int64)
        new_id[seq] = np.arange(len(klist))
        kid2, klist = new_id[kid2], tuple(klist[k] for k in seq)
    flat2 = (acts[:lo] + tuple(new) + acts[hi:], klist, rnk, pos, kid2, stage[perm], mb[perm])
    child.derived(_flat_arrays, lambda c: flat2)
    names = parent.derived(_names)
    if names is not None:
        names2 = names[:lo] + tuple(names[i] for i in take.tolist()) + names[hi:]
        child.derived(_names, lambda c: names2)
    return child


def action_names(s: Schedule) -> tuple[str, ...]:
    """Each action's text (``2F0``) in flat order (rank by rank, list order), made once per
    schedule; a reorder's schedule takes its parent's, permuted (``reordered``)."""
    return s.derived(_names, _names)


def _names(s: Schedule) -> tuple[str, ...]:
    return tuple(str(a) for a in _flatten(s)[0])


def locate(s: Schedule, name: str) -> tuple[int, int] | None:
    """(rank, position) of the first action whose text is ``name``, or None (by the schedule's
    names: no pass over the action objects on each look-up)."""
    try:
        k = action_names(s).index(name)
    except ValueError:
        return None
    _, _, rank, pos, *_ = _flatten(s)
    return int(rank[k]), int(pos[k])


def flat_arrays(s: Schedule):
    """(actions, kinds, rank, position, kind id, stage, microbatch): the schedule's flat per-action
    arrays, made once per schedule (read-only: shared with the schedules edited from it)."""
    return _flatten(s)


def structure_problems(s: Schedule) -> list[Finding]:
    """Range, placement, duplicate and completeness problems (everything but ordering); found once
    per schedule (a copy of the list is returned)."""
    return list(s.derived(_structure, _structure))


def _structure(s: Schedule) -> tuple[Finding, ...]:
    acts, klist, rank, pos, kid, stage, mb = _flatten(s)
    out: list[Finding] = []
    S, M, R = s.num_stages, s.microbatches, s.ranks
    bad_place = [st for st, r in enumerate(s.placement) if not 0 <= r < R]
    if bad_place:
        out.append(Finding(f"placement puts stages {bad_place} on ranks outside 0..{R - 1}"))
    cells = lambda idx: tuple((int(rank[i]), int(pos[i])) for i in idx)
    names = lambda idx: tuple(str(acts[i]) for i in idx)
    if S * M > max(len(acts), MAX_ACTIONS):   # before an S x M table: each pair needs an F and a backward
        return tuple(out) + (Finding(f"the schedule has {len(acts)} actions, but {S} stages x {M} microbatches need "
                              f"at least {2 * S * M} (a forward and a backward each)"),)
    oor = np.flatnonzero((stage >= S) | (mb >= M))
    for i in oor[:_SHOWN]:
        a = acts[i]
        what = (f"stage {a.stage} out of range (the schedule has {S} stages, 0..{S - 1})"
                if a.stage >= S else f"microbatch {a.microbatch} out of range (microbatches={M}, 0..{M - 1})")
        out.append(Finding(f"rank {rank[i]}, position {pos[i]}: {a}: {what}", cells([i]), names([i])))
    _more(out, len(oor), "out-of-range actions")
    ok = np.flatnonzero((stage < S) & (mb < M))
    place = np.asarray(s.placement, dtype=np.int64)
    if S:
        wrong = ok[place[stage[ok]] != rank[ok]]
        for i in wrong[:_SHOWN]:
            out.append(Finding(f"rank {rank[i]}, position {pos[i]}: {acts[i]} is on rank {rank[i]}, but "
                                f"stage {stage[i]} is placed on rank {place[stage[i]]}", cells([i]), names([i])))
        _more(out, len(wrong), "actions on the wrong rank")
    # duplicates: runs of equal keys in sorted order (linear, however many there are)
    key = (kid[ok] * max(S, 1) + stage[ok]) * max(M, 1) + mb[ok]
    order = np.argsort(key, kind="stable")
    sk = key[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(sk)]
    runs = [(a0, b0) for a0, b0 in zip(starts.tolist(), ends.tolist()) if b0 - a0 > 1]
    for a0, b0 in runs[:_SHOWN]:
        same = ok[order[a0:b0]]
        shown = ", ".join(f"r{rank[i]}#{pos[i]}" for i in same[:8]) + (", ..." if len(same) > 8 else "")
        out.append(Finding(f"{acts[same[1]]} appears {len(same)} times (ranks/positions {shown})",
                           cells(same[:8]), names(same[1:8])))
    _more(out, len(runs), "duplicated actions")
    # completeness: one F and (B or I+W) per (stage, microbatch)
    roles = ("forward", "backward_input", "backward_weight", "backward")   # F, I, W, B
    have = {role: np.zeros((S, M), bool) for role in roles}
    for k, kind in enumerate(klist):
        if kind.builtin:
            sel = ok[kid[ok] == k]
            have[kind.role][stage[sel], mb[sel]] = True
    hf, hi, hw, hb = (have[role] for role in roles)
    # only the first few missing actions are formatted (a nearly empty 1,024 x 900 plan misses ~2M)
    groups = ((~hf, "{s}F{m}"), (~hb & ~hi & ~hw, "{s}B{m} (or {s}I{m} + {s}W{m})"),
              (~hb & hi & ~hw, "{s}W{m}"), (~hb & ~hi & hw, "{s}I{m}"))
    n_miss = sum(int(mask.sum()) for mask, _ in groups)
    if n_miss:
        firsts = sorted((int(st), int(m), fmt.format(s=int(st), m=int(m)))
                        for mask, fmt in groups for st, m in np.argwhere(mask)[:12])
        texts = [t for _, _, t in firsts[:12]]
        shown = ", ".join(texts) + (f" and {n_miss - len(texts)} more" if n_miss > len(texts) else "")
        out.append(Finding(f"missing actions: {shown}", (), tuple(t.split(" ")[0] for t in texts)))
    bwd = [k for k, kd in enumerate(klist) if kd.is_backward]
    both = np.argwhere(hb & (hi | hw))
    _more(out, len(both), "pairs with both a fused and a split backward")
    for st, m in both[:_SHOWN]:
        idx = ok[(stage[ok] == st) & (mb[ok] == m) & np.isin(kid[ok], bwd)]
        out.append(Finding(f"stage {st} microbatch {m} has both a fused B and a split I/W backward",
                            cells(idx), names(idx)))
    return tuple(out)


def compile_schedule(s: Schedule) -> Graph:
    """Flatten a structurally valid schedule and derive its dependency edges (made once per schedule)."""
    return s.derived(_compile, _compile)


def _compile(s: Schedule) -> Graph:
    acts, klist, rank, pos, kid, stage, mb = _flatten(s)
    n, S, M, K = len(acts), s.num_stages, s.microbatches, len(klist)
    table = np.full((K + 1, max(S, 1), max(M, 1)), -1, dtype=np.int64)  # row K: "absent"
    table[kid, stage, mb] = np.arange(n)
    kindex = {k.name: i for i, k in enumerate(klist)}
    streams = sorted({k.stream for k in klist} - {"compute"})
    stream_id = {"compute": 0, **{name: i + 1 for i, name in enumerate(streams)}}
    n_streams = len(stream_id)
    kstream = np.array([stream_id[k.stream] for k in klist], dtype=np.int64)
    lane = rank * n_streams + (kstream[kid] if n else 0)
    src_l, dst_l, missing = [], [], []
    for k, kind in enumerate(klist):
        idx = np.flatnonzero(kid == k)
        if not len(idx):
            continue
        for d_i, dep in enumerate(kind.after):
            ts = stage[idx] + dep.delta
            valid = (ts >= 0) & (ts < S)
            if not valid.any():
                continue
            vi, vts = idx[valid], ts[valid]
            found = np.full(len(vi), -1, dtype=np.int64)
            for name in dep.kinds:
                if name in kindex:
                    found = np.maximum(found, table[kindex[name], vts, mb[vi]])
            hit = found >= 0
            src_l.append(found[hit])
            dst_l.append(vi[hit])
            if dep.required:
                missing.extend((int(i), d_i) for i in vi[~hit])
        for name in kind.before:
            if name in kindex:
                tgt = table[kindex[name], stage[idx], mb[idx]]
                hit = tgt >= 0
                src_l.append(idx[hit])
                dst_l.append(tgt[hit])
    issued = 0
    if n_streams > 1 and n:
        a, b = _issue_edges(rank, kstream[kid] == 0)
        src_l.append(a)
        dst_l.append(b)
        issued = len(a)
    src = np.concatenate(src_l) if src_l else np.zeros(0, np.int64)
    dst = np.concatenate(dst_l) if dst_l else np.zeros(0, np.int64)
    # position within lane: actions are rank-major in list order, so a stable sort by lane keeps order
    lane_pos = positions_within(lane)
    return Graph(s, acts, klist, rank, stage, kid, mb, pos, lane, lane_pos, s.ranks * n_streams,
                 src, dst, tuple(missing), issued)


def _issue_edges(rank: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An action on another stream (a copy) is issued where it stands in its rank's list: it starts
    after the compute action before it there ends, as the runtime's side stream waits for the
    compute stream's work issued so far (``wait_stream``) when it reaches the copy. Edges
    (that compute action → the copy); actions are rank-major in list order."""
    n = len(rank)
    idx = np.arange(n)
    last = np.maximum.accumulate(np.where(compute, idx, -1))
    first = np.searchsorted(rank, rank, side="left")          # each action's rank's first index
    ok = ~compute & (last >= first)
    return last[ok], idx[ok]


def positions_within(groups) -> np.ndarray:
    """Each element's place among the elements of its group (0, 1, ...), in list order."""
    groups = np.asarray(groups, dtype=np.int64)
    n = len(groups)
    pos = np.zeros(n, dtype=np.int64)
    if n:
        o = np.argsort(groups, kind="stable")
        starts = np.r_[0, np.flatnonzero(np.diff(groups[o])) + 1]
        pos[o] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    return pos


def wait_cycle(g: Graph) -> tuple[list[int], list[tuple[int, int]]] | None:
    """Run lanes in order (Kahn); None if all finish, else (a wait cycle, (blocked, awaited) pairs).

    The cycle lists lanes; each pair says which head action waits on which unfinished action.
    """
    n = g.n
    deps: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(g.src.tolist(), g.dst.tolist()):
        deps[b].append(a)
    lanes: list[list[int]] = [[] for _ in range(g.n_lanes)]
    order = np.lexsort((g.lane_pos, g.lane))
    for i in order.tolist():
        lanes[g.lane[i]].append(i)
    done = bytearray(n)
    ptr = [0] * g.n_lanes
    progress = True
    while progress:
        progress = False
        for L, seq in enumerate(lanes):
            p = ptr[L]
            while p < len(seq):
                i = seq[p]
                if all(done[d] for d in deps[i]):
                    done[i] = 1
                    p += 1
                    progress = True
                else:
                    break
            ptr[L] = p
    stuck = [L for L in range(g.n_lanes) if ptr[L] < len(lanes[L])]
    if not stuck:
        return None
    waits_on = {}
    for L in stuck:
        head = lanes[L][ptr[L]]
        pending = [d for d in deps[head] if not done[d]]
        waits_on[L] = (head, pending[0])
    # follow the wait-for relation from a stuck lane until a lane repeats
    seen: dict[int, int] = {}
    L, path = stuck[0], []
    while L not in seen:
        seen[L] = len(path)
        path.append(L)
        L = int(g.lane[waits_on[L][1]])
        if L not in waits_on:  # waits on a lane that is not stuck: cannot happen after Kahn
            break
    cycle = path[seen.get(L, 0):]
    return cycle, [waits_on[x] for x in cycle]
