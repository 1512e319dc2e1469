"""Profiler and calibration: measured costs become a ``flexpipe-problem/1``.

``profile`` times every layer of a model on the current device, one microbatch at a time: forward
(f), input-gradient backward (b, the runtime's I) and weight-gradient backward (w, the runtime's
W), with the same split backward the executor runs, and counts the activation bytes autograd
saves (activation memory) and the parameter/gradient/optimizer bytes (static memory).
``calibrate`` reads measured timelines of a run back into per-layer costs and the cross-rank
latency, so the simulator can be re-fitted to what actually happened.
Units: milliseconds and MiB.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from flexpipe_ui.ir import Plan
from flexpipe_ui.problem import Layer, Problem, even_partition, save_problem
from flexpipe_ui.timeline import Timeline

__all__ = ["profile", "calibrate", "CalibrationError"]

_MIB = float(2 ** 20)


class CalibrationError(ValueError):
    """Timelines that cannot be read back into a problem (wrong plan, missing actions)."""


def _sync(device) -> None:
    import torch
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device) -> float:
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return (time.perf_counter() - t) * 1e3, out


def profile(model: Any = None, sample_input=None, *, targets=None, loss_fn=None, ranks: int = 1,
            microbatches: int = 1, device: str = "cpu", dtype: str = "float32", repeats: int = 5,
            warmup: int = 1, optimizer: str = "sgd", seed: int = 0, path: str | Path | None = None,
            comm: float = 0.0, memory_limit: float | None = None, threads: int | None = None) -> Problem:
    """Measure per-layer f, b, w (ms, medians of ``repeats``), act and mem (MiB) of one microbatch.

    ``model`` is what ``launch`` takes; ``sample_input``/``targets`` one microbatch (default: the
    model's synthetic batch divided by ``microbatches``). Writes the problem to ``path`` if given.
    ``threads``: CPU threads to time with (a worker of ``launch`` gets cores // ranks); on a busy
    machine, more threads than free cores makes every kernel wait for its slowest thread.
    """
    import torch
    if threads is not None:
        old = torch.get_num_threads()
        torch.set_num_threads(int(threads))
        try:
            return profile(model, sample_input, targets=targets, loss_fn=loss_fn, ranks=ranks,
                           microbatches=microbatches, device=device, dtype=dtype, repeats=repeats,
                           warmup=warmup, optimizer=optimizer, seed=seed, path=path, comm=comm,
                           memory_limit=memory_limit)
        finally:
            torch.set_num_threads(old)

    from .executor import stage_forward
    from .models import as_spec
    from .split_backward import backward_input, backward_weight
    from .worker import _dtype

    spec = as_spec(model, loss_fn)
    dt = _dtype(dtype) if isinstance(dtype, str) else dtype
    dev = torch.device(device)
    if sample_input is None:
        gen = torch.Generator().manual_seed(seed)
        bs = max(1, spec.batch_size // microbatches)
        sample_input, targets = spec.batch(0, bs, gen)
    if targets is None:
        raise ValueError("profile needs targets for the loss of the last layer (targets=...)")
    cast = lambda t: (t.to(dev, dt) if t.is_floating_point() else t.to(dev))
    x, tgt = cast(sample_input), cast(targets)
    layers = spec.layers(range(spec.num_layers), seed, device=dev, dtype=dt)
    state_factor = {"sgd": 2, "adamw": 4}.get(optimizer, 2)   # weight + grad (+ 2 Adam moments)
    out_layers = []
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        params = [p for p in layer.parameters() if p.requires_grad]
        saved: dict[int, int] = {}
        param_ptrs = {p.untyped_storage().data_ptr() for p in layer.parameters()}

        def pack(t):
            st = t.untyped_storage()
            if st.data_ptr() not in param_ptrs:
                saved[st.data_ptr()] = st.nbytes()
            return t

        def fwd():
            leaf, head, y = stage_forward([layer], x)
            if last:
                y = spec.loss_fn(y, tgt)
            return leaf, head, y

        fs, bs_, ws = [], [], []
        for rep in range(warmup + repeats):
            saved.clear()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                tf, (leaf, head, y) = _timed(fwd, dev)
            gy = None if last else torch.randn_like(y)
            if head is not None and leaf is y:      # an embedding alone: all of it is W
                tb, tw = 0.0, _timed(lambda: torch.autograd.backward(head, gy), dev)[0]
            else:
                tb, (dleaf, pend) = _timed(lambda: backward_input(y, gy, leaf, params), dev)
                def w_part():
                    backward_weight(pend)
                    if head is not None and dleaf is not None:
                        torch.autograd.backward(head, dleaf)
                tw = _timed(w_part, dev)[0]
            if rep >= warmup:
                fs.append(tf), bs_.append(tb), ws.append(tw)
            act = sum(saved.values()) + (0 if last else y.numel() * y.element_size())
            for p in layer.parameters():
                p.grad = None
        x = y.detach() if not last else x
        mem = sum(p.numel() * p.element_size() for p in layer.parameters()) * state_factor
        out_layers.append(Layer(f=statistics.median(fs), b=statistics.median(bs_), w=statistics.median(ws),
                                act=act / _MIB, mem=mem / _MIB, name=f"{type(layer).__name__.lower()}{i}"))
    prob = Problem(ranks=ranks, microbatches=microbatches, layers=tuple(out_layers), comm=comm,
                   memory_limit=memory_limit,
                   meta={"profiled": True, "model": spec.name, "device": str(dev), "dtype": str(dt),
                         "units": "ms, MiB", "repeats": repeats, "torch": torch.__version__})
    if path is not None:
        save_problem(prob, path)
    return prob


def _durations(timelines: Sequence[Timeline]) -> dict[tuple[int, str], list[float]]:
    out: dict[tuple[int, str], list[float]] = {}
    for tl in timelines:
        for a, s, e in zip(tl.actions, tl.start, tl.end):
            out.setdefault((a.stage, a.kind.name), []).append(float(e - s))
    return out


def _comm_estimate(tl: Timeline, plan: Plan) -> list[float]:
    """Gaps between a cross-rank producer's end and its consumer's start, where the consumer waited."""
    sched = plan.schedule
    place = sched.placement
    when = {str(a): (int(r), float(s), float(e)) for a, r, s, e in zip(tl.actions, tl.rank, tl.start, tl.end)}
    prev_end: dict[str, float] = {}
    for r, row in enumerate(sched.order):
        last = 0.0
        for a in row:
            k = str(a)
            if k in when:
                prev_end[k] = last
                last = when[k][2]
    gaps = []
    for a in tl.actions:
        k = str(a)
        r, s, e = when[k]
        dep = None
        if a.kind.is_forward and a.stage > 0 and place[a.stage - 1] != r:
            dep = f"{a.stage - 1}F{a.microbatch}"
        elif a.kind.computes_input_grad and a.stage + 1 < sched.num_stages and place[a.stage + 1] != r:
            dep = next((d for d in (f"{a.stage + 1}I{a.microbatch}", f"{a.stage + 1}B{a.microbatch}")
                        if d in when), None)
        if dep is None or dep not in when:
            continue
        dep_end = when[dep][2]
        if s > prev_end.get(k, 0.0) + 1e-9 and dep_end >= prev_end.get(k, 0.0):   # it waited for dep
            gaps.append(max(0.0, s - dep_end))
    return gaps


def calibrate(timelines: Timeline | Sequence[Timeline], plan: Plan, problem: Problem | None = None) -> Problem:
    """A problem fitted to measured timelines of ``plan``: per-stage medians of F, I, W (B split by
    the base problem's b:w ratio, else evenly), spread over the stage's layers in proportion to the
    base problem (else evenly), and ``comm`` from the measured waits on cross-rank dependencies.
    Memory (act, mem) comes from ``problem`` when given."""
    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    if not tls:
        raise CalibrationError("no timelines to calibrate from")
    sched = plan.schedule
    n_layers = plan.num_layers or (problem.num_layers if problem else sched.num_stages)
    part = plan.partition or even_partition(n_layers, sched.num_stages)
    if problem is not None and problem.num_layers != n_layers:
        raise CalibrationError(f"the problem has {problem.num_layers} layers but the plan covers {n_layers}")
    d = _durations(tls)
    med = {k: float(np.median(v)) for k, v in d.items()}
    layers: list[Layer | None] = [None] * n_layers
    for s, lay in enumerate(part):
        f = med.get((s, "F"))
        if f is None:
            raise CalibrationError(f"the timelines have no F of stage {s}: are they from this plan?")
        base = [problem.layers[i] for i in lay] if problem else None
        if (s, "I") in med or (s, "W") in med:
            b, w = med.get((s, "I"), 0.0), med.get((s, "W"), 0.0)
        elif (s, "B") in med:
            tot = med[(s, "B")]
            bb = sum(l.b for l in base) if base else 0.0
            ww = sum(l.w for l in base) if base else 0.0
            frac = bb / (bb + ww) if bb + ww > 0 else 0.5
            b, w = tot * frac, tot * (1 - frac)
        else:
            raise CalibrationError(f"the timelines have no backward of stage {s}")
        for key, total in (("f", f), ("b", b), ("w", w)):
            weights = [getattr(l, key) for l in base] if base else [1.0] * len(lay)
            if sum(weights) <= 0:
                weights = [1.0] * len(lay)
            for j, i in enumerate(lay):
                cur = layers[i] or {}
                if isinstance(cur, Layer):
                    cur = {}
                cur[key] = total * weights[j] / sum(weights)
                layers[i] = cur
    out = []
    for i, vals in enumerate(layers):
        bl = problem.layers[i] if problem else None
        out.append(Layer(f=vals["f"], b=vals["b"], w=vals["w"], act=bl.act if bl else 0.0,
                         mem=bl.mem if bl else 0.0, name=bl.name if bl else f"layer{i}"))
    gaps = [g for tl in tls for g in _comm_estimate(tl, plan)]
    comm = float(np.median(gaps)) if gaps else 0.0
    return Problem(ranks=sched.ranks, microbatches=sched.microbatches, layers=tuple(out), comm=comm,
                   memory_limit=problem.memory_limit if problem else None,
                   meta={"calibrated_from": len(tls), "units": "ms, MiB"})
