"""Profiler: what execution costs, measured into a ``flexpipe-problem/1``.

``profile`` starts one worker process per rank (``run.startup``, as ``launch`` starts its workers:
same allocator settings, CPU share and thread count) and every worker times every layer at the
same time, so each measurement sees what a pipelined step sees: the other ranks computing on the
same cores and memory. Per layer it measures F, I, W and a fused B through the executor's own
handlers in steady state, and what an action pays after another stage's (``switch``;
``profile_time``), the activation it holds (``act``), what is still held after I (``act_w``), the
bytes it sends onward (``out``), its gradients (``grad``) and its static memory (``mem``:
parameters + gradients + optimizer state). Once per run it measures the fixed cost of an action
(``overhead``, taken off every layer's time) and, between ranks 0 and 1 over the real backend,
latency (``comm``), ``bandwidth`` and ``comm_cpu`` (``profile_comm``); then the executor probe
(``_executor_probe``) runs ``PROBE_PLAN`` for a few steps and reads the executor's own time
between actions and its message waits. Each figure is the median over repetitions (after
warm-up, layers in rotated order), averaged over the workers. Units: ms and MiB.

The probe's measurements become the problem's layer fields by name (``profile_time.UnitTimes``;
see ``assemble``). Fitting a problem to measured runs is ``flexpipe_ui.calibrate``, not here.
"""
from __future__ import annotations

import os
import statistics
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flexpipe_ui.problem import Problem, save_problem

from .assemble import _assemble, _combine, context_groups
from .config import ProfileConfig, profile_config

__all__ = ["profile", "ProfileConfig", "ProfileError", "PROBE_PLAN"]

_MIB = float(2 ** 20)


class ProfileError(RuntimeError):
    """A profiling worker failed or did not answer; the message names the rank."""


@dataclass
class _ProfileJob:
    """What a profiling worker needs (picklable)."""

    model: Any
    loss_fn: Any
    sample_input: Any
    targets: Any
    microbatches: int
    device: str
    dtype: str
    repeats: int
    warmup: int
    seed: int
    threads: int | None
    units: list = field(default_factory=list)
    world: int = 1
    port: int = 29500
    spawned: bool = True
    pin_cpus: bool = True
    ranks: int = 2
    max_repeats: int | None = None
    tolerance: float = 0.03


