"""What memory an action allocates and frees, what a placement adds, and when gradients appear."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..kinds import Kind, get_kind
from .stage import StageCosts, _split_release

__all__ = ["place_memory", "kind_memory_units", "memory_effects", "kind_temp", "stage_memory", "action_memory",
           "rank_static", "grad_events", "send_events", "first_grad_rise"]


def place_memory(costs: StageCosts, placement) -> StageCosts:
    """The memory a placement decides, with ``recv_ahead`` and ``out`` (else ``costs`` as is).

    A message arrives in a fresh buffer. A stage whose input comes from another rank keeps that
    buffer (its predecessor's ``out``) as long as its activation: the stage's ``act`` (and
    ``act_w``) grow by it (on the same rank the input is the producer's output, already counted).
    Each rank also holds the receive buffers its runtime posts ahead, ``recv_ahead`` per inbound
    channel (a rank pair and direction), each the channel's largest message: added to ``mem`` of
    the rank's first stage."""
    if costs.recv_ahead is None or costs.out is None or not costs.num_stages:
        return costs
    place = [int(r) for r in placement]
    out = np.asarray(costs.out, float)
    held = np.zeros(costs.num_stages)
    channel: dict[tuple[int, int], float] = {}
    for s in range(1, costs.num_stages):
        a, b = place[s - 1], place[s]
        if a != b:
            held[s] = out[s - 1]
            for key in ((a, b), (b, a)):                 # the activation forward, its gradient back
                channel[key] = max(channel.get(key, 0.0), out[s - 1])
    mem = np.array(costs.mem, float)
    for (_, dst), size in channel.items():
        mem[place.index(dst)] += costs.recv_ahead * size
    extra = {"act": costs.act + held, "mem": mem}
    if costs.act_w is not None:
        extra["act_w"] = costs.act_w + held
    return replace(costs, **extra)


def kind_memory_units(kinds_per_stage: Sequence[Sequence[str]]) -> list[dict[str, tuple[float, float]]]:
    """Per stage, kind name → (mem_start, mem_end) in units of the stage's activation, with the
    ``adjust`` of the other kinds on that stage applied (recompute makes F free at its end)."""
    spec = {k: get_kind(k) for k in {k for ks in kinds_per_stage for k in ks}}
    out = []
    for ks in kinds_per_stage:
        eff = {k: [spec[k].mem_start, spec[k].mem_end] for k in ks}
        for k in ks:
            for target, (ds, de) in spec[k].adjust.items():
                if target in eff:
                    eff[target][0] += ds
                    eff[target][1] += de
        out.append({k: (a, b) for k, (a, b) in eff.items()})
    return out


memory_effects = kind_memory_units


_TEMP_OF = {"R": "F"}
"""Kinds whose workspace is another kind's: recompute re-runs the forward."""


def kind_temp(kind: Kind, costs: StageCosts) -> np.ndarray:
    """Per stage, the MiB an action of ``kind`` rises above what it holds while it runs (the
    layer field ``temp``, a stage's the largest of its layers'; zeros without it)."""
    if costs.temp is None:
        return np.zeros(costs.num_stages)
    got = costs.temp.get(_TEMP_OF.get(kind.name, kind.name))
    return np.zeros(costs.num_stages) if got is None else np.asarray(got, float)


def _with_temp(start, end, temp):
    """An action's (start, end) memory change with its workspace ``temp`` on top: allocated at its
    start, above the higher of its start and end levels (an allocation at its end moves to its
    start), freed at its end."""
    rise = np.maximum(end, 0.0)
    return start + temp + rise, end - temp - rise


def stage_memory(kinds_per_stage: Sequence[Sequence[str]], costs: StageCosts, *, relaxed: bool = False
                 ) -> list[dict[str, tuple[float, float]]]:
    """Per stage, kind name → (MiB allocated at start, MiB changed at end) of one microbatch.
    ``relaxed``: ``act_w`` capped at ``act`` (what I leaves above F's allocation is not counted), for
    models that need every change to be a free and may under-count (the exact polish's bound)."""
    units = kind_memory_units(kinds_per_stage)
    if relaxed and costs.act_w is not None:
        costs = replace(costs, act_w=np.minimum(costs.act_w, costs.act))
    if costs.act_w is None:
        return _stage_temp([{k: (float(costs.act[s]) * ms, float(costs.act[s]) * me) for k, (ms, me) in eff.items()}
                            for s, eff in enumerate(units)], costs, relaxed)
    release = {k: _split_release(get_kind(k)) for eff in units for k in eff}
    out = []
    for s, eff in enumerate(units):
        act = float(costs.act[s])
        early = act - float(costs.act_w[s])
        out.append({k: (act * ms, act * me - early * release[k]) for k, (ms, me) in eff.items()})
    return _stage_temp(out, costs, relaxed)


def _stage_temp(out: list[dict[str, tuple[float, float]]], costs: StageCosts, relaxed: bool):
    """``stage_memory``'s rows with each kind's workspace (``kind_temp``) added; ``relaxed``
    leaves it out (it only adds)."""
    if costs.temp is None or relaxed:
        return out
    temps = {k: kind_temp(get_kind(k), costs) for row in out for k in row}
    rows = []
    for s, row in enumerate(out):
        new = {}
        for k, (ms, me) in row.items():
            a, b = _with_temp(np.float64(ms), np.float64(me), temps[k][s])
            new[k] = (float(a), float(b))
        rows.append(new)
    return rows


def action_memory(acts, kid: np.ndarray, klist: Sequence[Kind], stage: np.ndarray,
                  costs: StageCosts) -> tuple[np.ndarray, np.ndarray]:
    """(MiB allocated at start, MiB changed at end) per action of a timeline.

    Each kind's ``mem_start``/``mem_end`` (units of its stage's ``act``) plus the ``adjust`` that
    user kinds apply to other kinds on the same (stage, microbatch); with ``act_w`` the part of the
    activation above it is freed at I's end instead of W's."""
    n = len(acts)
    act = costs.act[stage] if n else np.zeros(0)
    ms = np.array([k.mem_start for k in klist], float)[kid] if n else np.zeros(0)
    me = np.array([k.mem_end for k in klist], float)[kid] if n else np.zeros(0)
    adjusting = [i for i, a in enumerate(acts) if a.kind.adjust] if any(k.adjust for k in klist) else []
    if adjusting:
        ms, me = ms.copy(), me.copy()
        where = {a.key: i for i, a in enumerate(acts)}
        for i in adjusting:
            a = acts[i]
            for target, (ds, de) in a.kind.adjust.items():
                j = where.get((a.stage, target, a.microbatch))
                if j is not None:
                    ms[j] += ds
                    me[j] += de
    start, end = ms * act, me * act
    if costs.act_w is not None and n:
        rel = np.array([_split_release(k) for k in klist], float)[kid]
        end = end - rel * (act - np.asarray(costs.act_w, float)[stage])
    if costs.temp is not None and n:
        temp = np.array([kind_temp(k, costs) for k in klist])[kid, stage]
        start, end = _with_temp(start, end, temp)
    return start, end


def rank_static(costs: StageCosts, placement, ranks: int) -> np.ndarray:
    """Per rank, what it holds when a step starts: Σ ``mem`` of its stages, less their ``grad``
    (a stage's gradients are allocated by its first weight-gradient action: ``grad_events``), plus
    ``runtime_mem`` (the libraries' workspaces)."""
    static = np.zeros(ranks)
    grad = np.zeros(costs.num_stages) if costs.grad is None else np.asarray(costs.grad, float)
    used = set()
    for s, r in enumerate(placement):
        if s < costs.num_stages and r < ranks:
            static[r] += costs.mem[s] - min(grad[s], costs.mem[s])
            used.add(r)
    for r in used:                          # the runtime's own (cuBLAS workspaces), once a rank
        static[r] += costs.runtime_mem
    return static


def first_grad_rise(layers, kind: str) -> float:
    """How far a stage's first weight-gradient action of ``kind`` rises above its start, its new
    gradients included (``StageCosts.grad_first``), from its layers' ``grad``, ``temp`` and ``act``.

    A layer's steady-state workspace ``temp`` is mostly its fresh weight gradient, made before it
    is added into ``.grad``; in the step's first such action that gradient *becomes* ``.grad``
    (``split_backward._accumulate``), so the layer rises by the larger of the two, not by both
    (bench_truth's GPT head: temp W 6.0 MiB, grad 6.0: the first W rose 7.7, grads + workspace
    predicted 13.7). Split W (``"W"``) runs the layers in forward order, frees its activation at
    its end: layer l stands on the gradients of the layers before it. A fused backward (``"B"``)
    runs them last first and frees each layer's activation as it passes: layer l stands on the
    gradients less the activations of the layers after it."""
    grad = [l.grad or 0.0 for l in layers]
    rise = [max((l.temp or {}).get(kind, 0.0), g) for l, g in zip(layers, grad)]
    if kind == "B":
        net = np.cumsum([g - l.act for l, g in zip(layers, grad)][::-1])[::-1]
        below = np.r_[net[1:], 0.0] if len(layers) else net
    else:
        below = np.r_[0.0, np.cumsum(grad)[:-1]] if len(layers) else np.zeros(0)
    return float(max([max(0.0, b + r) for b, r in zip(below, rise)], default=0.0))


def grad_events(kinds: Sequence[Kind], kid: np.ndarray, stage: np.ndarray, rank: np.ndarray,
                start: np.ndarray, costs: StageCosts, end: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, time, MiB) of each stage's gradients coming into existence: at the start of its first
    action (in time) that computes weight gradients (W, B), where autograd allocates ``.grad``
    (they are freed at the step's end, after the optimizer). With ``grad_first`` (and ``end``) that
    action rises to ``grad_first`` of its kind above its start, its workspace ``temp`` included
    (``first_grad_rise``), and holds the whole ``grad`` after its end. Empty without ``grad``."""
    if costs.grad is None or not len(kid):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    wg = np.array([k.computes_weight_grad for k in kinds], bool)[kid]
    idx = np.flatnonzero(wg)
    idx = idx[np.lexsort((start[idx], stage[idx]))]
    first = idx[np.r_[True, stage[idx][1:] != stage[idx][:-1]]] if len(idx) else idx
    grad = np.minimum(np.asarray(costs.grad, float), costs.mem)[stage[first]]
    keep = grad > 0
    first, grad = first[keep], grad[keep]
    rise = costs.grad_first or {}
    known = np.array([kinds[kid[i]].name in rise for i in first], bool) if end is not None else np.zeros(len(first), bool)
    if not known.any():
        return rank[first], start[first], grad
    at_start = grad.copy()
    for j in np.flatnonzero(known):
        i, k = first[j], kinds[kid[first[j]]]
        at_start[j] = rise[k.name][stage[i]] - kind_temp(k, costs)[stage[i]]
    fk = first[known]
    return (np.concatenate([rank[first], rank[fk]]), np.concatenate([start[first], end[fk]]),
            np.concatenate([at_start, grad[known] - at_start[known]]))


def send_events(acts, kinds: Sequence[Kind], kid: np.ndarray, stage: np.ndarray, rank: np.ndarray,
                end: np.ndarray, costs: StageCosts, placement) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, time, MiB) of what a sender keeps of the messages it sent, with ``sends_held`` (gloo:
    a send completes only when waited for, and the runtime waits for a step's sends at its end, so
    every sent tensor lives until then; freed after the step's peak, never here).

    - a gradient sent upstream (by an I or B whose predecessor stage is on another rank) is a new
      tensor, the predecessor's ``out``: held from the action's end;
    - an activation sent onward is the stage's output, already in its activation (``act`` counts
      the output) until the stage's backward frees it: held from then, the end of the (stage,
      microbatch)'s last backward action (or of its F, where a recompute kind frees F's activation
      at F's end).
    Empty without ``sends_held`` or ``out``."""
    if not costs.sends_held or costs.out is None or not len(kid):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    place = np.asarray([int(r) for r in placement], np.int64)
    S = len(place)
    out = np.asarray(costs.out, float)
    fwd = np.array([k.is_forward for k in kinds], bool)[kid]
    back = np.array([k.is_backward for k in kinds], bool)[kid]
    grad = np.array([k.computes_input_grad for k in kinds], bool)[kid]
    frees_f = np.array([any(t == "F" and de < 0 for t, (_, de) in k.adjust.items()) for k in kinds], bool)[kid]
    mb = np.array([a.microbatch for a in acts], np.int64)
    key = stage * (int(mb.max()) + 1) + mb
    n_keys = int(key.max()) + 1
    last_back = np.full(n_keys, -np.inf)
    np.maximum.at(last_back, key[back], end[back])
    f_end = np.full(n_keys, -np.inf)
    np.maximum.at(f_end, key[fwd], end[fwd])
    by_f = np.zeros(n_keys, bool)
    by_f[key[frees_f]] = True
    held_from = np.where(by_f | ~np.isfinite(last_back), f_end, last_back)
    sends_act = fwd & (stage < S - 1)
    sends_act[sends_act] = place[stage[sends_act] + 1] != place[stage[sends_act]]
    sends_grad = grad & (stage > 0)
    sends_grad[sends_grad] = place[stage[sends_grad] - 1] != place[stage[sends_grad]]
    ia, ig = np.flatnonzero(sends_act), np.flatnonzero(sends_grad)
    r = np.concatenate([rank[ia], rank[ig]])
    t = np.concatenate([held_from[key[ia]], end[ig]])
    d = np.concatenate([out[stage[ia]], out[stage[ig] - 1]])
    keep = (d > 0) & np.isfinite(t)
    return r[keep], t[keep], d[keep]
