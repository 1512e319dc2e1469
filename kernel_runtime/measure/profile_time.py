"""Timing layers through the executor's own handlers, in the process that calls it.

A ``_Probe`` stands in for ``RankExecutor`` for one *unit* (a layer, or a whole stage) alone: its
input and its output gradient are in memory, nothing is sent. Each repetition runs a few
microbatches of the unit's F → B (fused) and then of F → I → W (split backward), timing all but the
first of each (steady state, as a rank repeats its pattern in a pipeline), with the very handlers
``executor.DEFAULT_HANDLERS`` the pipelined run calls, so per-action Python work (the split
backward's graph walk, hooks, the loss) is timed as it runs there. Units are visited in a rotated order each repetition to spread drift
and cache state over all of them; the statistic is the median over repetitions.
Units: ms and bytes.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn

from flexpipe_ui.ir import parse_action

from ..run.executor import DEFAULT_HANDLERS as HANDLERS, MBState
from ..run.memory import SavedBytes, activation_bytes, recorded_grad_bytes

__all__ = ["UnitTimes", "time_units", "action_overhead", "unit_inputs"]


def _ms(less: str | None = None) -> dict:
    """Field metadata of a time (ms); ``less``: the kind whose fixed overhead is taken off it."""
    return {"unit": "ms", "less": less}


_BYTES = {"unit": "bytes"}


@dataclass
class UnitTimes:
    """Medians (ms) of one unit's actions and its memory (bytes) for one microbatch.

    A field with a ``unit`` in its metadata is a measurement; one named like a ``Layer`` field
    becomes that field of the profiled problem (``measure.profiler``: ms less the kind's overhead
    where ``less`` says, bytes as MiB), with no other edit."""

    f: float = field(metadata=_ms("F"))
    b: float = field(metadata=_ms("I"))
    w: float = field(metadata=_ms("W"))
    bw: float = field(metadata=_ms("B"))
    act: int = field(metadata=_BYTES)
    act_w: int = field(metadata=_BYTES)
    out: int = field(metadata=_BYTES)
    deferred: bool = False                   # first unit on data: I deferred its work to W
    switch: float = field(default=0.0, metadata=_ms())   # extra ms of an action after another unit's
    f_nograd: float = field(default=0.0, metadata=_ms("F"))  # F of a microbatch a recompute re-runs
    samples: dict = field(default_factory=dict)


class _Probe:
    """The part of ``RankExecutor`` that the F/I/W/B handlers use, for one unit alone."""

    def __init__(self, layers: list[nn.Module], loss_fn, x, target, gy, first_on_data: bool, last: bool):
        self.stage = 0 if first_on_data else 1
        self.layers = {self.stage: layers}
        self.S = self.stage + (1 if last else 2)
        self.loss_fn, self.x, self.target, self.gy, self.last = loss_fn, x, target, gy, last
        self.offload, self.recompute = set(), set()
        self.params = [p for l in layers for p in l.parameters() if p.requires_grad]
        self.param_ids = {self.stage: {id(p) for p in self.params}}
        self.saved = SavedBytes({p.untyped_storage().data_ptr() for l in layers for p in l.parameters()})
        dtype = self.params[0].dtype if self.params else torch.float32
        self.loss_scale = torch.tensor(1.0, dtype=dtype, device=x.device)

    def action(self, kind: str):
        return parse_action(f"{self.stage}{kind}0")

    # -- the executor's interface ------------------------------------------------------------------
    def stage_input(self, a):
        return self.x

    def maybe_loss(self, a, y, record: bool = True):
        return self.loss_fn(y, self.target) if self.last else y

    def emit_output(self, a, y):
        self.y_out = y

    def output_grad(self, a):
        return self.loss_scale if self.last else self.gy

    def emit_input_grad(self, a, dx):
        self.dx = dx

    def body_params(self, stage, st):
        return self.params

    def release(self, a):
        pass


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable, device) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return (time.perf_counter() - t) * 1e3


def unit_inputs(layers: list[nn.Module], units: Sequence[Sequence[int]], x, loss_fn, target):
    """(input, output-gradient) of every unit: one no-grad pass through the model in order."""
    from ..run.executor import stage_forward
    ins, gys = {}, {}
    h = x
    outs = {}
    with torch.no_grad():
        for i, layer in enumerate(layers):
            outs[i] = h
            h = layer(h)
        outs[len(layers)] = h
    for u in units:
        u = tuple(u)
        ins[u] = outs[u[0]]
        y = outs[u[-1] + 1]
        gys[u] = torch.randn_like(y) * 1e-3 if y.is_floating_point() and u[-1] + 1 < len(layers) else None
    return ins, gys


STEADY = 3
"""Microbatches of each pattern per repetition: the first is a warm-up, the rest are timed."""


def _group(p: _Probe, device, kinds: str) -> dict:
    """One microbatch of the unit through ``kinds`` ("FB" or "FIW"), each action timed; F with the
    saved-tensor hooks the executor's F runs under."""
    st = MBState()
    got = {}
    for k in kinds:
        if k == "F":
            with p.saved.hooks():
                got["F"] = _timed(lambda: HANDLERS["F"](p, p.action("F"), st), device)
            got["act"] = activation_bytes(p.saved.storages, st.x, st.y if not p.last else None)
            got["out"] = p.y_out if not p.last else None
        else:
            got[k] = _timed(lambda: HANDLERS[k](p, p.action(k), st), device)
            if k == "I":
                got["act_w"] = got["act"] + recorded_grad_bytes(st.pend)
                got["deferred"] = st.fused
    return got


