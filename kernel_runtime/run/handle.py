"""``RunHandle``: a running (or finished) launch, and what it streams back.

A monitor thread reads the workers' reports and watches their sentinels; each step's reports from
every rank become one ``StepEvent`` (the measured ``Timeline``, loss, step time, peak memory). The
first failure (an exception, a signal, an exit, a hang the watchdog sees) stops every worker and
becomes ``handle.error``, a ``WorkerError`` naming the rank and the action.
"""
from __future__ import annotations

import queue as _queue
import threading
import time
from dataclasses import dataclass, replace
from typing import Iterator

from flexpipe_ui.ir import Plan
from flexpipe_ui.timeline import Timeline

__all__ = ["RunHandle", "StepEvent", "WorkerError"]


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
        peaks = {k: [got[r].get(f"peak_{k}") for r in sorted(got)] for k in ("mem", "tracked", "rss")}
        if None not in peaks["mem"]:
            tl = replace(tl, peak_memory_measured=tuple(map(float, peaks["mem"])))
        tl.meta.update({f"peak_memory_{k}": v for k, v in peaks.items() if k != "mem" and None not in v},
                       step=msg["step"], plan_index=msg["task"], units="ms")
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
