"""The peer: the same plan run by torch.distributed.pipelining's ``_PipelineScheduleRuntime``.

The plan is exported with ``flexpipe_ui.torch_interop.export_torch_csv`` and loaded by torch's
runtime (``_load_csv``, which adds its own sends/receives); each rank wraps its stages' layers,
built from the same spec and seed as ours, in ``PipelineStage``. ``compare`` spawns one process per
rank that alternates our step and torch's step on identical copies of the model, so both see the
same machine load; it returns per-step losses, gradients and wall times of both.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass

__all__ = ["compare", "PeerResult"]


@dataclass
class PeerResult:
    """Both runtimes on one plan: losses and gradients of step 0, wall times per repetition (s)."""

    ours_loss: float
    torch_loss: float
    ours_grads: dict
    torch_grads: dict
    ours_times: list[float]
    torch_times: list[float]

    @property
    def ratio(self) -> float:
        """Median over repetitions of ours / torch's step time; the two steps of a repetition run
        back to back, so a change in machine load (shared cores) cancels out of each ratio."""
        return statistics.median(o / t for o, t in zip(self.ours_times, self.torch_times))

    @property
    def max_grad_diff(self) -> float:
        import numpy as np
        return max(float(np.abs(self.ours_grads[k] - self.torch_grads[k]).max()) for k in self.ours_grads)


def _worker(rank: int, world: int, port: int, plan_dict: dict, spec, reps: int, dtype: str, seed: int,
            csv_path: str, q) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    from flexpipe_ui.planfile import plan_from_dict

    from flexpipe_ui.passes import derive_comm
    from ..models.data import get_batch, split_microbatches
    from .executor import RankExecutor
    from .shapes import infer_shapes
    from .timers import CpuTimer
    from .transport import ChannelGroups
    from .worker import _dtype

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dt = _dtype(dtype)
    plan = plan_from_dict(plan_dict)
    sched = plan.schedule
    S, M = sched.num_stages, sched.microbatches
    mine = sched.stages_of(rank)
    dev = torch.device("cpu")
    x, t = get_batch(spec, None, 0, seed)
    x = x.to(dt) if x.is_floating_point() else x
    t = t.to(dt) if t.is_floating_point() else t
    xs, ts = split_microbatches(x, M), split_microbatches(t, M)

    # ours
    ours = {s: spec.layers(plan.partition[s], seed, dtype=dt) for s in mine}
    comm = derive_comm(sched)
    shapes = infer_shapes(plan, rank, ours, xs[0] if 0 in mine else None, None, dev, dt)
    ex = RankExecutor(plan, rank, ours, spec.loss_fn, comm, shapes, dev, ChannelGroups("gloo"), 60.0, CpuTimer())

    # torch's
    theirs = {s: torch.nn.Sequential(*spec.layers(plan.partition[s], seed, dtype=dt)) for s in mine}
    stages = [PipelineStage(theirs[s], s, S, dev) for s in mine]
    runtime = _PipelineScheduleRuntime(stages, M, loss_fn=spec.loss_fn, scale_grads=True)
    runtime._load_csv(csv_path)

    def run_ours():
        rec = ex.run_step(xs if 0 in mine else None, ts if S - 1 in mine else None)
        return rec.loss

    def run_torch():
        for m in theirs.values():
            m.zero_grad(set_to_none=True)
        losses = []
        args = (x,) if 0 in mine else ()
        kw = {"target": t, "losses": losses} if S - 1 in mine else {}
        runtime.step(*args, **kw)
        return float(sum(float(l.detach()) for l in losses) / M) if losses else None

    def grads(mods):
        return {f"{plan.partition[s][j]}.{n}": p.grad.detach().double().numpy().copy()
                for s in mine for j, l in enumerate(mods[s]) for n, p in l.named_parameters()}

    out = {"rank": rank, "ours": [], "torch": []}
    for rep in range(reps + 1):
        for name, fn in (("ours", run_ours), ("torch", run_torch)) if rep % 2 == 0 else \
                (("torch", run_torch), ("ours", run_ours)):
            dist.barrier()
            t0 = time.perf_counter()
            loss = fn()
            dist.barrier()
            el = time.perf_counter() - t0
            if rep == 0:                    # step 0 is the check, and warms both up
                out[f"{name}_loss"] = loss
                out[f"{name}_grads"] = grads(ours if name == "ours" else {s: list(m) for s, m in theirs.items()})
            else:
                out[name].append(el)
    q.put(out)
    dist.barrier()
    dist.destroy_process_group()


def compare(plan, model=None, *, reps: int = 10, dtype: str = "float32", seed: int = 0) -> PeerResult:
    """Run ``plan`` with ours and torch's runtime on CPU/gloo; step 0 compared, reps timed."""
    import torch.multiprocessing as tmp

    from flexpipe_ui.planfile import plan_to_dict
    from flexpipe_ui.torch_interop import export_torch_csv

    from .launcher import _free_port, prepare_plans
    from ..models import as_spec

    spec = as_spec(model, num_layers=plan.num_layers)
    (plan,) = prepare_plans(plan, spec.num_layers)
    world = plan.ranks
    with tempfile.TemporaryDirectory() as d:
        csv_path = os.path.join(d, "plan.csv")
        export_torch_csv(plan.schedule, csv_path)
        ctx = tmp.get_context("spawn")
        q = ctx.Queue()
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(r, world, port, plan_to_dict(plan), spec, reps, dtype,
                                                     seed, csv_path, q), daemon=True) for r in range(world)]
        for p in procs:
            p.start()
        try:
            got = [q.get(timeout=600) for _ in range(world)]
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
    got.sort(key=lambda g: g["rank"])
    merge = lambda key: {k: v for g in got for k, v in g[key].items()}
    loss = lambda key: next(g[key] for g in got if g[key] is not None)
    # a step's time is the slowest rank's (all ranks leave the closing barrier together anyway)
    times = lambda key: [max(g[key][i] for g in got) for i in range(len(got[0][key]))]
    return PeerResult(loss("ours_loss"), loss("torch_loss"), merge("ours_grads"), merge("torch_grads"),
                      times("ours"), times("torch"))
