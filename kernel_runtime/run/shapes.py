"""Boundary shapes: what every message of a plan holds, agreed between neighbours before a run.

Stage by stage in model order, the owner runs one no-grad forward on a zero tensor of its input
shape (the real first microbatch for stage 0) and sends the output's shape and dtype to the next
stage's owner (a 10-integer header), so receivers can post their buffers ahead of need.
"""
from __future__ import annotations

__all__ = ["infer_shapes"]

_DTYPES = ["torch.float32", "torch.float64", "torch.bfloat16", "torch.float16"]


def infer_shapes(plan, rank, layers, sample, loss_target, device, dtype, to_global=None, on_device=None):
    """(what, stage) → (shape, dtype) for every message this rank sends or receives.

    Stage by stage in model order, the owner runs one no-grad forward on a zero tensor of its input
    shape (the real first microbatch for stage 0) and sends the output's shape to the next owner.
    """
    import torch
    import torch.distributed as dist
    sched = plan.schedule
    S, place = sched.num_stages, sched.placement
    to_global = to_global or (lambda r: r)
    hdr_dev = device if (on_device if on_device is not None else device.type == "cuda") else "cpu"
    shapes: dict = {}
    in_meta = None
    for s in range(S - 1):
        src, dst = place[s], place[s + 1]
        if rank == src:
            if s == 0:
                x = sample
            else:
                shape, dt = in_meta
                x = torch.zeros(shape, dtype=dt, device=device)
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                from .executor import stage_forward
                _, _, y = stage_forward(layers[s], x)
            meta = (tuple(y.shape), y.dtype)
            if not y.is_floating_point():
                raise ValueError(f"stage {s} outputs a {y.dtype} tensor; stage outputs must be floating "
                                 "point so gradients can flow back")
            shapes[("act", s)] = meta
            shapes[("grad", s + 1)] = meta
            in_meta = meta if dst == rank else None
            if dst != rank:
                hdr = torch.zeros(10, dtype=torch.int64)
                hdr[0], hdr[1] = _DTYPES.index(str(y.dtype)), y.dim()
                hdr[2:2 + y.dim()] = torch.tensor(y.shape)
                dist.send(hdr.to(hdr_dev), dst=to_global(dst))
        elif rank == dst:
            hdr = torch.zeros(10, dtype=torch.int64, device=hdr_dev)
            dist.recv(hdr, src=to_global(src))
            hdr = hdr.cpu()
            meta = (tuple(int(v) for v in hdr[2:2 + int(hdr[1])]),
                    getattr(torch, _DTYPES[int(hdr[0])].removeprefix("torch.")))
            shapes[("act", s)] = meta
            shapes[("grad", s + 1)] = meta
            in_meta = meta
        else:
            in_meta = None
    return shapes
