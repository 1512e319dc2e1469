"""The profile's assembly: the workers' measurements combined and written as a ``flexpipe-problem/1``.

``_combine`` averages every time over the workers (memory and names from worker 0); ``_assemble``
turns the result into the problem: each probe measurement named like a ``Layer`` field becomes that
field in its unit (``profile_time.UnitTimes`` metadata: ms less the kind's fixed overhead, or bytes
as MiB; ``_layer``), plus what other probes measured (static memory, gradients, workspace
``temp``, the batch's memory, ``runtime_mem``), the run's overhead, comm, bandwidth and
``comm_cpu``. Pure: plain numbers in, a ``Problem`` out.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import fields

from flexpipe_ui.problem import Layer, Problem, save_problem

__all__ = ["combine", "assemble", "context_groups", "stage_context", "merge_profiles"]

_MIB = float(2 ** 20)


def _measurements() -> dict[str, dict]:
    """The probe's measurements: ``profile_time.UnitTimes`` field → its metadata (unit, less)."""
    from .profile_time import UnitTimes
    return {f.name: dict(f.metadata) for f in fields(UnitTimes) if f.metadata.get("unit")}


def _combine(results: list[dict]) -> dict:
    """Mean over workers of each unit's medians; memory and names from worker 0."""
    base = results[0]
    units = {}
    for u, v in base["units"].items():
        units[u] = dict(v)
        for k in (k for k, m in _measurements().items() if m["unit"] == "ms"):
            units[u][k] = statistics.fmean(r["units"][u].get(k, 0.0) for r in results)
        units[u]["spread"] = max(_spread(r["units"][u]["samples"]) for r in results)
    ov = {k: statistics.fmean(r["overhead"][k] for r in results) for k in base["overhead"]}
    comms = [r["comm"] for r in results if r.get("comm")]
    comm = None
    if comms:
        comm = {"latency": comms[0]["latency"], "bandwidth": comms[0]["bandwidth"],
                "comm_cpu": statistics.fmean(c["comm_cpu"] for c in comms), "samples": comms[0]["samples"]}
    return {**base, "units": units, "overhead": ov, "comm": comm,
            "runtime_mem": max(r.get("runtime_mem", 0.0) for r in results),
            "copy_bandwidth": min((r["copy_bandwidth"] for r in results if r.get("copy_bandwidth")), default=None),
            "noise": {"repeats": base["noise"].get("repeats"),
                      "drift": max(r["noise"].get("drift", 0.0) for r in results),
                      "error": max(r["noise"].get("error", 0.0) for r in results)}}


def _spread(samples: dict) -> float:
    """Largest relative interquartile range of a unit's samples (the noise the median sits in)."""
    out = 0.0
    for vals in samples.values():
        if len(vals) >= 4 and statistics.median(vals) > 0:
            q = statistics.quantiles(vals, n=4)
            out = max(out, (q[2] - q[0]) / statistics.median(vals))
    return out


