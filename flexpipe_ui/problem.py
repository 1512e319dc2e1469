"""Problem files (``flexpipe-problem/1``) and the per-stage cost table the simulator reads.

A problem is the model's per-layer costs, the ranks, the microbatch count, the cross-rank latency
and an optional memory cap (DESIGN.md, contract 2). ``StageCosts`` sums layers into stages.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .costmodel import StageCosts, first_grad_rise, fold_data_input, fold_liveness, place_memory
from .jsonio import read_json, write_json
from .limits import MAX_LAYERS, MAX_MICROBATCHES, MAX_NUMBER, MAX_RANKS

__all__ = ["Layer", "Problem", "ProblemError", "StageCosts", "load_problem", "save_problem",
           "uniform_costs", "even_partition", "PROBLEM_FORMAT", "LAYER_TERMS", "PROBLEM_TERMS"]

PROBLEM_FORMAT = "flexpipe-problem/1"


class ProblemError(ValueError):
    """A problem file or object is malformed; the message names the field (and layer)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """One layer's costs for one microbatch."""

    f: float
    """Forward time."""
    b: float
    """Input-gradient backward time (I)."""
    w: float
    """Weight-gradient backward time (W); a fused B costs b + w."""
    act: float = 0.0
    """Activation memory held per microbatch from F until its weight gradient."""
    mem: float = 0.0
    """Static memory (weights, grads, optimizer state) on its rank."""
    name: str = ""
    """Optional label (not part of the contract; written back if present)."""
    out: float | None = None
    """MiB of the activation the layer sends onward (a cross-rank message's size; with the
    problem's ``bandwidth``). None: messages cost only ``comm``."""
    bw: float | None = None
    """Time of a fused backward B through the layer; None: b + w."""
    act_w: float | None = None
    """MiB held after I until W; None: ``act`` (all of it). Below ``act`` the rest is freed at I's
    end; above it, I's end allocates the difference (a split backward keeps the input gradients
    its W needs — measured on CPU: +5..36% on split-backward ranks)."""
    grad: float | None = None
    """MiB of the layer's gradients (the data-parallel all-reduce's size); None: 0."""
    switch: float | None = None
    """Extra time of an action of the layer's stage when the rank's previous action ran another
    stage (its weights and activations are no longer in cache); None: 0. Measured on CPU: 5-26%
    on small stages of interleaved and V plans."""
    temp: Mapping[str, float] | None = None
    """Kind name → MiB an action through the layer rises above what it holds while it runs
    (temporaries, gradients of intermediates, a weight gradient before it is accumulated, the
    loss's softmax); a stage's is the largest over its layers. None: 0. Measured by the
    profiler's allocator (``kernel_runtime.measure.profile_memory``): +6 to +30% of an LM head's rank."""
    f_nograd: float | None = None
    """Forward time of a microbatch whose forward a recompute ``R`` re-runs: the first forward
    runs without autograd's graph (the runtime's ``torch.no_grad``); None: ``f``. ``R`` itself
    costs ``f`` (it builds the graph the backward needs)."""
    act_sel: float | None = None
    """MiB of the layer's activation a selective recompute does not keep (the cheap ops'
    outputs: elementwise, norms, softmax; Megatron's ``--recompute-granularity selective``);
    None: 0 (``costmodel.selective_recompute``)."""
    f_sel: float | None = None
    """Time the backward spends re-running those cheap ops under selective recompute; None: 0."""


