"""ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024, §3.1) written in phases.

Trades memory for a zero bubble. Phases of rank r: (1) warm-up: 2(p-r)-1 forwards, enough to
keep the rank busy until its first input gradient arrives; (2) steady: I, then — once 2r Ws have
been deferred — the oldest deferred W, then the next F; (3) cool-down: the 2r deferred Ws. With
F = I = W every rank is busy from its first action to its last (per-rank bubble
(p-1)(F+I-2W) = 0) and holds at most 2p-1 activations.
"""
from ..dsl import RankOrder, looped, phased
from ..ir import Schedule
from .base import Family


def order(ranks: int, microbatches: int, chunks: int = 1) -> Schedule:
    p, m = ranks, microbatches

    def rank(r: int, o: RankOrder) -> None:
        warm = min(2 * (p - r) - 1, m)
        for _ in range(warm):                  # warm-up
            o.F(r)
        for k in range(m):                     # steady: I, W (after 2r deferred), F
            o.I(r)
            if k >= 2 * r:
                o.W_any()
            if k + warm < m:
                o.F(r)
        o.W_all()                              # cool-down

    return phased(p, m, looped(1)(p), rank)


FAMILY = Family(name="zb-h2", description="ZB-H2: more warm-up forwards, 2r deferred Ws; zero bubble at 2p-1 memory",
                placement=lambda v: looped(1), allowed_chunks=(1,), order=order,
                order_source="flexpipe_ui.library.zb_h2.order")