def _one_rep(p: _Probe, device) -> dict:
    """``STEADY`` microbatches of F → B, then ``STEADY`` of F → I → W, gradients accumulating as in
    a step; all but the first of each pattern timed. Steady state matters: timed right after the
    other pattern or another unit, the same stage's split/fused ratio came out 0.92 (split first)
    or 1.23-1.40 (fused first) against 1.15-1.21 in steady sequences and 1.21-1.23 inside
    pipelined runs (bench_truth's GPT, docs/cost_model.md)."""
    times: dict[str, list[float]] = {"f": [], "b": [], "w": [], "bw": []}
    fused = split = None
    for kinds in ("FB", "FIW"):
        for i in range(STEADY):
            got = _group(p, device, kinds)
            if kinds == "FB":
                fused = fused or got
            else:
                split = split or got
            if i == 0:
                continue                                   # warm-up: follows another pattern/unit
            times["f"].append(got["F"])
            if kinds == "FB":
                times["bw"].append(got["B"])
            else:
                times["b"].append(got["I"])
                times["w"].append(got["W"])
    # the forward of a microbatch that a recompute will re-run: the executor runs it without
    # autograd's graph (its R branch), so it saves nothing and costs less than F
    times["f_nograd"] = []
    p.recompute = {(p.stage, 0)}
    try:
        for i in range(STEADY):
            t = _timed(lambda: HANDLERS["F"](p, p.action("F"), MBState()), device)
            if i:
                times["f_nograd"].append(t)
    finally:
        p.recompute = set()
    for q in p.params:
        q.grad = None
    out = fused["out"]
    nout = 0 if out is None else out.numel() * out.element_size()
    return {**{k: tuple(v) for k, v in times.items()}, "act": fused["act"], "act_w": split["act_w"],
            "out": nout, "deferred": split["deferred"]}


def _after_other(p: _Probe, q: _Probe, device) -> dict:
    """``STEADY`` microbatches of ``p`` alternating action by action with another stage ``q``
    (F p, F q, B p, B q), as a rank with two stages runs them (interleaved, V): ``p``'s F and B
    times, all but the first. Against the steady pattern the difference is the cost of finding
    ``p``'s weights and activations evicted by the other stage (``switch``; docs/cost_model.md)."""
    out: dict[str, list[float]] = {"F": [], "B": []}
    for i in range(STEADY):
        sts = {id(p): MBState(), id(q): MBState()}
        for k in "FB":
            for u in (p, q):
                st = sts[id(u)]
                if k == "F":
                    with u.saved.hooks():
                        t = _timed(lambda: HANDLERS["F"](u, u.action("F"), st), device)
                else:
                    t = _timed(lambda: HANDLERS["B"](u, u.action("B"), st), device)
                if u is p and i > 0:
                    out[k].append(t)
    for u in (p, q):
        for prm in u.params:
            prm.grad = None
    return out