@dataclass(frozen=True, kw_only=True)
class Problem:
    """What to schedule: layers in model order, ranks, microbatches, comm latency, memory cap."""

    ranks: int
    """Number of pipeline ranks (devices)."""
    microbatches: int
    """Microbatches per training step."""
    layers: tuple[Layer, ...]
    """Per-layer costs in model order."""
    comm: float = 0.0
    """Latency added to a dependency that crosses ranks."""
    memory_limit: float | None = None
    """Per-rank cap on static + activation peak; None for no cap."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form extras (e.g. the profiler's device, units); written back under "meta"."""
    bandwidth: float | None = None
    """MiB per time unit of a cross-rank message (with layers' ``out``); None: latency only."""
    overhead: float | Mapping[str, float] | None = None
    """Time added to every compute action: a number, or kind name → time; None: nothing."""
    comm_cpu: float | None = None
    """Fraction 0..1 of a message's transfer time (out / bandwidth) that also occupies the sending
    and the receiving action's rank (CPU copies); None: 0."""
    dp: int | None = None
    """Data-parallel replicas of the pipeline; None: 1 (no gradient all-reduce)."""
    dp_bandwidth: float | None = None
    """MiB per time unit of the data-parallel all-reduce (required when dp > 1)."""
    data_input: bool | None = None
    """True when the first layer is fed data (token ids), not an activation needing a gradient:
    the first stage's I is then a no-op and its W runs the fused backward (``costmodel``)."""
    runtime_mem: float | None = None
    """MiB every rank's process holds on its device for the runtime's libraries (cuBLAS
    workspaces), part of each rank's static memory; None: 0. Measured by the profiler."""
    recv_ahead: int | None = None
    """Received messages are fresh buffers (with layers' ``out``): a stage fed by another rank
    holds its input with its activation, and each rank holds ``recv_ahead`` posted receive
    buffers per inbound channel (the runtime's receive window; ``costmodel.place_memory``).
    None: messages take no memory."""
    sends_held: bool | None = None
    """True: a sender keeps every message it sent until its step ends (with layers' ``out``): gloo's
    send completes only when waited for, and the runtime waits at the step's end
    (``costmodel.send_events``); None: a sent tensor is freed when its action frees it."""
    copy_bandwidth: float | None = None
    """MiB per time unit of a device-host copy (offload ``OFF`` / reload ``LOAD``, on each rank's
    copy lane, overlapping compute); None: the offload kinds' own rate (``ops.register_offload``)."""
    torch_liveness: bool | None = None
    """True: memory as torch.distributed.pipelining analyses it -- a split backward frees nothing
    at I, the whole activation lives until W (``costmodel.fold_liveness``); None: ``act_w``'s rule."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        _check_problem(self)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def stage_costs(self, partition: Sequence[Sequence[int]], placement: Sequence[int] | None = None
                    ) -> "StageCosts":
        """Sum layers into stages; ``partition[s]`` is the layer list of stage s. With the stages'
        ``placement`` (stage → rank) the memory the placement decides is added
        (``costmodel.place_memory``: received inputs and receive buffers, with ``recv_ahead``)."""
        rows = []
        for s, layers in enumerate(partition):
            for i in layers:
                if not 0 <= i < len(self.layers):
                    raise ProblemError(f"stage {s} names layer {i}, but the problem has "
                                       f"{len(self.layers)} layers (0..{len(self.layers) - 1})")
            ls = [self.layers[i] for i in layers]
            rows.append((sum(l.f for l in ls), sum(l.b for l in ls), sum(l.w for l in ls),
                         sum(l.act for l in ls), sum(l.mem for l in ls)))
        a = np.array(rows, dtype=float).reshape(-1, 5)
        extra = _stage_extras(self, partition) if self.has_cost_terms else {}
        costs = StageCosts(f=a[:, 0], b=a[:, 1], w=a[:, 2], act=a[:, 3], mem=a[:, 4], comm=self.comm,
                           **extra)
        costs = fold_liveness(fold_data_input(costs))
        return costs if placement is None else place_memory(costs, placement)

    @property
    def has_cost_terms(self) -> bool:
        """True when any optional cost-model field (bandwidth, overhead, ..., layer out/bw/...) is set."""
        return (any(getattr(self, k) is not None for k in _PROBLEM_TERMS)
                or any(getattr(l, k) is not None for l in self.layers for k in LAYER_TERMS))

    def with_(self, **changes) -> "Problem":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"format": PROBLEM_FORMAT, "ranks": self.ranks,
                             "microbatches": self.microbatches, "comm": self.comm}
        if self.memory_limit is not None:
            d["memory_limit"] = self.memory_limit
        for k in _PROBLEM_TERMS:
            v = getattr(self, k)
            if v is not None:
                d[k] = dict(v) if isinstance(v, Mapping) else v
        d["layers"] = []
        for l in self.layers:
            ld = {"f": l.f, "b": l.b, "w": l.w, "act": l.act, "mem": l.mem}
            if l.name:
                ld["name"] = l.name
            for k in LAYER_TERMS:
                if getattr(l, k) is not None:
                    ld[k] = dict(getattr(l, k)) if k in _LAYER_KIND_MAPS else getattr(l, k)
            d["layers"].append(ld)
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    @classmethod
    def from_dict(cls, d: Any, source: str = "problem") -> "Problem":
        return _problem_from_dict(d, source)


def _num(value: Any, where: str, *, integer: bool = False, minimum: float = 0.0,
         strict: bool = False, maximum: float = MAX_NUMBER, limit: str = "MAX_NUMBER") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = repr(value) if len(repr(value)) < 60 else repr(value)[:60] + "..."
        raise ProblemError(f"{where}: expected a number, got {type(value).__name__} {shown}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ProblemError(f"{where}: must be finite, got {value!r}")
    if abs(value) > maximum:
        shown = f"{value:.3g}" if isinstance(value, float) else (
            str(value) if len(str(value)) < 30 else f"an integer of {len(str(abs(value)))} digits")
        raise ProblemError(f"{where}: {shown} is beyond the limit of {maximum:g} "
                           f"(flexpipe_ui.limits.{limit})")
    if integer and (not float(value).is_integer()):
        raise ProblemError(f"{where}: expected an integer, got {value!r}")
    if value < minimum or (strict and value <= minimum):
        rel = ">" if strict else ">="
        raise ProblemError(f"{where}: must be {rel} {minimum:g}, got {value!r}")
    return int(value) if integer else float(value)


def _problem_from_dict(d: Any, source: str) -> Problem:
    if not isinstance(d, dict):
        raise ProblemError(f"{source}: expected a JSON object, got {type(d).__name__}")
    fmt = d.get("format", PROBLEM_FORMAT)
    if fmt != PROBLEM_FORMAT:
        shown = repr(fmt) if len(repr(fmt)) < 60 else repr(fmt)[:60] + "..."
        raise ProblemError(f"{source}: format is {shown}, expected {PROBLEM_FORMAT!r}")
    for key in ("ranks", "microbatches", "layers"):
        if key not in d:
            raise ProblemError(f"{source}: missing key {key!r}")
    ranks = _num(d["ranks"], f"{source}: 'ranks'", integer=True, minimum=1, maximum=MAX_RANKS,
                 limit="MAX_RANKS")
    mbs = _num(d["microbatches"], f"{source}: 'microbatches'", integer=True, minimum=1,
               maximum=MAX_MICROBATCHES, limit="MAX_MICROBATCHES")
    comm = _num(d.get("comm", 0.0), f"{source}: 'comm'")
    limit = d.get("memory_limit")
    if limit is not None:
        limit = _num(limit, f"{source}: 'memory_limit'", strict=True)
    layers_in = d["layers"]
    if not isinstance(layers_in, list) or not layers_in:
        raise ProblemError(f"{source}: 'layers' must be a non-empty list")
    if len(layers_in) > MAX_LAYERS:
        raise ProblemError(f"{source}: 'layers' has {len(layers_in)} layers, beyond the limit of "
                           f"{MAX_LAYERS} (flexpipe_ui.limits.MAX_LAYERS)")
    layers = []
    for i, ld in enumerate(layers_in):
        where = f"{source}: layer {i}"
        if not isinstance(ld, dict):
            raise ProblemError(f"{where}: expected an object with f, b, w, act, mem")
        for key in ("f", "b", "w"):
            if key not in ld:
                raise ProblemError(f"{where}: missing key {key!r}")
        vals = {k: _num(ld[k], f"{where}, key {k!r}") for k in ("f", "b", "w")}
        for k in ("act", "mem"):
            vals[k] = _num(ld.get(k, 0.0), f"{where}, key {k!r}")
        name = ld.get("name", "")
        if not isinstance(name, str) or len(name) > 200:
            raise ProblemError(f"{where}, key 'name': expected a string of at most 200 characters")
        for k in LAYER_TERMS:
            if ld.get(k) is not None:
                vals[k] = (_kind_map(ld[k], f"{where}, key {k!r}") if k in _LAYER_KIND_MAPS
                           else _num(ld[k], f"{where}, key {k!r}"))
        layers.append(Layer(name=name, **vals))
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise ProblemError(f"{source}: 'meta' must be an object")
    terms = _problem_terms(d, source)
    try:
        return Problem(ranks=ranks, microbatches=mbs, layers=tuple(layers), comm=comm,
                       memory_limit=limit, meta=meta, **terms)
    except ProblemError as e:
        raise ProblemError(f"{source}: {e}") from None


def _kind_map(v: Any, where: str) -> dict[str, float]:
    """A kind name → number mapping (``overhead``, layer ``temp``), checked."""
    if not isinstance(v, dict):
        raise ProblemError(f"{where}: expected an object kind -> number (e.g. {{\"F\": 1.5}}), got "
                           f"{type(v).__name__}")
    return {k: _num(x, f"{where}, kind {k!r}") for k, x in v.items()}


def _problem_terms(d: dict, source: str) -> dict:
    """The optional cost-model fields of a problem dict, checked (``costmodel`` uses them)."""
    out: dict[str, Any] = {}
    if d.get("bandwidth") is not None:
        out["bandwidth"] = _num(d["bandwidth"], f"{source}: 'bandwidth'", strict=True)
    if d.get("overhead") is not None:
        ov = d["overhead"]
        if isinstance(ov, dict):
            out["overhead"] = _kind_map(ov, f"{source}: 'overhead'")
        else:
            out["overhead"] = _num(ov, f"{source}: 'overhead'")
    if d.get("comm_cpu") is not None:
        out["comm_cpu"] = _num(d["comm_cpu"], f"{source}: 'comm_cpu'")
    if d.get("dp") is not None:
        out["dp"] = _num(d["dp"], f"{source}: 'dp'", integer=True, minimum=1)
    if d.get("dp_bandwidth") is not None:
        out["dp_bandwidth"] = _num(d["dp_bandwidth"], f"{source}: 'dp_bandwidth'", strict=True)
    if d.get("runtime_mem") is not None:
        out["runtime_mem"] = _num(d["runtime_mem"], f"{source}: 'runtime_mem'")
    if d.get("recv_ahead") is not None:
        out["recv_ahead"] = _num(d["recv_ahead"], f"{source}: 'recv_ahead'", integer=True)
    for k in _SWITCHES:
        if d.get(k) is not None:
            if not isinstance(d[k], bool):
                raise ProblemError(f"{source}: {k!r} must be true or false, got {d[k]!r}")
            out[k] = d[k]
    for k in _PROBLEM_TERMS:          # a term without a rule above: a number >= 0
        if k not in out and d.get(k) is not None:
            out[k] = _num(d[k], f"{source}: {k!r}")
    return out


def _optional_fields(cls: type, contract: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The fields of ``cls`` that default to None, less ``contract`` (DESIGN.md's own optional keys)."""
    return tuple(f.name for f in fields(cls) if f.default is None and f.name not in contract)


