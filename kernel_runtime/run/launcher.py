"""``launch``: start one worker process per rank from the current process (a notebook cell, the CLI)
and stream what they measure back through a ``RunHandle``.

Workers are torch.multiprocessing "spawn" processes. A monitor thread reads their reports and
watches their sentinels; the first failure (an exception, a signal, an exit) stops every worker
and becomes ``handle.error``, a ``WorkerError`` naming the rank and the action. A bad plan (fails
validation, layer count differs from the model's) is refused before any process starts.
"""
from __future__ import annotations

import os
import queue as _queue
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from flexpipe_ui.ir import Plan, Schedule
from flexpipe_ui.planfile import load_plan, plan_to_dict
from flexpipe_ui.timeline import Timeline
from flexpipe_ui.validate import validate

from .config import LaunchConfig, config_with

__all__ = ["launch", "RunHandle", "StepEvent", "WorkerError", "PlanRefused", "prepare_plans"]


class PlanRefused(ValueError):
    """The plan cannot run on this model/devices; nothing was started."""


class WorkerError(RuntimeError):
    """A worker failed: ``rank``, ``action`` (e.g. "1F3", or None), ``step``, and its traceback."""

    def __init__(self, rank: int, message: str, action: str | None = None, step: int | None = None,
                 traceback: str = "", kind: str = "exception"):
        self.rank, self.action, self.step, self.worker_traceback, self.kind = rank, action, step, traceback, kind
        super().__init__(message)


@dataclass
class StepEvent:
    """One finished training step: mean loss, wall time (s), measured timeline (ms, source="measured")."""

    step: int
    loss: float | None
    step_time: float
    timeline: Timeline
    plan_index: int = 0
    grads: dict | None = None
    rank_times: tuple = ()
    replica_grad_diff: float | None = None
    """With data parallelism and captured gradients: the largest difference between two replicas'
    gradients after the all-reduce (0.0: every replica takes the same optimizer step)."""


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


