"""Problem files (``flexpipe-problem/1``) and the per-stage cost table the simulator reads.

A problem is the model's per-layer costs, the ranks, the microbatch count, the cross-rank latency
and an optional memory cap (DESIGN.md, contract 2). ``StageCosts`` sums layers into stages.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .jsonio import read_json, write_json
from .kinds import StageCost
from .limits import MAX_LAYERS, MAX_MICROBATCHES, MAX_NUMBER, MAX_RANKS

__all__ = ["Layer", "Problem", "ProblemError", "StageCosts", "load_problem", "save_problem",
           "uniform_costs", "even_partition", "PROBLEM_FORMAT"]

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

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        _check_problem(self)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def stage_costs(self, partition: Sequence[Sequence[int]]) -> "StageCosts":
        """Sum layers into stages; ``partition[s]`` is the layer list of stage s."""
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
        return StageCosts(f=a[:, 0], b=a[:, 1], w=a[:, 2], act=a[:, 3], mem=a[:, 4], comm=self.comm)

    def with_(self, **changes) -> "Problem":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"format": PROBLEM_FORMAT, "ranks": self.ranks,
                             "microbatches": self.microbatches, "comm": self.comm}
        if self.memory_limit is not None:
            d["memory_limit"] = self.memory_limit
        d["layers"] = []
        for l in self.layers:
            ld = {"f": l.f, "b": l.b, "w": l.w, "act": l.act, "mem": l.mem}
            if l.name:
                ld["name"] = l.name
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
        layers.append(Layer(name=name, **vals))
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise ProblemError(f"{source}: 'meta' must be an object")
    return Problem(ranks=ranks, microbatches=mbs, layers=tuple(layers), comm=comm,
                   memory_limit=limit, meta=meta)


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


def load_problem(path: str | Path) -> Problem:
    """Read a ``flexpipe-problem/1`` JSON file; errors name the file, layer and key."""
    return _problem_from_dict(read_json(path, ProblemError, "problem file"), str(path))


def save_problem(problem: Problem, path: str | Path) -> None:
    write_json(problem.to_dict(), path)


@dataclass(frozen=True, eq=False)
class StageCosts:
    """Per-virtual-stage costs (arrays indexed by stage) and the cross-rank latency."""

    f: np.ndarray
    b: np.ndarray
    w: np.ndarray
    act: np.ndarray
    mem: np.ndarray
    comm: float = 0.0

    @property
    def num_stages(self) -> int:
        return len(self.f)

    def stage(self, s: int) -> StageCost:
        return StageCost(float(self.f[s]), float(self.b[s]), float(self.w[s]),
                         float(self.act[s]), float(self.mem[s]))

    def with_comm(self, comm: float) -> "StageCosts":
        return replace(self, comm=float(comm))


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
