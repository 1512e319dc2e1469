"""The worker: one process per rank, spawned by ``launch`` or started by ``torchrun``.

A worker starts (``startup.start_process``: the same sequence as the profiler's workers), and for
each task (a plan and a step count) builds only its own stages from the model spec (seeded per
layer), agrees on boundary shapes with its neighbours (``shapes``), then runs steps: barrier,
actions, optimizer step, report. Reports go to the launcher's queue (a dict per message, plain
Python and numpy only) or, under torchrun (``python -m kernel_runtime.worker``,
``kernel_runtime.cli.torchrun``), to stdout as JSON lines.
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from .startup import ProcessStart, start_process

__all__ = ["Job", "Task", "worker_main", "run_worker", "kind_fields"]


@dataclass
class Task:
    """One plan to run for ``steps`` steps (picklable: the plan travels as its JSON dict)."""

    plan: dict
    steps: int = 1
    capture_grads: bool = False


@dataclass
class Job:
    """Everything a worker needs (picklable)."""

    tasks: list[Task]
    world: int
    model: Any = None
    loss_fn: Any = None
    data: Any = None
    timed: Any = False
    device: str = "cpu"            # "cpu" or "cuda"
    backend: str = "gloo"
    dtype: str = "float32"
    lr: float = 0.01
    optimizer: str = "sgd"
    seed: int = 0
    timeout: float = 60.0
    threads: int | None = None
    pin_cpus: bool = True
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    loopback: bool = True          # one machine: the rendezvous store and gloo listen on 127.0.0.1 only
    handlers: dict = field(default_factory=dict)  # kind → handler, on top of executor.DEFAULT_HANDLERS
    kinds: list = field(default_factory=list)   # user kinds of the plans, as picklable fields
    dp: int = 1                    # data-parallel replicas: world = plan ranks x dp (see dp.py)
    spawned: bool = True           # started by launch (dies with it); False under torchrun


def kind_fields(kind) -> dict:
    """The picklable part of a user kind (its cost function stays behind: workers do not simulate)."""
    return {"name": kind.name, "role": kind.role, "after": kind.after, "before": kind.before,
            "mem_start": kind.mem_start, "mem_end": kind.mem_end, "adjust": dict(kind.adjust),
            "stream": kind.stream, "description": kind.description}


def _register_kinds(fields: list) -> None:
    from flexpipe_ui.kinds import Kind, kinds, register_kind
    todo = [f for f in fields if f["name"] not in kinds()]
    while todo:                          # dependencies first (LOAD names OFF)
        known = set(kinds())
        ready = [f for f in todo if all(set(d.kinds) <= known | {f["name"]} for d in f["after"])]
        for f in ready or todo:          # nothing ready: register_kind explains what is missing
            register_kind(Kind(cost=lambda c: 0.0, **f))
        todo = [f for f in todo if f not in ready]


def _dtype(name: str):
    import torch
    try:
        return {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
                "float16": torch.float16}[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: use float32, float64, bfloat16 or float16") from None


def _start_of(job: Job, rank: int, local_rank: int | None) -> ProcessStart:
    """How this worker's process starts (``startup``): launch's workers on loopback, dying with
    the launcher; torchrun's with its environment's rendezvous."""
    return ProcessStart(rank=rank, world=job.world, device=job.device, backend=job.backend,
                        local_rank=local_rank, threads=job.threads, pin_cpus=job.pin_cpus,
                        timeout=max(job.timeout, 30.0), master_addr=job.master_addr,
                        master_port=job.master_port if job.spawned else None, loopback=job.loopback,
                        spawned=job.spawned)


@dataclass
class _Rank:
    """What one worker holds across its tasks."""

    job: Job
    lay: Any                       # dp.Layout
    device: Any
    dtype: Any
    spec: Any                      # models.ModelSpec
    groups: Any                    # transport.ChannelGroups
    staged: bool
    allreduce: Any
    timer: Any
    handlers: dict
    report: Callable
    progress: Callable | None = None
    watch: Callable | None = None


def run_worker(rank: int, job: Job, report, progress=None, local_rank: int | None = None,
               watch=None) -> None:
    """Start the process, run every task, report; raises on failure (the caller reports it)."""
    import torch.distributed as dist

    from flexpipe_ui.planfile import plan_from_dict

    from ..models import as_spec
    from .dp import GradAllReduce, Layout
    from .executor import DEFAULT_HANDLERS
    from .timers import CpuTimer, CudaTimer
    from .transport import ChannelGroups
    device = start_process(_start_of(job, rank, local_rank))
    _register_kinds(job.kinds)
    plans = [plan_from_dict(t.plan) for t in job.tasks]
    lay = Layout(rank, job.world // job.dp, job.dp)
    if lay.ranks * job.dp != job.world or plans[0].ranks != lay.ranks:
        raise ValueError(f"world {job.world} != plan ranks {plans[0].ranks} x dp {job.dp}")
    staged = device.type == "cuda" and job.backend != "nccl"
    spec = as_spec(job.model, job.loss_fn, num_layers=plans[0].num_layers or plans[0].schedule.num_stages,
                   timed=job.timed)
    w = _Rank(job, lay, device, _dtype(job.dtype), spec,
              ChannelGroups(job.backend, lay.ranks, lay.replica, lay.replicas), staged,
              GradAllReduce(lay, staged) if job.dp > 1 else None,
              CudaTimer(device) if device.type == "cuda" else CpuTimer(),
              {**DEFAULT_HANDLERS, **job.handlers}, report, progress, watch)
    report({"type": "ready", "rank": rank, "host": os.uname().nodename, "pid": os.getpid()})
    for ti, (task, plan) in enumerate(zip(job.tasks, plans)):
        _run_task(w, ti, task, plan)
    dist.barrier()
    report({"type": "done", "rank": rank})


def _batches(w: _Rank, sched, step: int, feeds: bool, scores: bool):
    """This replica's share of step ``step``'s batch, on the device, split into microbatches: the
    inputs only on the first stage's rank (``feeds``), the targets only on the last's (``scores``);
    the others would hold a whole batch on their device for nothing."""
    from ..models.data import get_batch, split_microbatches
    from .dp import replica_share
    x, t = get_batch(w.spec, w.job.data, step, w.job.seed)
    out = []
    for v, what, keep in ((x, "input batch", feeds), (t, "target batch", scores)):
        v = replica_share(v, w.lay.replica, w.lay.replicas, what)
        if not keep:
            out.append(None)
            continue
        v = v.to(w.device)
        v = v.to(w.dtype) if v.is_floating_point() else v
        out.append(split_microbatches(v, sched.microbatches, what))
    return out[0], out[1]


def _run_task(w: _Rank, ti: int, task: Task, plan) -> None:
    """Build this rank's stages of ``plan``, agree on shapes, run ``task.steps`` steps, report each
    with the rank's memory as the allocator counts it (``procmem``)."""
    import torch.distributed as dist

    from flexpipe_ui.passes import derive_comm

    from ..models.data import make_optimizer
    from .executor import RankExecutor
    from .memory import tracked_memory_mib
    from .procmem import RankMemory
    from .shapes import infer_shapes
    rank, job, device = w.lay.rank, w.job, w.device
    sched = plan.schedule
    part = plan.partition or tuple((s,) for s in range(sched.num_stages))
    mine = sched.stages_of(rank)
    mem = RankMemory(device)
    mem.plan_start()                 # before this plan's layers exist
    built = iter(w.spec.layers([i for s in mine for i in part[s]], job.seed, device=device, dtype=w.dtype))
    layers = {s: [next(built) for _ in part[s]] for s in mine}
    params = [p for s in mine for l in layers[s] for p in l.parameters()]
    opt = make_optimizer(params, job.lr, job.optimizer) if params else None
    comm = derive_comm(sched)
    w.groups.ensure(comm.channels, rank, device)
    feeds, scores = 0 in mine, sched.num_stages - 1 in mine
    first = _batches(w, sched, 0, feeds, scores)
    shapes = infer_shapes(plan, rank, layers, first[0][0] if feeds else None, None, device, w.dtype,
                          to_global=w.groups.global_rank, on_device=device.type == "cuda" and not w.staged)
    ex = RankExecutor(plan, rank, layers, w.spec.loss_fn, comm, shapes, device, w.groups, job.timeout,
                      w.timer, None, w.handlers)
    if w.allreduce is not None:
        ex.on_stage_done = lambda s, ex=ex: w.allreduce.start(ex.params[s])
    ex.watch = w.watch
    mem.settled()
    for step in range(task.steps):
        inputs, targets = first if step == 0 else _batches(w, sched, step, feeds, scores)
        if w.progress:
            ex.progress = lambda pos, step=step: w.progress(ti, step, pos)
        dist.barrier()
        with mem.step(step):
            rec = ex.run_step(inputs if feeds else None, targets if scores else None, step)
        if w.allreduce is not None:
            w.allreduce.finish()
        grads = None
        if task.capture_grads:
            grads = {f"{part[s][j]}.{n}": p.grad.detach().double().cpu().numpy().copy()
                     for s in mine for j, l in enumerate(layers[s]) for n, p in l.named_parameters()
                     if p.grad is not None}
        if opt is not None:
            opt.step()
        t_end = w.timer.now()
        mem.after_optimizer(step)
        w.report({"type": "step", "rank": w.lay.global_rank, "prank": rank, "replica": w.lay.replica,
                  "task": ti, "step": step, "loss": rec.loss, "records": rec.records, "t0": rec.t0,
                  "t_end": t_end, "grads": grads, "peak_mem": mem.peak_mib(), "peak_rss": mem.rss_mib(),
                  "peak_tracked": tracked_memory_mib(rec, params, opt)})


