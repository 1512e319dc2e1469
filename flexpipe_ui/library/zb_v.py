"""ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", 2024, §6) written in phases.

``vshape()`` placement: rank r holds chunk 0 = stage r and chunk 1 = stage 2p-1-r, so the last
stage's loss is on rank 0 and the backward comes back up the V. Phases of rank r (written for at
least 2p-1 microbatches; extra counts are not listed):
(1) warm-up: 2(p-r)-1 forwards of chunk 0; (2) r pairs F(chunk 1), F(chunk 0);
(3) p-r triples F, I, W of chunk 1; (4) steady: F I W of chunk 0, then F I W of chunk 1;
(5) cool-down: r pairs I(chunk 0), I(chunk 1); p-r pairs I, W of chunk 0; then the deferred Ws.
With F = I = W the bubble is near zero at 1F1B's peak memory (p activations of a full rank).
"""
from ..dsl import RankOrder, phased, vshape
from ..ir import Schedule
from .base import Family


def v_warmup(o: RankOrder, p: int, r: int, fwd_bwd) -> tuple[int, int]:
    """Phases (1)-(3) shared by the V schedules; ``fwd_bwd(chunk)`` writes one F + backward."""
    c0, c1 = r, 2 * p - 1 - r
    for _ in range(2 * (p - r) - 1):                          # (1)
        o.F(c0)
    for _ in range(r):                                        # (2)
        o.F(c1).F(c0)
    for _ in range(p - r):                                    # (3)
        fwd_bwd(c1)
    return c0, c1


def order(ranks: int, microbatches: int, chunks: int = 2) -> Schedule:
    p, m = ranks, microbatches
    n = max(2 * p - 1, m)

    def rank(r: int, o: RankOrder) -> None:
        c0, c1 = v_warmup(o, p, r, lambda c: o.F(c).I(c).W(c))
        while o.count(c1, "F") < o.count(c0, "F") or o.count(c0, "F") < n:   # (4)
            if o.count(c0, "F") < n:
                o.F(c0)
            o.I(c0).W(c0).F(c1).I(c1).W(c1)
        for _ in range(r):                                    # (5)
            o.I(c0).I(c1)
        for _ in range(p - r):
            o.I(c0).W(c0)
        while o.pending_w_of(c1):
            o.W(c1)
        while o.pending_w_of(c0):
            o.W(c0)

    return phased(p, m, vshape()(p), rank)


FAMILY = Family(name="zb-v", description="ZB-V: V placement, split backward; near-zero bubble at 1F1B memory",
                placement=lambda v: vshape(), default_chunks=2, allowed_chunks=(2,), order=order,
                order_source="flexpipe_ui.library.zb_v.order")
