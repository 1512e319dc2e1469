"""The worker entry point: one process per rank, spawned by ``launch`` or started by ``torchrun``.

A worker joins the process group, and for each task (a plan and a step count) builds only its own
stages from the model spec (seeded per layer), agrees on boundary shapes with its neighbours, then
runs steps: barrier, actions, optimizer step, report. Reports go to the launcher's queue (a dict
per message, plain Python and numpy only) or, under torchrun, to stdout as JSON lines.

torchrun:  torchrun --nproc-per-node 4 -m kernel_runtime.worker --plan plan.json --steps 10
           torchrun --nproc-per-node 8 -m kernel_runtime.worker --plan plan.json --dp 2   (4 ranks x 2)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Job", "Task", "worker_main", "main"]


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


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker if the launching process dies (no orphans)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _device(job: Job, local_rank: int):
    import torch
    if job.device == "cuda":
        n = torch.cuda.device_count()
        dev = torch.device("cuda", local_rank % n)
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _infer_shapes(plan, rank, layers, sample, loss_target, device, dtype, to_global=None, on_device=None):
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


def _peak_memory_mib(device, rec, params, opt) -> float:
    """This step's peak memory of the rank, MiB: CUDA's ``max_memory_allocated`` on a GPU; on CPU
    the activation peak the executor tracked + parameters, gradients and optimizer state."""
    import torch
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    from .memory import static_bytes
    return (rec.peak_activation + static_bytes(params, opt)) / 2 ** 20


_DTYPES = ["torch.float32", "torch.float64", "torch.bfloat16", "torch.float16"]


def _loopback_store(job: Job, rank: int, timeout):
    """The rendezvous TCPStore bound to 127.0.0.1 only (torch's own binds every interface, "::"):
    rank 0 binds the socket itself and hands it over (``master_listen_fd``)."""
    import socket

    import torch.distributed as dist
    if rank != 0:
        return dist.TCPStore("127.0.0.1", job.master_port, job.world, False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", job.master_port))
    sock.listen(max(128, job.world))
    return dist.TCPStore("127.0.0.1", job.master_port, job.world, True, timeout=timeout,
                         wait_for_workers=False, master_listen_fd=sock.detach())


def run_worker(rank: int, job: Job, report, progress=None, local_rank: int | None = None,
               watch=None) -> None:
    """Join the group, run every task, report; raises on failure (the caller reports it)."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    from flexpipe_ui.planfile import plan_from_dict

    from flexpipe_ui.passes import derive_comm
    from ..models.data import get_batch, make_optimizer, split_microbatches
    from .dp import GradAllReduce, Layout, replica_share
    from .executor import DEFAULT_HANDLERS, CpuTimer, CudaTimer, RankExecutor
    from ..models import as_spec
    from .transport import ChannelGroups

    from .affinity import pin_worker
    from .allocator import keep_freed_memory
    keep_freed_memory()                  # as the profiler's workers: no page-fault churn per step
    pin_worker(rank if local_rank is None else local_rank,
               int(os.environ.get("LOCAL_WORLD_SIZE", job.world)), job.device, job.pin_cpus)
    if job.threads:
        torch.set_num_threads(job.threads)
    dtype = _dtype(job.dtype)
    device = _device(job, rank if local_rank is None else local_rank)
    if not dist.is_initialized():
        kw = {"device_id": device} if job.backend == "nccl" else {}
        limit = timedelta(seconds=max(job.timeout, 30.0))
        if job.loopback:
            kw["store"] = _loopback_store(job, rank, limit)
        dist.init_process_group(job.backend, rank=rank, world_size=job.world, timeout=limit, **kw)
    _register_kinds(job.kinds)
    plans = [plan_from_dict(t.plan) for t in job.tasks]
    lay = Layout(rank, job.world // job.dp, job.dp)
    if lay.ranks * job.dp != job.world or plans[0].ranks != lay.ranks:
        raise ValueError(f"world {job.world} != plan ranks {plans[0].ranks} x dp {job.dp}")
    glob = rank
    rank = lay.rank                      # from here on: this process's pipeline rank
    groups = ChannelGroups(job.backend, lay.ranks, lay.replica, lay.replicas)
    staged = device.type == "cuda" and job.backend != "nccl"
    allreduce = GradAllReduce(lay, staged) if job.dp > 1 else None
    timer = CudaTimer(device) if device.type == "cuda" else CpuTimer()
    spec = as_spec(job.model, job.loss_fn, num_layers=plans[0].num_layers or plans[0].schedule.num_stages,
                   timed=job.timed)
    handlers = {**DEFAULT_HANDLERS, **job.handlers}
    report({"type": "ready", "rank": glob, "host": os.uname().nodename, "pid": os.getpid()})
    for ti, (task, plan) in enumerate(zip(job.tasks, plans)):
        sched = plan.schedule
        part = plan.partition or tuple((s,) for s in range(sched.num_stages))
        mine = sched.stages_of(rank)
        built = iter(spec.layers([i for s in mine for i in part[s]], job.seed, device=device, dtype=dtype))
        layers = {s: [next(built) for _ in part[s]] for s in mine}
        params = [p for s in mine for l in layers[s] for p in l.parameters()]
        opt = make_optimizer(params, job.lr, job.optimizer) if params else None
        comm = derive_comm(sched)
        groups.ensure(comm.channels, rank, device)

        def mb(step):
            x, t = get_batch(spec, job.data, step, job.seed)
            x = replica_share(x, lay.replica, lay.replicas, "input batch")
            t = replica_share(t, lay.replica, lay.replicas, "target batch")
            x = x.to(device)
            t = t.to(device)
            x = x.to(dtype) if x.is_floating_point() else x
            t = t.to(dtype) if t.is_floating_point() else t
            return (split_microbatches(x, sched.microbatches, "input batch"),
                    split_microbatches(t, sched.microbatches, "target batch"))

        first = mb(0)
        shapes = _infer_shapes(plan, rank, layers, first[0][0] if 0 in mine else None, None, device, dtype,
                               to_global=groups.global_rank, on_device=device.type == "cuda" and not staged)
        prog = (lambda pos, ti=ti: progress(ti, -1, pos)) if progress else None
        ex = RankExecutor(plan, rank, layers, spec.loss_fn, comm, shapes, device, groups, job.timeout,
                          timer, None, handlers)
        if allreduce is not None:
            ex.on_stage_done = lambda s, ex=ex: allreduce.start(ex.params[s])
        ex.watch = watch
        for step in range(task.steps):
            inputs, targets = first if step == 0 else mb(step)
            if progress:
                ex.progress = lambda pos, ti=ti, step=step: progress(ti, step, pos)
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            rec = ex.run_step(inputs if 0 in mine else None,
                              targets if sched.num_stages - 1 in mine else None, step)
            if allreduce is not None:
                allreduce.finish()
            grads = None
            if task.capture_grads:
                grads = {f"{part[s][j]}.{n}": p.grad.detach().double().cpu().numpy().copy()
                         for s in mine for j, l in enumerate(layers[s]) for n, p in l.named_parameters()
                         if p.grad is not None}
            if opt is not None:
                opt.step()
            t_end = timer.now()
            report({"type": "step", "rank": glob, "prank": rank, "replica": lay.replica, "task": ti,
                    "step": step, "loss": rec.loss, "records": rec.records, "t0": rec.t0, "t_end": t_end,
                    "grads": grads, "peak_mem": _peak_memory_mib(device, rec, params, opt)})
        del ex, layers, params, opt
    dist.barrier()
    report({"type": "done", "rank": glob})


def worker_main(rank: int, job: Job, queue, progress_arr=None, beat_arr=None) -> None:
    """Entry point for ``launch`` (torch.multiprocessing spawn): errors go to the queue.
    ``beat_arr[2 rank: 2 rank + 2]`` = (1.0 while an action computes else 0.0, time.monotonic() of
    the change): the launcher's watchdog names a rank stuck in compute."""
    _die_with_parent()
    os.environ.setdefault("MASTER_ADDR", job.master_addr)
    os.environ["MASTER_PORT"] = str(job.master_port)
    if job.loopback:   # gloo's pair sockets on loopback too (else on the hostname's address)
        import socket
        lo = [n for _, n in socket.if_nameindex() if n in ("lo", "lo0")]
        if lo:      # NCCL's bootstrap sockets likewise (intra-node data goes over P2P/SHM anyway)
            os.environ.setdefault("GLOO_SOCKET_IFNAME", lo[0])
            os.environ.setdefault("NCCL_SOCKET_IFNAME", lo[0])

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


# -- torchrun --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``torchrun ... -m kernel_runtime.worker --plan P [--dp D]``: RANK/WORLD_SIZE come from torchrun.

    With ``--dp D`` torchrun starts plan ranks x D processes; global rank ``d * ranks + r`` is
    pipeline rank r of replica d (``kernel_runtime.dp``). ``--model`` takes what ``flexpipe train``
    takes (demo-gpt, hf:<type> with --model-config, package.module:factory).
    """
    p = argparse.ArgumentParser(prog="kernel_runtime.worker")
    p.add_argument("--plan", required=True)
    p.add_argument("--model", default="demo-gpt")
    p.add_argument("--model-config", default=None, help="hf: models: config fields as JSON")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas (world = plan ranks x dp)")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--out", default=None, help="directory for per-rank JSON step reports")
    args = p.parse_args(argv)
    import types

    import torch
    from flexpipe_ui.planfile import load_plan, plan_to_dict

    from ..models.model_arg import resolve_model
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    plan = load_plan(args.plan)
    if args.dp < 1 or plan.ranks * args.dp != world:
        print(f"plan has {plan.ranks} ranks x --dp {args.dp} replicas = {plan.ranks * max(args.dp, 1)} "
              f"processes but torchrun started {world}", file=sys.stderr)
        return 2
    ns = types.SimpleNamespace(model=args.model, model_config=args.model_config, dim=64, seq=args.seq,
                               batch_size=args.batch_size, layers_given=False,
                               layers=plan.num_layers or max(6, plan.schedule.num_stages))
    try:
        _, model = resolve_model(ns)
    except ValueError as e:
        print(f"kernel_runtime.worker: {e}", file=sys.stderr)
        return 2
    n_gpu = torch.cuda.device_count() if device == "cuda" else 0
    # one GPU per process on this machine: NCCL; fewer: processes share GPUs, gloo through host memory
    backend = "nccl" if device == "cuda" and int(os.environ.get("LOCAL_WORLD_SIZE", world)) <= n_gpu else "gloo"
    job = Job(tasks=[Task(plan_to_dict(plan), args.steps)], world=world, model=model,
              device=device, backend=backend, dtype=args.dtype,
              lr=args.lr, seed=args.seed, timeout=args.timeout, dp=args.dp, loopback=False)
    out = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        out = open(os.path.join(args.out, f"rank{rank}.jsonl"), "w")

    def report(msg):
        if msg["type"] == "step":
            if msg["loss"] is not None:
                loss = msg["loss"] if math.isfinite(msg["loss"]) else None   # JSON has no NaN
                print(json.dumps({"step": msg["step"], "loss": loss, "replica": msg.get("replica", 0),
                                  "step_time": (msg["t_end"] - msg["t0"]) / 1e9}), flush=True)
            if out is not None:
                out.write(json.dumps({k: v for k, v in msg.items() if k != "grads"}) + "\n")
                out.flush()

    run_worker(rank, job, report, local_rank=local)
    import torch.distributed as dist
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