def other_stage(unit: Sequence[int], n: int, ranks: int) -> tuple[int, ...] | None:
    """The layers a rank's other stage would hold next to ``unit`` in a plan with two stages per
    rank: the ``n // (2 ranks)`` layers after it (from layer 0 when it ends the model)."""
    k = max(1, n // max(2, 2 * ranks))
    start = unit[-1] + 1 if unit[-1] + k < n else 0
    other = tuple(range(start, min(n, start + k)))
    return None if not other or set(other) & set(unit) else other


def drift(per_rep: Sequence[float]) -> float:
    """How far the machine moved while the repetitions ran: the medians of the first and the
    second half of a series of per-repetition totals, their difference over the median of all."""
    n = len(per_rep)
    if n < 4:
        return 0.0
    mid = statistics.median(per_rep)
    a, b = statistics.median(per_rep[: n // 2]), statistics.median(per_rep[n // 2:])
    return abs(a - b) / mid if mid > 0 else 0.0


def median_error(per_rep: Sequence[float]) -> float:
    """Relative standard error of the median of a series (per-repetition totals): 1.2533 sigma /
    sqrt(n) over the median, sigma from the interquartile range (IQR / 1.349), robust to the odd
    slow repetition. How far a profile's medians could move in a second profile on this machine."""
    n = len(per_rep)
    if n < 4:
        return 0.0
    mid = statistics.median(per_rep)
    q = statistics.quantiles(per_rep, n=4)
    return 1.2533 * (q[2] - q[0]) / 1.349 / math.sqrt(n) / mid if mid > 0 else 0.0


def time_units(layers: list[nn.Module], units: Sequence[Sequence[int]], x, target, loss_fn, *,
               repeats: int = 7, warmup: int = 2, device=None,
               between: Callable[[int], None] | None = None, ranks: int = 2,
               max_repeats: int | None = None, tolerance: float = 0.03,
               agree: Callable[[bool], bool] | None = None, report: dict | None = None,
               switch: bool = True) -> dict[tuple, UnitTimes]:
    """Median F, I, W, B (ms) and bytes of each unit (a tuple of layer indices, contiguous).

    ``between(rep)`` runs before each repetition (the profiling workers' barrier). After
    ``repeats`` repetitions, while the machine's drift over them (``drift`` of the per-repetition
    totals) exceeds ``tolerance`` or the medians' error (``median_error``) exceeds half of it, more
    are timed, up to ``max_repeats``: the medians then span a longer stretch of the machine's
    states (a 2-core VM moved 10-30% over tens of seconds, docs/cost_model.md). ``agree(done)``
    makes the workers stop together (all must be done). ``report`` receives {"repeats", "drift",
    "error"}."""
    device = device or x.device
    units = [tuple(u) for u in units]
    n = len(layers)
    # the switch probe for single layers only (``switch``): a group timed whole is a check of how
    # layers add up, not a unit the cost model charges
    others = {u: other_stage(u, n, ranks) if ranks > 1 and switch and len(u) == 1 else None for u in units}
    extra = [o for o in set(others.values()) if o is not None and o not in units]
    ins, gys = unit_inputs(layers, units + extra, x, loss_fn, target)
    probes = {u: _Probe([layers[i] for i in u], loss_fn, ins[u], target, gys[u],
                        first_on_data=(u[0] == 0 and not x.is_floating_point()), last=(u[-1] == n - 1))
              for u in units + extra}
    got: dict[tuple, list[dict]] = {u: [] for u in units}
    alt: dict[tuple, dict[str, list[float]]] = {u: {"F": [], "B": []} for u in units}
    totals: list[float] = []
    limit = max(repeats, max_repeats or repeats)
    rep, moved, error = 0, 0.0, 0.0
    while True:
        if between is not None:
            between(rep)
        k = rep % len(units)
        rotated = units[k:] + units[:k]           # rotated: drift spreads over every unit
        total = 0.0
        for u in rotated:
            r = _one_rep(probes[u], device)
            a = _after_other(probes[u], probes[others[u]], device) if others[u] is not None else None
            if rep >= warmup:
                got[u].append(r)
                if len(u) == 1:
                    total += statistics.median(r["f"]) + statistics.median(r["bw"])
                if a is not None:
                    for kk in "FB":
                        alt[u][kk].extend(a[kk])
        if rep >= warmup:
            totals.append(total)
        rep += 1
        done_reps = rep - warmup
        if done_reps >= repeats and ((done_reps - repeats) % 4 == 0 or done_reps >= limit):
            moved, error = drift(totals), median_error(totals)
            done = (moved <= tolerance and error <= tolerance / 2) or done_reps >= limit
            if agree is not None:
                done = agree(done)
            if done:
                break
    if report is not None:
        report.update(repeats=rep - warmup, drift=moved, error=error)
    out = {}
    for u, rs in got.items():
        flat = lambda key: [v for r in rs for v in (r[key] if isinstance(r[key], tuple) else (r[key],))]
        med = lambda key: statistics.median(flat(key))
        deferred = rs[0]["deferred"]
        switch = 0.0
        if alt[u]["F"]:
            switch = max(0.0, (statistics.median(alt[u]["F"]) - med("f")
                               + statistics.median(alt[u]["B"]) - med("bw")) / 2)
        out[u] = UnitTimes(f=med("f"), b=0.0 if deferred else med("b"), w=med("w"), bw=med("bw"),
                           act=int(rs[-1]["act"]), act_w=int(rs[-1]["act_w"]), out=int(rs[-1]["out"]),
                           deferred=deferred, switch=switch, f_nograd=med("f_nograd"),
                           samples={k: flat(k) for k in ("f", "b", "w", "bw")})
    return out


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def action_overhead(device, dtype, *, repeats: int = 30) -> dict[str, float]:
    """Fixed cost (ms) of one F, I, W, B through the handlers on a layer that computes ~nothing."""
    torch.manual_seed(0)
    layer = _Tiny().to(device=device, dtype=dtype)
    x = torch.randn(1, 4, device=device, dtype=dtype)
    loss = lambda y, t: (y - t).pow(2).mean()
    t = torch.zeros(1, 4, device=device, dtype=dtype)
    times = time_units([layer, _Tiny().to(device=device, dtype=dtype)], [(0,)], x, t, loss,
                       repeats=repeats, warmup=5, device=device, ranks=1)[(0,)]
    return {"F": times.f, "I": times.b, "W": times.w, "B": times.bw}
