"""ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024, §3.1) written in phases.

Split backward: I (input gradient, on the critical path) and W (weight gradient, deferrable).
Phases of rank r: (1) warm-up: p-r forwards (1F1B's, so peak memory stays 1F1B's p on rank 0);
(2) steady: I, then — once r Ws have been deferred — the oldest deferred W, then the next F;
(3) cool-down: the r deferred Ws fill the tail. With F = I = W each rank defers exactly r Ws and
holds at most p activations; the bubble is (p-1)(F+I-W), a third of 1F1B's.
"""
from ..dsl import RankOrder, looped, phased
from ..ir import Schedule
from .base import Family


def order(ranks: int, microbatches: int, chunks: int = 1) -> Schedule:
    p, m = ranks, microbatches

    def rank(r: int, o: RankOrder) -> None:
        warm = min(p - r, m)
        for _ in range(warm):                  # warm-up
            o.F(r)
        for k in range(m):                     # steady: I, W (after r deferred), F
            o.I(r)
            if k >= r:
                o.W_any()
            if k + warm < m:
                o.F(r)
        o.W_all()                              # cool-down: the deferred Ws

    return phased(p, m, looped(1)(p), rank)


FAMILY = Family(name="zb-h1", description="ZB-H1: split backward, W deferred into the cool-down; 1F1B memory",
                placement=lambda v: looped(1), allowed_chunks=(1,), order=order,
                order_source="flexpipe_ui.library.zb_h1.order")