class RunHandle:
    """A running (or finished) launch. Thread-safe; ``events()`` and ``poll()`` stream StepEvents."""

    def __init__(self, plans: list[Plan], procs, queue, progress, world: int, steps: int, *,
                 beat=None, timeout: float | None = None):
        self.plans, self._procs, self._q, self._progress = plans, procs, queue, progress
        self._beat, self._timeout = beat, timeout
        self.world, self.steps = world, steps
        self.losses: list[float | None] = []
        self.step_times: list[float] = []
        self.timelines: list[Timeline] = []
        self.step_events: list[StepEvent] = []
        self.error: WorkerError | None = None
        self.hosts: dict[int, str] = {}
        self._events: _queue.Queue = _queue.Queue()
        self._done = threading.Event()
        self._stopping = False
        self._pending: dict[tuple[int, int], dict[int, dict]] = {}
        self._finished: set[int] = set()
        self._thread = threading.Thread(target=self._monitor, name="kernel_runtime-monitor", daemon=True)
        self._thread.start()

    # -- public ----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def poll(self, timeout: float | None = 0.0) -> StepEvent | None:
        """The next step event, or None if none arrived within ``timeout`` seconds."""
        try:
            ev = self._events.get(timeout=timeout) if timeout else self._events.get_nowait()
        except _queue.Empty:
            return None
        return ev

    def events(self, timeout: float | None = None) -> Iterator[StepEvent]:
        """Yield step events as they arrive until the run ends (then re-raise a worker error)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ev = self.poll(0.1)
            if ev is not None:
                yield ev
                continue
            if self.done and self._events.empty():
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no end of run within {timeout} s")
        if self.error is not None:
            raise self.error

    def wait(self, timeout: float | None = None) -> "RunHandle":
        """Block until the run ends; re-raise the worker's error; TimeoutError (run left going)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"run not finished after {timeout} s (call stop() to end it)")
        if self.error is not None:
            raise self.error
        return self

    def stop(self, grace: float = 2.0) -> None:
        """End the run now; returns when no worker process is left."""
        self._stopping = True
        self._kill_all(grace)
        self._thread.join(timeout=grace + 5)
        self._done.set()

    def __repr__(self) -> str:
        state = "failed" if self.error else ("done" if self.done else "running")
        return f"RunHandle({state}, ranks={self.world}, steps={len(self.losses)}/{self.steps * len(self.plans)})"

    def _repr_mimebundle_(self, **kw):
        return {"text/plain": repr(self)}

    # -- monitor ---------------------------------------------------------------------------------
    def _kill_all(self, grace: float) -> None:
        for p in self._procs:
            if p.is_alive():
                p.terminate()
        t_end = time.monotonic() + grace
        for p in self._procs:
            p.join(timeout=max(0.0, t_end - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)

    def _progress_of(self, rank: int) -> tuple[str | None, int | None]:
        if self._progress is None:
            return None, None
        ti, step, pos = self._progress[3 * rank: 3 * rank + 3]
        if ti < 0 or pos < 0:
            return None, None
        plan = self.plans[ti]
        order = plan.schedule.order[rank % plan.ranks]
        return (str(order[pos]) if pos < len(order) else None), (step if step >= 0 else None)

    def _fail(self, err: WorkerError) -> None:
        if self.error is None:
            self.error = err
        self._kill_all(1.0)

    def _monitor(self) -> None:
        try:
            self._loop()
        except Exception as e:  # pragma: no cover - a bug in the monitor itself
            self._fail(WorkerError(-1, f"launcher monitor failed: {type(e).__name__}: {e}"))
        finally:
            if any(p.is_alive() for p in self._procs):
                self._kill_all(1.0)
            for p in self._procs:
                p.join(timeout=1)
            try:
                self._q.close()
                self._q.join_thread()
            except Exception:
                pass
            self._done.set()

    def _loop(self) -> None:
        errors: list[dict] = []
        first_error_at = None
        while True:
            try:
                msg = self._q.get(timeout=0.05)
            except _queue.Empty:
                msg = None
            except (EOFError, OSError):
                msg = None
            if msg is not None:
                kind = msg["type"]
                if kind == "ready":
                    self.hosts[msg["rank"]] = msg["host"]
                elif kind == "step":
                    self._on_step(msg)
                elif kind == "done":
                    self._finished.add(msg["rank"])
                elif kind == "error":
                    errors.append(msg)
                    first_error_at = first_error_at or time.monotonic()
                continue
            if self._stopping:
                return
            if not errors:
                hung = self._hung(time.monotonic(), self._timeout)
                if hung is not None:
                    self._fail(hung)
                    return
            if errors and time.monotonic() - first_error_at > 0.3:
                self._fail(self._diagnose(errors))
                return
            if len(self._finished) == self.world and all(p.exitcode is not None for p in self._procs):
                return
            silent = [r for r, p in enumerate(self._procs)
                      if p.exitcode not in (None, 0) and r not in self._finished]
            if silent and not errors:
                time.sleep(0.1)                  # let a last report arrive before judging
                if not self._q.empty():
                    continue
                self._fail(self._diagnose(errors))
                return
            if all(p.exitcode is not None for p in self._procs) and self._q.empty():
                if errors or len(self._finished) < self.world:
                    self._fail(self._diagnose(errors))
                return

    def _hung(self, now: float, limit: float | None, reason: str = "") -> WorkerError | None:
        """The rank that has been computing one action longest, if longer than ``limit`` seconds
        (the watchdog: it also catches hangs that no receive timeout sees, e.g. on one rank)."""
        if self._beat is None or limit is None:
            return None
        stuck = [(now - self._beat[2 * r + 1], r) for r in range(self.world)
                 if self._beat[2 * r] == 1.0 and r not in self._finished and self._procs[r].exitcode is None]
        stuck = [(t, r) for t, r in stuck if t > limit]
        if not stuck:
            return None
        t, r = max(stuck)
        action, step = self._progress_of(r)
        return WorkerError(r, f"rank {r} hung in action {action} of step {step}: it has been computing for "
                              f"{t:.1f} s, beyond the timeout of {self._timeout:g} s{reason}", action, step, "", "hang")

    def _diagnose(self, errors: list[dict]) -> WorkerError:
        """The failure that started it: a worker's own exception, else a worker that died without
        reporting (signal), else a rank stuck in compute that the others timed out waiting for, else
        the earliest communication error."""
        reported = {m["rank"] for m in errors}
        if any(not m["comm"] for m in errors):
            return _root_cause(errors)
        for rank, p in enumerate(self._procs):
            p.join(timeout=0.05)
            if p.exitcode not in (None, 0) and rank not in reported and rank not in self._finished:
                action, step = self._progress_of(rank)
                how = (f"was killed by signal {-p.exitcode}" if p.exitcode < 0
                       else f"exited with code {p.exitcode}")
                where = f" during action {action} of step {step}" if action else ""
                hint = " (SIGKILL: killed, or the kernel's OOM killer)" if p.exitcode == -9 else ""
                return WorkerError(rank, f"rank {rank} {how}{where}{hint}", action, step, "",
                                   "killed" if p.exitcode < 0 else "exit")
        if errors:
            first = min(errors, key=lambda m: m["time"])
            cause = _root_cause(errors)
            if self._timeout is not None:   # a peer's receive timed out first: is someone stuck computing?
                hung = self._hung(first["time"], self._timeout / 2,
                                  f"; rank {cause.rank} timed out waiting for it at {cause.action} ({cause})")
                if hung is not None:
                    return hung
            return cause
        missing = sorted(set(range(self.world)) - self._finished)
        return WorkerError(missing[0] if missing else -1, f"ranks {missing} exited without finishing")

    def _on_step(self, msg: dict) -> None:
        key = (msg["task"], msg["step"])
        got = self._pending.setdefault(key, {})
        got[msg["rank"]] = msg
        if len(got) < self.world:
            return
        del self._pending[key]
        plan = self.plans[msg["task"]]
        same_host = len(set(self.hosts.values())) <= 1
        recs = []
        for r, m in got.items():
            if m.get("replica", 0) != 0:            # the timeline shows replica 0's pipeline
                continue
            shift = 0 if same_host else m["t0"]     # other machines: align at the step's barrier
            recs += [(m.get("prank", r), a, (s - shift) / 1e6, (e - shift) / 1e6) for a, s, e in m["records"]]
        t_min = min((s for _, _, s, _ in recs), default=0.0)
        recs = [(r, a, s - t_min, e - t_min) for r, a, s, e in recs]
        tl = Timeline.from_records(plan.ranks, recs, source="measured", schedule=plan.schedule)
        if all(m.get("peak_mem") is not None for m in got.values()):
            from dataclasses import replace
            tl = replace(tl, peak_memory_measured=tuple(float(got[r]["peak_mem"]) for r in sorted(got)))
        tl.meta.update(step=msg["step"], plan_index=msg["task"], units="ms")
        t0 = min(m["t0"] for m in got.values())
        t1 = max(m["t_end"] for m in got.values())
        step_time = (t1 - t0) / 1e9 if same_host else max(m["t_end"] - m["t0"] for m in got.values()) / 1e9
        losses = [m["loss"] for m in got.values() if m["loss"] is not None]   # one per replica
        loss = sum(losses) / len(losses) if losses else None
        grads, spread = None, None
        if any(m["grads"] is not None for m in got.values()):
            grads, others = {}, []
            for m in got.values():
                if m.get("replica", 0) == 0:
                    grads.update(m["grads"] or {})
                else:
                    others.append(m["grads"] or {})
            if others:
                import numpy as np
                spread = max((float(np.abs(o[k] - grads[k]).max()) for o in others for k in o), default=0.0)
        ev = StepEvent(msg["step"], loss, step_time, tl, msg["task"], grads,
                       tuple((m["t_end"] - m["t0"]) / 1e9 for _, m in sorted(got.items())), spread)
        self.losses.append(loss)
        self.step_times.append(step_time)
        self.timelines.append(tl)
        self.step_events.append(ev)
        self._events.put(ev)


def _root_cause(errors: list[dict]) -> WorkerError:
    """The error that started it: a non-communication error if any, else the earliest."""
    errors = sorted(errors, key=lambda m: m["time"])
    pick = next((m for m in errors if not m["comm"]), errors[0])
    kind = "oom" if pick["oom"] else ("comm" if pick["comm"] else "exception")
    text = pick["message"]
    if pick["oom"]:
        text = f"out of memory: {text}"
    others = sorted({m["rank"] for m in errors} - {pick["rank"]})
    if others:
        text += f" (then ranks {others} failed too)"
    return WorkerError(pick["rank"], text, pick["action"], pick["step"], pick["traceback"], kind)


def launch(plan, *, model=None, data=None, config: LaunchConfig | None = None, **fields) -> RunHandle:
    """Start the workers for ``plan`` (a Plan, Schedule, plan file, or a list of them run in turn)
    and return at once with a ``RunHandle``.

    ``model``: None/"demo-gpt", a ``ModelSpec``, an ``nn.Sequential``/list of layers (with
    ``loss_fn``) or a picklable factory returning one. ``data``: None (synthetic), ``(x, y)``, a
    list of them, or a picklable ``step -> (x, y)``. ``config``: a ``LaunchConfig`` (steps,
    devices, optimizer, timing, handlers, ...); keyword ``fields`` override its fields by name.
    ``dp`` (a LaunchConfig field): data-parallel replicas; world = ranks x dp processes, pipeline
    rank r of replica d is global rank d * ranks + r (``kernel_runtime.dp``). With fewer GPUs than
    processes they share GPUs, messages staged through host memory (a warning says timings are not
    representative). ``config.timeout`` bounds a receive and one action's compute: past it the
    run stops and the error names the stuck rank and action (the launcher's watchdog).
    """
    cfg = config_with(config, **fields)
    from ..models.hf import as_model
    model = as_model(model)                  # a Hugging Face model object → its ModelSpec
    import torch
    import torch.multiprocessing as tmp

    from ..models import as_spec

    if isinstance(cfg.steps, bool) or not isinstance(cfg.steps, int) or cfg.steps < 1:
        raise PlanRefused(f"steps must be an integer >= 1, got {cfg.steps!r}")
    import math
    from flexpipe_ui.limits import MAX_TIMEOUT
    timeout = cfg.timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 < timeout <= MAX_TIMEOUT:
        raise PlanRefused(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}], got {timeout!r}")
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
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise PlanRefused(f"dp must be an integer >= 1 (data-parallel replicas), got {dp!r}")
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
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    progress = ctx.Array("i", [-1] * (3 * world), lock=False)
    beat = ctx.Array("d", [0.0] * (2 * world), lock=False)   # per rank: computing?, since (monotonic)
    from .worker import worker_main
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
    return RunHandle(plans, procs, q, progress, world, cfg.steps, beat=beat, timeout=timeout)


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
