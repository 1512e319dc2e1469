"""``launch``: start one worker process per rank from the current process (a notebook cell, the CLI)
and stream what they measure back through a ``RunHandle`` (``handle``).

Workers are torch.multiprocessing "spawn" processes (``worker.worker_main``). A bad plan (fails
validation, layer count differs from the model's, a kind the runtime cannot execute) is refused
with ``PlanRefused`` before any process starts, as is a model that cannot be sent to them.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Callable, Mapping

from flexpipe_ui.ir import Plan, Schedule
from flexpipe_ui.planfile import load_plan, plan_to_dict
from flexpipe_ui.validate import validate

from .config import LaunchConfig, config_with
from .handle import RunHandle, StepEvent, WorkerError

__all__ = ["launch", "RunHandle", "StepEvent", "WorkerError", "PlanRefused", "prepare_plans"]


class PlanRefused(ValueError):
    """The plan cannot run on this model/devices; nothing was started."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_plan(p) -> Plan:
    if isinstance(p, (str, Path)):
        return load_plan(p)
    if isinstance(p, Schedule):
        return Plan(p)
    if isinstance(p, Plan):
        return p
    raise PlanRefused(f"plan must be a Plan, Schedule or path to a flexpipe-plan/1 file, not {type(p).__name__}")


def prepare_plans(plan, spec_layers: int | None, handlers: Mapping[str, Callable] | None = None) -> list[Plan]:
    """Validate plans and check them against the model's layer count and the kinds the runtime
    can execute (``executor.DEFAULT_HANDLERS`` and ``handlers``); raise ``PlanRefused``."""
    from flexpipe_ui.problem import even_partition
    plans = [_as_plan(p) for p in (plan if isinstance(plan, (list, tuple)) else [plan])]
    if not plans:
        raise PlanRefused("no plan given")
    out = []
    for i, p in enumerate(plans):
        name = p.meta.get("name", f"plan {i}") if p.meta else f"plan {i}"
        try:
            validate(p.schedule)
        except ValueError as e:
            raise PlanRefused(f"{name} fails validation, nothing was started:\n{e}") from None
        from .executor import DEFAULT_HANDLERS
        unknown = sorted(p.schedule.kinds_used() - set(DEFAULT_HANDLERS) - set(handlers or {}))
        if unknown:
            raise PlanRefused(f"{name} uses kinds {unknown} that the runtime cannot execute; give a "
                              "handler: launch(..., handlers={kind: fn})")
        if p.partition is None and spec_layers is not None:
            if spec_layers < p.schedule.num_stages:
                raise PlanRefused(f"{name} has {p.schedule.num_stages} stages but the model has only "
                                  f"{spec_layers} layers")
            p = Plan(p.schedule, even_partition(spec_layers, p.schedule.num_stages), p.meta)
        if spec_layers is not None and p.num_layers != spec_layers:
            raise PlanRefused(f"{name}'s partition covers {p.num_layers} layers but the model has "
                              f"{spec_layers}: re-plan for this model (layers one to one)")
        if p.ranks != plans[0].ranks:
            raise PlanRefused(f"all plans of one launch need the same ranks ({plans[0].ranks}); {name} "
                              f"has {p.ranks}")
        out.append(p)
    return out