def _sample(spec, job: _ProfileJob):
    import torch
    x, tgt = job.sample_input, job.targets
    if x is None:
        gen = torch.Generator().manual_seed(job.seed)
        x, tgt = spec.batch(0, max(1, spec.batch_size // job.microbatches), gen)
    if tgt is None:
        raise ValueError("profile needs targets for the loss of the last layer (targets=...)")
    return x, tgt


def _measure(job: _ProfileJob, rank: int, between=None) -> dict:
    """Time every layer (and the extra units) in this process; plain numbers out."""
    import torch

    from ..models import as_spec
    from .profile_comm import measure_comm
    from .profile_time import action_overhead, time_units
    from ..run.worker import _dtype
    spec = as_spec(job.model, job.loss_fn)
    dt = _dtype(job.dtype) if isinstance(job.dtype, str) else job.dtype
    dev = torch.device(job.device, rank % max(1, torch.cuda.device_count())) \
        if job.device == "cuda" else torch.device(job.device)
    x, tgt = _sample(spec, job)
    cast = lambda t: (t.to(dev, dt) if t.is_floating_point() else t.to(dev))
    x, tgt = cast(x), cast(tgt)
    layers = spec.layers(range(spec.num_layers), job.seed, device=dev, dtype=dt)
    singles = [(i,) for i in range(spec.num_layers)]
    extra = [tuple(u) for u in job.units if len(u) > 1]
    extra += [g for g in context_groups(spec.num_layers, job.ranks) if g not in extra]
    t = time.perf_counter()
    noise: dict = {}
    times = time_units(layers, singles + extra, x, tgt, spec.loss_fn, repeats=job.repeats,
                       warmup=job.warmup, device=dev, between=between, ranks=job.ranks,
                       max_repeats=job.max_repeats, tolerance=job.tolerance, agree=_agree(job), report=noise)
    from .profile_memory import unit_temps
    temps = unit_temps(layers, singles, x, tgt, spec.loss_fn, dev)
    overhead = action_overhead(dev, dt)
    comm = None
    if job.world > 1:
        import torch.distributed as dist
        c = measure_comm(rank, dev, staged=dev.type == "cuda" and dist.get_backend() != "nccl")
        comm = None if c is None else {"latency": c.latency, "bandwidth": c.bandwidth,
                                       "comm_cpu": c.comm_cpu, "samples": c.samples}
    params = [[p.numel() * p.element_size() for p in l.parameters()] for l in layers]
    grads = [sum(p.numel() * p.element_size() for p in l.parameters() if p.requires_grad) for l in layers]
    out = {"units": {u: vars(v) for u, v in times.items()}, "temps": {u[0]: t for u, t in temps.items()},
           "overhead": overhead, "comm": comm,
           "params": [sum(p) for p in params], "names": [_layer_name(spec, l, i) for i, l in enumerate(layers)],
           "data": [x.numel() * x.element_size(), tgt.numel() * tgt.element_size()],
           "grads": grads,
           "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t,
           "model": spec.name, "device": str(dev), "dtype": str(dt), "torch": torch.__version__,
           "noise": noise}
    del layers, x, tgt, times
    out["runtime_mem"] = _runtime_memory(dev)
    out["copy_bandwidth"] = _copy_bandwidth(dev)
    return out


def _copy_bandwidth(dev, mib: int = 64, repeats: int = 5) -> float | None:
    """Bytes per ms of a device → pinned host copy and back (the offload kinds' copies, on a side
    stream in the runtime), the median of ``repeats``, the slower direction; None on CPU, where
    the runtime's offload moves nothing (the activation already lives in host memory)."""
    if dev.type != "cuda":
        return None
    import torch
    n = mib * 2 ** 20
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    rates = []
    for _ in range(repeats):
        for a, b in ((host, src), (src, host)):
            torch.cuda.synchronize(dev)
            t = time.perf_counter()
            a.copy_(b, non_blocking=True)
            torch.cuda.synchronize(dev)
            rates.append(n / ((time.perf_counter() - t) * 1e3))
    del src, host
    return float(min(statistics.median(rates[0::2]), statistics.median(rates[1::2])))


def _agree(job: _ProfileJob):
    """With several workers: ``done`` only when every worker is done (they time in lockstep)."""
    if job.world <= 1:
        return None

    def agree(done: bool) -> bool:
        import torch
        import torch.distributed as dist
        flag = torch.tensor([1 if done else 0], dtype=torch.int32)
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())
    return agree


def _runtime_memory(dev) -> float:
    """Bytes still allocated on the device once every tensor the profiler made is gone: what the
    libraries keep for themselves (cuBLAS and cuBLASLt workspaces: 65 MiB a process on an H200
    with torch 2.11), part of every rank's peak (CUDA's ``max_memory_allocated``). 0 on CPU,
    where a run's figure counts the plan's own allocations only (``procmem``)."""
    if dev.type != "cuda":
        return 0.0
    import gc

    import torch
    gc.collect()
    torch.cuda.synchronize(dev)
    return float(torch.cuda.memory_allocated(dev))


def _profile_worker(rank: int, job: _ProfileJob, queue) -> None:
    """Spawned entry point: start as every worker starts (``run.startup``: allocator, CPU share,
    threads, loopback; the group if several), measure, report to the queue."""
    try:
        import torch.distributed as dist
        import torch

        from ..run.startup import ProcessStart, start_process
        # as the launcher: NCCL with a GPU per process; processes sharing GPUs talk over gloo
        # through host memory (NCCL refuses two ranks on one device)
        nccl = job.device == "cuda" and torch.cuda.device_count() >= job.world
        start_process(ProcessStart(rank=rank, world=job.world, device=job.device,
                                   backend="nccl" if nccl else "gloo", local_world=job.world,
                                   threads=job.threads, pin_cpus=job.pin_cpus, timeout=300.0,
                                   master_port=job.port, group=job.world > 1))
        between = (lambda rep: dist.barrier()) if job.world > 1 else None
        res = _measure(job, rank, between)
        if job.world > 1:
            dist.barrier()
            dist.destroy_process_group()
        queue.put({"rank": rank, "ok": True, "result": res})
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        queue.put({"rank": rank, "ok": False, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()})


def _run_workers(job: _ProfileJob, timeout: float) -> list[dict]:
    import queue as _queue

    import torch.multiprocessing as tmp

    from ..run.launcher import _free_port
    job.port = _free_port()
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_profile_worker, args=(r, job, q), daemon=True,
                         name=f"kernel_runtime-profile{r}") for r in range(job.world)]
    for p in procs:
        p.start()
    got: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < job.world:
            try:
                msg = q.get(timeout=0.2)
            except _queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in got]
                if dead:
                    raise ProfileError(f"profiling worker {dead[0]} died (exit code {procs[dead[0]].exitcode})")
                if time.monotonic() > deadline:
                    raise ProfileError(f"profiling did not finish within {timeout:g} s")
                continue
            if not msg["ok"]:
                raise ProfileError(f"profiling worker {msg['rank']} failed: {msg['error']}\n{msg['traceback']}")
            got[msg["rank"]] = msg["result"]
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return [got[r] for r in range(job.world)]


