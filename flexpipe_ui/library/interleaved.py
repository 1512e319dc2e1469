"""Interleaved 1F1B (Narayanan et al., 2021; Megatron-LM's virtual pipeline) written in phases.

``looped(v)`` placement: rank r holds stages r, r+p, ..., r+(v-1)p. Microbatches go in rounds of
g = min(p, m): the k-th forward of a rank is chunk (k // g) mod v of microbatch
(k // (g v)) g + k mod g; backwards visit the chunks in reverse. Phases of rank r:
(1) warm-up: 2(p-r-1) + (v-1)g forwards; (2) steady: one forward, one backward;
(3) cool-down: the remaining backwards. Fused backward. Bubble (p-1)/v of 1F1B's.
"""
from ..dsl import looped
from ..ir import Action, Schedule
from ..kinds import get_kind
from .base import Family, LibraryError


def order(ranks: int, microbatches: int, chunks: int = 2) -> Schedule:
    p, m, v = ranks, microbatches, chunks
    g = min(p, m)
    if m % g:
        raise LibraryError(f"interleaved-1f1b runs microbatches in rounds of {p} (the ranks): "
                           f"use a multiple of {p} (or at most {p}), got {m}")
    F, B = get_kind("F"), get_kind("B")
    total = m * v

    def fwd(k):
        return (k // g) % v, (k // (g * v)) * g + k % g

    rows = []
    for r in range(p):
        warm = min(2 * (p - r - 1) + (v - 1) * g, total)
        row = [Action(c * p + r, F, mb) for c, mb in map(fwd, range(warm))]       # warm-up
        for i in range(total - warm):                                            # steady 1F1B
            c, mb = fwd(warm + i)
            row.append(Action(c * p + r, F, mb))
            c, mb = fwd(i)
            row.append(Action((v - 1 - c) * p + r, B, mb))
        for i in range(total - warm, total):                                     # cool-down
            c, mb = fwd(i)
            row.append(Action((v - 1 - c) * p + r, B, mb))
        rows.append(tuple(row))
    return Schedule(p, m, looped(v)(p), tuple(rows))


FAMILY = Family(name="interleaved-1f1b",
                description="Interleaved 1F1B (Megatron virtual pipeline): v chunks per rank, rounds of p",
                placement=looped, default_chunks=2, order=order,
                order_source="flexpipe_ui.library.interleaved.order")
