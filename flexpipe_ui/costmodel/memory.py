"""What memory an action allocates and frees, what a placement adds, and when gradients appear."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..kinds import Kind, get_kind
from .stage import StageCosts, _split_release

__all__ = ["place_memory", "kind_memory_units", "memory_effects", "kind_temp", "stage_memory", "action_memory",
           "rank_static", "grad_events"]


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


def grad_events(kinds: Sequence[Kind], kid: np.ndarray, stage: np.ndarray, rank: np.ndarray,
                start: np.ndarray, costs: StageCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, time, MiB) of each stage's gradients coming into existence: at the start of its first
    action (in time) that computes weight gradients (W, B), where autograd allocates ``.grad``
    (they are freed at the step's end, after the optimizer). Empty without ``grad``."""
    if costs.grad is None or not len(kid):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    wg = np.array([k.computes_weight_grad for k in kinds], bool)[kid]
    idx = np.flatnonzero(wg)
    idx = idx[np.lexsort((start[idx], stage[idx]))]
    first = idx[np.r_[True, stage[idx][1:] != stage[idx][:-1]]] if len(idx) else idx
    grad = np.minimum(np.asarray(costs.grad, float), costs.mem)[stage[first]]
    keep = grad > 0
    return rank[first][keep], start[first][keep], grad[keep]