def _assemble(res: dict, job, *, ranks, optimizer, comm, memory_limit, path,
              dp: int = 1, dp_bandwidth: float | None = None) -> Problem:
    """The problem of the combined measurements ``res``; ``job``: the profile's ``_ProfileJob``
    (microbatches, repeats, warmup, processes); the rest: ``profile``'s settings."""
    ov = res["overhead"]
    state_factor = {"sgd": 2, "adamw": 4}.get(optimizer, 2)    # weight + grad (+ 2 Adam moments)
    ctx = stage_context(res["units"], ov, len(res["names"]))
    layers = [_layer(res["units"][(i,)], ov, ctx[i], name=name, mem=res["params"][i] * state_factor / _MIB,
                     grad=res["grads"][i] / _MIB, temp={k: v / _MIB for k, v in res["temps"][i].items()})
              for i, name in enumerate(res["names"])]
    c = res["comm"]
    stages = [{"layers": list(u), **{k: res["units"][u][k] for k in ("f", "b", "w", "bw")}}
              for u in res["units"] if len(u) > 1]
    meta = {"profiled": True, "model": res["model"], "device": res["device"], "dtype": res["dtype"],
            "units": "ms, MiB", "repeats": job.repeats, "warmup": job.warmup, "torch": res["torch"],
            "threads": res["threads"], "processes": job.world if job.spawned else 0,
            "spread": max(u["spread"] for u in res["units"].values()),
            "noise": dict(res.get("noise") or {}),
            "overhead_measured": dict(ov),
            "stage_context": [{k: round(v, 4) for k, v in c.items()} for c in ctx]}
    if stages:
        meta["stages"] = stages
    if c is not None:
        meta["comm_samples"] = [list(p) for p in c["samples"]]
    # the step's batch stays on the first stage's rank (inputs) and the last's (targets) all step
    # (``worker``: a rank keeps only what its stages read)
    per_mb_in, per_mb_tgt = res.get("data", (0, 0))
    layers[0]["mem"] += per_mb_in * job.microbatches / max(1, dp) / _MIB
    layers[-1]["mem"] += per_mb_tgt * job.microbatches / max(1, dp) / _MIB
    d = {"ranks": ranks, "microbatches": job.microbatches, "layers": layers,
         "comm": float(comm if comm is not None else (c["latency"] if c else 0.0)), "meta": meta}
    if memory_limit is not None:
        d["memory_limit"] = memory_limit
    from ..run.transport import RECEIVE_WINDOW, holds_sends
    d["recv_ahead"] = RECEIVE_WINDOW    # the transport's receive window: posted buffers are live
    if holds_sends(str(res["device"]).split(":")[0]):
        d["sends_held"] = True          # gloo: what a rank sent lives until its step's end
    if res.get("runtime_mem"):
        d["runtime_mem"] = res["runtime_mem"] / _MIB
    if res.get("copy_bandwidth"):       # GPUs only: bytes/ms of a pinned host copy, as MiB/ms
        d["copy_bandwidth"] = res["copy_bandwidth"] / _MIB
    if res["units"][(0,)]["deferred"]:
        d["data_input"] = True          # the first stage's I is a no-op, its W a fused backward
    bw = c["bandwidth"] if c and c["bandwidth"] != float("inf") else None
    if dp > 1:
        # the replicas' all-reduce bandwidth: given, else the point-to-point one measured here
        if dp_bandwidth is None and bw is None:
            raise ValueError("profile(dp > 1) needs dp_bandwidth (MiB/ms) when no bandwidth was measured")
        d["dp"], d["dp_bandwidth"] = dp, float(dp_bandwidth if dp_bandwidth is not None else bw)
    d.update({k: v for k, v in (("bandwidth", bw), ("overhead", dict(ov)),
                                ("comm_cpu", c["comm_cpu"] if c else None)) if v is not None})
    prob = Problem.from_dict(d)
    if path is not None:
        save_problem(prob, path)
    return prob