def profile(model: Any = None, sample_input=None, *, targets=None, path: str | Path | None = None,
            config: ProfileConfig | None = None, **fields) -> Problem:
    """Measure ``model`` (what ``launch`` takes) into a ``flexpipe-problem/1`` (ms and MiB).

    One worker process per rank (``processes``, default ``ranks``; each started as ``launch``
    starts its workers) times every layer at the same time as the others, so each figure sees what
    a pipelined step sees. Per layer, on one microbatch (the model's batch / ``microbatches``, or
    ``sample_input`` with ``targets``): F, I, W and a fused B through the executor's own handlers
    in steady state (``f``, ``b``, ``w``, ``bw``), the time an action pays after another stage's
    (``switch``), the activation held after F and after I (``act``, ``act_w``), the bytes sent on
    (``out``), the gradients (``grad``) and the static memory (``mem``); per run: the handlers'
    fixed cost (``overhead``), latency, ``bandwidth`` and ``comm_cpu`` between two workers, and,
    with the executor probe, the executor's own time between actions and its message waits in a
    short pipelined run. Each figure is the median over ``repeats`` (more, up to ``max_repeats``,
    while the machine's speed moves by more than ``tolerance``; ``meta["noise"]``), averaged over
    the workers.

    Settings are ``config`` (a ``ProfileConfig``) and/or its fields as keywords. It measures and
    nothing else: fitting a problem to measured runs is ``flexpipe_ui.calibrate``, searching
    and re-planning ``tune``. Writes the problem to ``path`` if given.
    """
    cfg = profile_config(config, fields)
    ranks, device = cfg.ranks, cfg.device
    nproc = ranks if cfg.processes is None else int(cfg.processes)
    threads = cfg.threads
    if threads is None and device == "cpu":
        threads = max(1, (os.cpu_count() or 1) // max(1, ranks))
    dtype = cfg.dtype if isinstance(cfg.dtype, str) else str(cfg.dtype).removeprefix("torch.")
    job = _ProfileJob(model, cfg.loss_fn, sample_input, targets, cfg.microbatches, device, dtype,
                      int(cfg.repeats), int(cfg.warmup), cfg.seed, threads, [tuple(s) for s in cfg.stages],
                      max(1, nproc), spawned=nproc > 0, ranks=max(1, int(ranks)),
                      max_repeats=int(cfg.max_repeats) if cfg.max_repeats is not None else 2 * int(cfg.repeats),
                      tolerance=float(cfg.tolerance))
    if nproc <= 0:
        results = [_measure_here(job, threads)]
    else:
        from ..run.launcher import PlanRefused, _check_sendable
        try:
            _check_sendable(job)
        except PlanRefused as e:
            import warnings
            warnings.warn(f"profiling in this process, without the other ranks' contention or a "
                          f"communication measurement: {e}", stacklevel=2)
            return profile(model, sample_input, targets=targets, path=path,
                           config=replace(cfg, threads=threads, processes=0))
        results = _run_workers(job, cfg.timeout)
    prob = _assemble(_combine(results), job, ranks=ranks, optimizer=cfg.optimizer, comm=cfg.comm,
                     memory_limit=cfg.memory_limit, path=None, dp=int(cfg.dp), dp_bandwidth=cfg.dp_bandwidth)
    if cfg.executor_probe and nproc >= 2 and ranks >= 2 and sample_input is None:
        prob = _executor_probe(prob, model, cfg.loss_fn, device=device, dtype=job.dtype,
                               threads=threads, timeout=cfg.timeout, keep_comm=cfg.comm is not None)
    _say_noise(prob.meta.get("noise") or {}, job)
    if path is not None:
        save_problem(prob, path)
    return prob


class ProfileNoiseWarning(UserWarning):
    """The machine moved more while it was profiled than ``tolerance``, even at ``max_repeats``."""


def _say_noise(noise: dict, job) -> None:
    """Warn when the repetitions ran out before the machine was steady enough: how far its speed
    moved (``drift``) and how far the medians could move in another profile (``error``)."""
    moved, error = noise.get("drift", 0.0) or 0.0, noise.get("error", 0.0) or 0.0
    if moved <= job.tolerance and error <= job.tolerance / 2:
        return
    import warnings
    over = [f"its speed moved {moved:.2%} over them (tolerance {job.tolerance:.2%})"] if moved > job.tolerance else []
    if error > job.tolerance / 2:
        over.append(f"the medians could be {error:.2%} off in another profile (tolerance "
                    f"{job.tolerance / 2:.2%})")
    warnings.warn(f"profile: this machine is noisy: after {noise.get('repeats')} repetitions (max_repeats="
                  f"{job.max_repeats}) {' and '.join(over)}; the profile's figures may be that far off. "
                  f"Profile on a quieter machine, or allow more repetitions", ProfileNoiseWarning, stacklevel=3)


def _measure_here(job: _ProfileJob, threads: int | None) -> dict:
    """``_measure`` in this process, with ``threads`` torch threads for its duration."""
    import torch
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        return _measure(job, 0)
    finally:
        torch.set_num_threads(old)


PROBE_PLAN = "gpipe"
"""The schedule of the executor probe: one that benchmarks compare against nothing (bench_truth's
plans are 1F1B, ZB-H1, interleaved 1F1B, ZB-V and auto's)."""


def _executor_probe(prob: Problem, model, loss_fn, *, device: str, dtype: str, threads, timeout: float,
                    keep_comm: bool) -> Problem:
    """The executor's fixed costs, measured in a short pipelined run of the real model.

    The handlers' fixed part (``overhead``) and the ping-pong latency miss what the executor does
    between two actions (posting a step's sends and receives, waking on a message, bookkeeping):
    in bench_truth's runs 0.13-0.28 ms per action, and waits on cross-rank messages of ~0.25 ms
    beyond their transfer where ping-pong said 0.04 (docs/cost_model.md, "Between actions"). Two
    steps of ``PROBE_PLAN`` (after one warm-up) measure them as ``calibrate`` does
    (``calibrate._fit_comm``): the median time between two actions that did not wait, added to
    every kind's overhead, and the median wait beyond transfer on cross-rank dependencies, as
    ``comm`` (kept as given when the caller fixed it). Only these two plan-independent numbers
    are taken from the run; every layer's cost stays the profile's."""
    from flexpipe_ui.calibrate import fit_comm, kind_overhead
    from flexpipe_ui.library import build_named

    from ..run.launcher import launch
    plan = build_named(PROBE_PLAN, prob)
    kw = dict(devices="cuda" if device == "cuda" else "cpu", timeout=timeout, dtype=dtype)
    if threads:
        kw["threads"] = threads
    if loss_fn is not None:
        kw["loss_fn"] = loss_fn
    h = launch(plan, model=model, steps=3, **kw)          # 1 warm-up step, 2 read
    h.wait()
    tls = [ev.timeline for ev in h.step_events if ev.step >= 1]
    # the median wait: GPipe's ranks idle long between its phases and wake slowly from that,
    # which the plans it stands for do not (their mean would be the probe's tail)
    wait, loop = fit_comm([(plan, tls)], prob, wait_stat=statistics.median)
    ov = {k: v + loop for k, v in kind_overhead(prob).items()}
    meta = dict(prob.meta)
    meta["executor_probe"] = {"plan": PROBE_PLAN, "steps": len(tls), "loop_gap": float(loop),
                              "comm_wait": float(wait), "comm_pingpong": float(prob.comm)}
    return prob.with_(overhead=ov, meta=meta, comm=prob.comm if keep_comm else float(wait))


def _layer_name(spec, layer, i: int) -> str:
    """The layer's module names for a ``split_module`` spec ("blocks.3", "norm+head"), else its class
    and index ("block3")."""
    names = spec.meta.get("layer_names") if isinstance(getattr(spec, "meta", None), dict) else None
    if names and i < len(names):
        return "+".join(names[i])
    return f"{type(layer).__name__.lower()}{i}"