def worker_main(rank: int, job: Job, queue, progress_arr=None, beat_arr=None) -> None:
    """Entry point for ``launch`` (torch.multiprocessing spawn): errors go to the queue.
    ``beat_arr[2 rank: 2 rank + 2]`` = (1.0 while an action computes else 0.0, time.monotonic() of
    the change): the launcher's watchdog names a rank stuck in compute."""

    def watch(busy: bool) -> None:
        if beat_arr is not None:
            beat_arr[2 * rank + 1] = time.monotonic()
            beat_arr[2 * rank] = 1.0 if busy else 0.0

    def progress(task, step, pos):
        if progress_arr is not None:
            base = 3 * rank
            progress_arr[base], progress_arr[base + 1], progress_arr[base + 2] = task, step, pos

    try:
        run_worker(rank, job, queue.put, progress, watch=watch)
    except BaseException as e:   # noqa: BLE001 - everything is reported, then the process exits
        from .executor import ActionError
        from .transport import CommError
        cause = e.cause if isinstance(e, ActionError) else e
        comm = isinstance(cause, CommError) or (isinstance(cause, RuntimeError) and _looks_like_comm(cause))
        oom = _looks_like_oom(cause)
        queue.put({"type": "error", "rank": rank, "action": getattr(e, "action", None),
                   "step": getattr(e, "step", None), "message": str(e), "exc_type": type(cause).__name__,
                   "traceback": traceback.format_exc(), "comm": comm, "oom": oom,
                   "time": time.monotonic()})
        _close(queue)
        os._exit(1)
    _close(queue)
    try:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def _close(queue) -> None:
    try:
        queue.close()
        queue.join_thread()
    except Exception:
        pass


def _looks_like_comm(e: BaseException) -> bool:
    t = str(e).lower()
    return any(k in t for k in ("connection", "gloo", "nccl", "peer", "socket", "broken pipe"))


def _looks_like_oom(e: BaseException) -> bool:
    t = f"{type(e).__name__} {e}".lower()
    return "out of memory" in t or "can't allocate memory" in t or "outofmemory" in t or \
        isinstance(e, MemoryError)