def context_groups(n: int, ranks: int) -> list[tuple[int, ...]]:
    """The layer groups the profiler also times whole: one stage per rank, split evenly (what
    1F1B-like plans run), those of two layers or more. A stage runs its layers one after another;
    timed one at a time a layer finds its weights and input still in cache from its own previous
    microbatch, inside a stage its neighbours have passed through (``stage_context``)."""
    from flexpipe_ui.problem import even_partition
    if n < 2:
        return []
    return [tuple(g) for g in even_partition(n, max(1, min(ranks, n // 2))) if len(g) > 1]


_KIND_FIELD = {"F": "f", "I": "b", "W": "w", "B": "bw"}


def stage_context(units: dict, ov: dict[str, float], n: int) -> list[dict[str, float]]:
    """Per layer and kind, how much slower it runs inside a stage than timed alone: over the groups
    timed whole that hold it, (group's time − one action's overhead) / Σ its layers' times
    (each less the overhead), averaged; 1 for a layer in no group. Measured on bench_truth's MLP:
    1.05-1.19 for small layers (weights of 1-4 MiB), 1.00 ± 0.03 for the GPT's and the conv
    model's (docs/cost_model.md, "Layers inside a stage")."""
    ratios: list[dict[str, list[float]]] = [{k: [] for k in _KIND_FIELD} for _ in range(n)]
    less = lambda t, k: max(t - ov[k], 1e-4)
    for u, v in units.items():
        if len(u) < 2:
            continue
        for k, f in _KIND_FIELD.items():
            if f in ("b", "w") and any(units[(i,)]["deferred"] for i in u):
                continue                             # the data-fed layer moves work from I to W
            parts = [less(units[(i,)][f], k) for i in u]
            whole = v[f] - ov[k]
            if whole > 0:
                for i in u:
                    ratios[i][k].append(whole / sum(parts))
    return [{k: (statistics.fmean(v) if v else 1.0) for k, v in r.items()} for r in ratios]


def _layer(u: dict, ov: dict, ctx: dict | None = None, **static) -> dict:
    """One profiled layer (a ``flexpipe-problem/1`` layer): each probe measurement named like a
    ``Layer`` field in its unit -- times less the fixed overhead of the kind their metadata names
    (the problem's ``overhead``), scaled by the layer's stage context for that kind (``ctx``:
    ``stage_context``), bytes as MiB -- plus ``static`` (name, mem, grad). A first layer fed by
    data has no input-gradient cost (its I deferred its work to W)."""
    vals = dict(static)
    names = {f.name for f in fields(Layer)}
    for k, meta in _measurements().items():
        if k not in names:
            continue
        if meta["unit"] == "bytes":
            vals[k] = u[k] / _MIB
        else:
            vals[k] = (max(u[k] - ov[meta["less"]], 1e-4) * (ctx or {}).get(meta["less"], 1.0)
                       if meta.get("less") else u[k])
    if u["deferred"]:
        vals["b"] = 0.0
    return vals


_COMM_MEASURED = ("comm", "bandwidth", "comm_cpu")
"""What the profiler's comm probe writes into the problem (``_assemble``)."""


def merge_profiles(problems: list[Problem]) -> Problem:
    """One profile of several taken of one model at different times: every time (each layer's
    times the probe measured, ``profile_time.UnitTimes``' ms fields; the overheads; comm,
    bandwidth, comm_cpu) the median over them, memory and everything else from the first, so a
    machine whose speed moves over minutes is seen at more moments than one profile sees (on the
    2-core VM it did not make predictions better: docs/cost_model.md, "Bracketing the runs").
    Profiles of different models or shapes are refused, naming the field that differs."""
    if not problems:
        raise ValueError("merge_profiles: no profiles given")
    first = problems[0]
    for k, p in enumerate(problems[1:], 1):
        for what, a, b in (("ranks", first.ranks, p.ranks), ("microbatches", first.microbatches, p.microbatches),
                           ("layers", first.num_layers, p.num_layers),
                           ("layer names", [l.name for l in first.layers], [l.name for l in p.layers])):
            if a != b:
                raise ValueError(f"merge_profiles: profile {k} has {what} {b}, profile 0 has {a}")
    med = lambda xs: None if any(x is None for x in xs) else statistics.median(xs)
    d = first.to_dict()
    layer_fields = {f.name for f in fields(Layer)}
    layer_ms = [k for k, m in _measurements().items() if m["unit"] == "ms" and k in layer_fields]
    for i, lay in enumerate(d["layers"]):
        for f in layer_ms:
            if f in lay:
                v = med([getattr(p.layers[i], f) for p in problems])
                if v is not None:
                    lay[f] = v
    for f in _COMM_MEASURED:
        if f in d:
            v = med([getattr(p, f) for p in problems])
            if v is not None:
                d[f] = v
    if isinstance(d.get("overhead"), dict):
        ovs = [p.overhead for p in problems]
        if all(isinstance(o, Mapping) for o in ovs):
            d["overhead"] = {k: statistics.median(o.get(k, 0.0) for o in ovs) for k in d["overhead"]}
    d.setdefault("meta", {})["merged"] = len(problems)
    return Problem.from_dict(d)


combine, assemble = _combine, _assemble