LAYER_TERMS = _optional_fields(Layer)
"""The optional cost-model fields of a layer (``out``, ``bw``, ...): every ``Layer`` field that
defaults to None. Derived, so a field added to ``Layer`` is read, written, checked, calibrated and
profiled without another list to extend (tests/test_cost_terms.py)."""
PROBLEM_TERMS = _optional_fields(Problem, contract=("memory_limit",))
"""The optional cost-model fields of a problem (``bandwidth``, ``overhead``, ...): every
``Problem`` field that defaults to None, except contract 2's ``memory_limit``."""
_LAYER_KIND_MAPS = tuple(f.name for f in fields(Layer) if f.name in LAYER_TERMS and "Mapping" in str(f.type))
"""Layer terms that are kind name → number mappings (``temp``); the others are numbers >= 0."""
_LAYER_NUMBERS = tuple(k for k in LAYER_TERMS if k not in _LAYER_KIND_MAPS)
_PROBLEM_TERMS = PROBLEM_TERMS
_SWITCHES = tuple(f.name for f in fields(Problem) if f.name in PROBLEM_TERMS and str(f.type).startswith("bool"))
"""The problem's true/false terms (``data_input``, ``torch_liveness``, ...)."""


def _stage_extras(p: Problem, partition: Sequence[Sequence[int]]) -> dict:
    """StageCosts' optional cost-model fields summed over each stage's layers (None when unset)."""
    ls = [[p.layers[i] for i in layers] for layers in partition]
    has = lambda k: any(getattr(l, k) is not None for l in p.layers)
    arr = lambda xs: np.array(xs, dtype=float)
    out: dict[str, Any] = {}
    if has("bw"):
        out["bw"] = arr([sum(l.b + l.w if l.bw is None else l.bw for l in st) for st in ls])
    if has("act_w"):
        out["act_w"] = arr([sum(l.act if l.act_w is None else l.act_w for l in st) for st in ls])
    if has("out"):  # the message a stage sends is its last layer's output
        out["out"] = arr([(st[-1].out or 0.0) if st else 0.0 for st in ls])
    if has("grad"):
        out["grad"] = arr([sum(l.grad or 0.0 for l in st) for st in ls])
        out["grad_first"] = {k: arr([first_grad_rise(st, k) for st in ls]) for k in ("B", "W")}
    if has("switch"):
        out["switch"] = arr([sum(l.switch or 0.0 for l in st) for st in ls])
    for k in ("f_sel", "act_sel"):
        if has(k):
            out[k] = arr([sum(getattr(l, k) or 0.0 for l in st) for st in ls])
    if has("f_nograd"):
        out["f_nograd"] = arr([sum(l.f if l.f_nograd is None else l.f_nograd for l in st) for st in ls])
    if has("temp"):
        kinds = sorted({k for l in p.layers if l.temp for k in l.temp})
        out["temp"] = {k: arr([_stage_temp(st, k) for st in ls]) for k in kinds}
    overhead = p.overhead
    if isinstance(overhead, Mapping):
        overhead = dict(overhead)
    return {**out, "bandwidth": p.bandwidth, "overhead": overhead, "comm_cpu": p.comm_cpu or 0.0,
            "dp": p.dp or 1, "dp_bandwidth": p.dp_bandwidth, "data_input": bool(p.data_input),
            "recv_ahead": p.recv_ahead, "runtime_mem": p.runtime_mem or 0.0,
            "copy_bandwidth": p.copy_bandwidth, "torch_liveness": bool(p.torch_liveness),
            "sends_held": bool(p.sends_held)}