def launch(plan, *, model=None, data=None, config: LaunchConfig | None = None, **fields) -> RunHandle:
    """Start the workers for ``plan`` (a Plan, Schedule, plan file, or a list of them run in turn)
    and return at once with a ``RunHandle``.

    ``model``: None/"demo-gpt", a ``ModelSpec``, an ``nn.Sequential``/list of layers (with
    ``loss_fn``) or a picklable factory returning one. ``data``: None (synthetic), ``(x, y)``, a
    list of them, or a picklable ``step -> (x, y)``. ``config``: a ``LaunchConfig`` (steps,
    devices, optimizer, timing, handlers, ...); keyword ``fields`` override its fields by name.
    ``dp`` (a LaunchConfig field): data-parallel replicas; world = ranks x dp processes, pipeline
    rank r of replica d is global rank d * ranks + r (``kernel_runtime.run.dp``). With fewer GPUs than
    processes they share GPUs, messages staged through host memory (a warning says timings are not
    representative). ``config.timeout`` bounds a receive and one action's compute: past it the
    run stops and the error names the stuck rank and action (the launcher's watchdog).
    """
    cfg = config_with(config, **fields)
    from ..models.hf import as_model
    model = as_model(model)                  # a Hugging Face model object → its ModelSpec
    import torch

    from ..models import as_spec

    _check_config(cfg)
    probe = [_as_plan(p) for p in (plan if isinstance(plan, (list, tuple)) else [plan])]
    n_layers = probe[0].num_layers or None
    timed = cfg.timed
    if n_layers is None and model in (None, "demo-gpt") and timed in (False, None):
        n_layers = max(6, probe[0].schedule.num_stages)
    if timed is not False and timed is not None:
        spec = as_spec(None, None, num_layers=n_layers or probe[0].schedule.num_stages, timed=timed)
    else:
        spec = as_spec(model, cfg.loss_fn, num_layers=n_layers)
    plans = prepare_plans(probe, spec.num_layers, cfg.handlers)
    dp = cfg.dp
    world = plans[0].ranks * dp
    if data is None and spec.batch is not None:
        bad = [p.microbatches for p in plans if spec.batch_size % (p.microbatches * dp)]
        if bad:
            raise PlanRefused(f"{spec.name}'s batch of {spec.batch_size} does not split into {dp} replica(s) x "
                              f"{bad[0]} microbatches: use a batch size divisible by {bad[0] * dp}")
    dev, backend = _devices(cfg.devices, world)
    dtype = cfg.dtype
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    from .worker import Job, Task, kind_fields
    # the plans carry their kinds: a user kind need not be registered in this process
    user_kinds = {a.kind.name: a.kind for p in plans for _, _, a in p.schedule.actions() if not a.kind.builtin}
    threads = cfg.threads
    if threads is None and dev == "cpu":
        threads = max(1, (os.cpu_count() or 1) // world)
    job = Job(tasks=[Task(plan_to_dict(p), cfg.steps, cfg.capture_grads) for p in plans], world=world,
              model=model, loss_fn=cfg.loss_fn, data=data, timed=timed, device=dev, backend=backend,
              dtype=dtype, lr=cfg.lr, optimizer=cfg.optimizer, seed=cfg.seed, timeout=cfg.timeout,
              threads=threads, pin_cpus=cfg.pin_cpus, master_port=_free_port(), handlers=dict(cfg.handlers),
              kinds=[kind_fields(user_kinds[k]) for k in sorted(user_kinds)], dp=dp)
    _check_sendable(job)
    procs, q, progress, beat = _spawn(job, world)
    return RunHandle(plans, procs, q, progress, world, cfg.steps, beat=beat, timeout=cfg.timeout)


def _check_config(cfg: LaunchConfig) -> None:
    """Refuse a steps, timeout or dp value no run can have (``PlanRefused``)."""
    import math

    from flexpipe_ui.limits import MAX_TIMEOUT
    if isinstance(cfg.steps, bool) or not isinstance(cfg.steps, int) or cfg.steps < 1:
        raise PlanRefused(f"steps must be an integer >= 1, got {cfg.steps!r}")
    timeout = cfg.timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 < timeout <= MAX_TIMEOUT:
        raise PlanRefused(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {timeout!r}")
    dp = cfg.dp
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise PlanRefused(f"dp must be an integer >= 1 (data-parallel replicas), got {dp!r}")


def _spawn(job, world: int):
    """Start ``world`` worker processes for ``job``: (processes, report queue, progress array,
    heartbeat array); none is left running if one fails to start."""
    import torch.multiprocessing as tmp

    from .worker import worker_main
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    progress = ctx.Array("i", [-1] * (3 * world), lock=False)
    beat = ctx.Array("d", [0.0] * (2 * world), lock=False)   # per rank: computing?, since (monotonic)
    procs = []
    try:
        for r in range(world):
            p = ctx.Process(target=worker_main, args=(r, job, q, progress, beat), daemon=True,
                            name=f"kernel_runtime-rank{r}")
            p.start()
            procs.append(p)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return procs, q, progress, beat


def _check_sendable(job) -> None:
    """Refuse, before starting anything, what spawned workers could not receive."""
    import pickle
    import sys
    try:
        blob = pickle.dumps(job)
    except Exception as e:
        raise PlanRefused(f"the model, loss or data cannot be sent to worker processes ({e}): use "
                          "module-level functions and classes, not lambdas or local functions") from None
    main = sys.modules.get("__main__")
    if b"__main__" in blob and not getattr(main, "__file__", None):
        raise PlanRefused("the model, loss or data refers to something defined in this notebook/console "
                          "(__main__), which spawned workers cannot import: move it into a .py module "
                          "(or pass an nn.Sequential of standard layers)")


def _devices(devices, world: int) -> tuple[str, str]:
    """("cpu", "gloo") or ("cuda", "nccl"); checks there are enough GPUs."""
    import torch
    if devices == "cpu":
        return "cpu", "gloo"
    if devices == "cuda" or isinstance(devices, int):
        if not torch.cuda.is_available():
            raise PlanRefused("devices='cuda' but torch.cuda.is_available() is False: use devices='cpu'")
        n = torch.cuda.device_count() if devices == "cuda" else min(int(devices), torch.cuda.device_count())
        if n < 1:
            raise PlanRefused(f"devices={devices!r}: no GPU to use")
        if n < world:
            import warnings
            warnings.warn(f"{world} processes share {n} GPU(s): messages are staged through host memory "
                          "over gloo; results are exact but timings are not representative", stacklevel=3)
            return "cuda", "gloo"
        return "cuda", "nccl"
    raise PlanRefused(f"devices must be 'cpu', 'cuda' or a GPU count, not {devices!r}")
