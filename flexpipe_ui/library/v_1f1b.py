"""V-1F1B (ours): 1F1B on the V placement with a fused backward.

Why it is new and useful: the peers' V schedules (torch's ZBV and DualPipeV, the zero-bubble and
DualPipe repos) all need the backward split into I and W, which many runtimes cannot do (torch's
ZBV refuses torch.compile'd stages; fused attention/MoE kernels and FSDP-wrapped layers often have
one backward). The V placement alone — the loss stage on rank 0, so the backward starts on the
rank that also finishes first — already shortens 1F1B at 1F1B's peak memory: with uniform costs,
p=8, m=32, 110 vs 1F1B's 117 at the same 8 activations, where interleaved 1F1B needs 11.5 for 106.5;
in general (m >= p) the bubble drops from 1F1B's 3(p-1) to 2(p-1).
Phases of rank r (chunk 0 = stage r, chunk 1 = stage 2p-1-r; written for at least 2p-1
microbatches): (1) warm-up: 2(p-r)-1 forwards of chunk 0; (2) r pairs F(chunk 1), F(chunk 0);
(3) p-r pairs F, B of chunk 1; (4) steady: F B of chunk 0, then F B of chunk 1;
(5) cool-down: r pairs B(chunk 0), B(chunk 1), then the remaining backwards of chunk 0, chunk 1.
"""
from ..dsl import RankOrder, phased, vshape
from ..ir import Schedule
from .base import Family
from .zb_v import v_warmup


def order(ranks: int, microbatches: int, chunks: int = 2) -> Schedule:
    p, m = ranks, microbatches
    n = max(2 * p - 1, m)

    def rank(r: int, o: RankOrder) -> None:
        c0, c1 = v_warmup(o, p, r, lambda c: o.F(c).B(c))     # (1)-(3) as in ZB-V
        while o.count(c1, "F") < o.count(c0, "F") or o.count(c0, "F") < n:   # (4)
            if o.count(c0, "F") < n:
                o.F(c0)
            o.B(c0).F(c1).B(c1)
        for _ in range(r):                                    # (5)
            o.B(c0).B(c1)
        while o.count(c0, "I") < n:
            o.B(c0)
        while o.count(c1, "I") < n:
            o.B(c1)

    return phased(p, m, vshape()(p), rank)


FAMILY = Family(name="v-1f1b",
                description="ours: 1F1B on the V placement, fused backward; faster than 1F1B at its memory",
                placement=lambda v: vshape(), default_chunks=2, allowed_chunks=(2,), order=order,
                order_source="flexpipe_ui.library.v_1f1b.order")