_FREES_AS_IT_GOES = ("F", "B", "R")
"""Kinds that run a stage's layers one by one with the later layers' activations not (yet, F and
R) or no longer (B: a fused backward frees each layer's saved tensors as it passes) held."""


def _stage_temp(layers: Sequence[Layer], kind: str) -> float:
    """A stage's workspace for ``kind``: a peak, not a sum (its layers run one after another).
    The cost model counts the stage's whole activation for the whole action, so for a kind that
    runs with the later layers' activations not held (F, or a fused B freeing each layer's as it
    passes) layer l's workspace stands on Σ act of the layers after it less: the largest of
    ``temp_l − Σ_{i > l} act_i``, at least 0. Split I and W keep the graph: the largest temp."""
    temps = [(l.temp or {}).get(kind, 0.0) for l in layers]
    if kind not in _FREES_AS_IT_GOES:
        return max(temps, default=0.0)
    after = np.cumsum([l.act for l in layers][::-1])[::-1]
    after = np.r_[after[1:], 0.0] if len(layers) else after
    return float(max([max(0.0, t - a) for t, a in zip(temps, after)], default=0.0))


def _check_problem(p: Problem) -> None:
    for name, v, top in (("ranks", p.ranks, MAX_RANKS), ("microbatches", p.microbatches, MAX_MICROBATCHES)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 1 <= v <= top:
            raise ProblemError(f"{name} must be an integer in 1..{top}, got {v!r}")
    if not p.layers:
        raise ProblemError("a problem needs at least one layer")
    if len(p.layers) > MAX_LAYERS:
        raise ProblemError(f"{len(p.layers)} layers is beyond the limit of {MAX_LAYERS} "
                           "(flexpipe_ui.limits.MAX_LAYERS)")
    for i, l in enumerate(p.layers):
        for k in ("f", "b", "w", "act", "mem"):
            v = getattr(l, k)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    and 0 <= v <= MAX_NUMBER):
                raise ProblemError(f"layer {i}, key {k!r}: must be a finite number in 0..{MAX_NUMBER:g}, "
                                   f"got {v!r}")
    if not (isinstance(p.comm, (int, float)) and math.isfinite(p.comm) and 0 <= p.comm <= MAX_NUMBER):
        raise ProblemError(f"'comm' must be a finite number in 0..{MAX_NUMBER:g}, got {p.comm}")
    if p.memory_limit is not None and not (isinstance(p.memory_limit, (int, float)) and
                                           math.isfinite(p.memory_limit) and 0 < p.memory_limit <= MAX_NUMBER):
        raise ProblemError(f"'memory_limit' must be a finite number in (0, {MAX_NUMBER:g}], got {p.memory_limit}")
    _check_terms(p)


