"""DualPipe-V (DeepSeek-V3 report, 2024: DualPipe "cut in half") written in phases.

``vshape()`` placement. DualPipe pairs a forward of one chunk with a backward of the other so
that their compute and communication overlap on the GPU; our simulator runs one action at a time,
so a pair is listed as its forward then its fused backward (torch imports it the same way).
Phases of rank r (written for at least 2p microbatches; fewer are padded): (1) 2(p-r-1) forwards of chunk 0; (2) r+1 pairs F(c0), F(c1);
(3) p-r-1 triples I(c1), W, F(c1); (4) m-2p+r+1 rounds of the pairs (F c0 + B c1), (F c1 + B c0);
(5) p-r-1 rounds B(c1), then the pair (F c1 + B c0); (6) r+1 rounds of backwards of c1 and c0,
switching to split I (W deferred) half-way; (7) p-r-1 rounds W, backward of c0; (8) the Ws.
"""
from ..dsl import RankOrder, phased, vshape
from ..ir import Schedule
from .base import Family


def order(ranks: int, microbatches: int, chunks: int = 2) -> Schedule:
    p, m = ranks, microbatches
    n = max(m, 2 * p)  # phases need 2p microbatches; fewer are padded (counted, not listed)

    def rank(r: int, o: RankOrder) -> None:
        c0, c1 = r, 2 * p - 1 - r
        for _ in range(2 * (p - r - 1)):                      # (1)
            o.F(c0)
        for _ in range(r + 1):                                # (2)
            o.F(c0).F(c1)
        for _ in range(p - r - 1):                            # (3)
            o.I(c1).W_any().F(c1)
        for _ in range(n - 2 * p + r + 1):                    # (4) overlapped pairs
            o.F(c0).B(c1)
            o.F(c1).B(c0)
        for _ in range(p - r - 1):                            # (5)
            o.B(c1)
            o.F(c1).B(c0)
        zb = False                                            # (6) switch to I + deferred W
        for i in range(r + 1):
            if i == (r + 1) // 2 and r % 2 == 1:
                zb = True
            o.I(c1) if zb else o.B(c1)
            if i == (r + 1) // 2 and r % 2 == 0:
                zb = True
            o.I(c0) if zb else o.B(c0)
        for _ in range(p - r - 1):                            # (7)
            o.W_any()
            o.I(c0) if zb else o.B(c0)
        o.W_all()                                             # (8)

    return phased(p, m, vshape()(p), rank)


FAMILY = Family(name="dualpipe-v", description="DualPipe-V: V placement, paired F/B of the two chunks (DeepSeek)",
                placement=lambda v: vshape(), default_chunks=2, allowed_chunks=(2,), order=order,
                order_source="flexpipe_ui.library.dualpipe_v.order")