def _nonneg(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and 0 <= v <= MAX_NUMBER)


def _check_terms(p: Problem) -> None:
    """Field-level checks of the optional cost-model fields."""
    for i, l in enumerate(p.layers):
        for k in _LAYER_NUMBERS:
            v = getattr(l, k)
            if v is not None and not _nonneg(v):
                raise ProblemError(f"layer {i}, key {k!r}: must be a finite number >= 0, got {v!r}")
        for term in _LAYER_KIND_MAPS:
            m = getattr(l, term)
            if m is None:
                continue
            if not isinstance(m, Mapping):
                raise ProblemError(f"layer {i}, key {term!r}: must be a mapping kind -> MiB, got {m!r}")
            for k, v in m.items():
                if not isinstance(k, str) or not k or not _nonneg(v):
                    raise ProblemError(f"layer {i}, key {term!r}, kind {k!r}: must be a finite number >= 0, "
                                       f"got {v!r}")
    if p.runtime_mem is not None and not _nonneg(p.runtime_mem):
        raise ProblemError(f"'runtime_mem' must be a finite number >= 0 (MiB), got {p.runtime_mem!r}")
    for k in (t for t in PROBLEM_TERMS if t.endswith("bandwidth")):   # MiB per time unit, > 0
        v = getattr(p, k)
        if v is not None and not (_nonneg(v) and v > 0):
            raise ProblemError(f"{k!r} must be a finite number > 0 (MiB per time unit), got {v!r}")
    ov = p.overhead
    if isinstance(ov, Mapping):
        for k, v in ov.items():
            if not isinstance(k, str) or not k:
                raise ProblemError(f"'overhead': keys must be kind names (e.g. 'F'), got {k!r}")
            if not _nonneg(v):
                raise ProblemError(f"'overhead', kind {k!r}: must be a finite number >= 0, got {v!r}")
    elif ov is not None and not _nonneg(ov):
        raise ProblemError(f"'overhead' must be a number >= 0 or a mapping kind -> number, got {ov!r}")
    if p.recv_ahead is not None and (isinstance(p.recv_ahead, bool) or not isinstance(p.recv_ahead, int)
                                     or p.recv_ahead < 0):
        raise ProblemError(f"'recv_ahead' must be an integer >= 0 (receive buffers per channel), got "
                           f"{p.recv_ahead!r}")
    for k in _SWITCHES:
        v = getattr(p, k)
        if v is not None and not isinstance(v, bool):
            raise ProblemError(f"{k!r} must be True or False, got {v!r}")
    if p.comm_cpu is not None and not (_nonneg(p.comm_cpu) and p.comm_cpu <= 1):
        raise ProblemError(f"'comm_cpu' must be a fraction in 0..1, got {p.comm_cpu!r}")
    if p.dp is not None:
        if isinstance(p.dp, bool) or not isinstance(p.dp, int) or p.dp < 1:
            raise ProblemError(f"'dp' must be an integer >= 1 (data-parallel replicas), got {p.dp!r}")
        if p.dp > 1 and p.dp_bandwidth is None:
            raise ProblemError(f"'dp' is {p.dp} but 'dp_bandwidth' is not set: the gradient "
                               "all-reduce needs a bandwidth (MiB per time unit)")


def load_problem(path: str | Path) -> Problem:
    """Read a ``flexpipe-problem/1`` JSON file; errors name the file, layer and key."""
    return _problem_from_dict(read_json(path, ProblemError, "problem file"), str(path))


def save_problem(problem: Problem, path: str | Path) -> None:
    write_json(problem.to_dict(), path)


def uniform_costs(num_stages: int, ranks: int, *, f: float = 1.0, b: float = 1.0, w: float = 1.0,
                  act: float = 1.0, mem: float = 0.0, comm: float = 0.0) -> StageCosts:
    """Costs given per rank's share (DESIGN.md's reference): each of v = S/p stages gets 1/v."""
    v = num_stages / ranks
    one = np.ones(num_stages)
    return StageCosts(f=one * f / v, b=one * b / v, w=one * w / v, act=one * act / v,
                      mem=one * mem / v, comm=comm)


def even_partition(num_layers: int, num_stages: int) -> tuple[tuple[int, ...], ...]:
    """Split layers as evenly by count as possible, earlier stages taking the extra."""
    if num_stages > num_layers:
        raise ProblemError(f"cannot split {num_layers} layers into {num_stages} stages: each stage "
                           "needs at least one layer (use fewer stages/chunks or more layers)")
    q, r = divmod(num_layers, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        n = q + (1 if s < r else 0)
        out.append(tuple(range(start, start + n)))
        start += n
    return tuple(out)
