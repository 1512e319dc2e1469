"""How long an action takes and what a cross-rank dependency costs (kind costs, overhead,
message sizes over the bandwidth, ``comm_cpu``, ``switch``, the data-fed first stage)."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from ..kinds import Kind, get_kind
from .spend import nograd_forwards
from .stage import StageCosts, _split_release, fused_backward

__all__ = ["overhead_of", "duration_table", "message_size", "transfer_time", "edge_latency", "hop_latency",
           "stage_switch", "switch_charge", "switch_time", "action_durations", "fold_data_input"]


def overhead_of(kind: Kind, costs: StageCosts) -> float:
    """Per-action overhead of ``kind``: the problem's ``overhead`` for compute actions (a number),
    or its entry for the kind's name (a mapping); 0 when unset."""
    ov = costs.overhead
    if ov is None:
        return 0.0
    if isinstance(ov, Mapping):
        return float(ov.get(kind.name, 0.0))
    return float(ov) if kind.occupies_compute else 0.0


def duration_table(kinds: Sequence[Kind], costs: StageCosts) -> np.ndarray:
    """(kind id × stage) → duration: each kind's cost function plus its per-action overhead.

    Without the optional terms this is exactly each kind's cost (F: f, I: b, W: w, B: b + w)."""
    S = costs.num_stages
    tab = np.zeros((len(kinds), S))
    for s in range(S):
        sc = costs.stage(s)
        for k, kind in enumerate(kinds):
            tab[k, s] = kind.cost(sc)
    if costs.overhead is not None:
        tab = tab + np.array([overhead_of(k, costs) for k in kinds])[:, None]
        if costs.data_input and S:      # stage 0's I is a no-op; its W is a fused backward
            fused = get_kind("B")
            for k, kind in enumerate(kinds):
                role = _split_release(kind)
                if role == 1:
                    tab[k, 0] -= overhead_of(kind, costs)
                elif role == -1:
                    tab[k, 0] += overhead_of(fused, costs) - overhead_of(kind, costs)
    if (tab < 0).any():
        k, s = np.argwhere(tab < 0)[0]
        raise ValueError(f"kind {kinds[k].name} has negative duration {tab[k, s]} on stage {s}")
    return tab


def message_size(costs: StageCosts, src_stage, dst_stage) -> np.ndarray:
    """MiB of the message between two stages: ``out`` of the lower one (F→F carries the lower
    stage's output, I/B→I/B its gradient); 0 without ``out``."""
    src_stage, dst_stage = np.asarray(src_stage), np.asarray(dst_stage)
    if costs.out is None:
        return np.zeros(src_stage.shape)
    return np.asarray(costs.out, float)[np.minimum(src_stage, dst_stage)]


def transfer_time(costs: StageCosts, src_rank, dst_rank, src_stage, dst_stage) -> np.ndarray:
    """Time to move the bytes of dependencies src → dst: ``out / bandwidth`` across ranks, else 0
    (and 0 without ``bandwidth`` or ``out``)."""
    cross = np.asarray(src_rank) != np.asarray(dst_rank)
    if costs.bandwidth is None or costs.out is None:
        return np.zeros(cross.shape)
    return np.where(cross, message_size(costs, src_stage, dst_stage) / costs.bandwidth, 0.0)


def edge_latency(costs: StageCosts, src_rank, dst_rank, src_stage, dst_stage) -> np.ndarray:
    """Cost of dependencies src → dst: 0 on the same rank, else ``comm`` (+ ``out / bandwidth``)."""
    cross = np.asarray(src_rank) != np.asarray(dst_rank)
    if costs.bandwidth is None or costs.out is None:
        return np.where(cross, costs.comm, 0.0)
    return np.where(cross, costs.comm + transfer_time(costs, src_rank, dst_rank, src_stage, dst_stage), 0.0)


def hop_latency(costs: StageCosts, stage) -> np.ndarray:
    """Cost of the message between stage s and s + 1 (either way) if they are on different ranks."""
    stage = np.asarray(stage)
    if costs.bandwidth is None or costs.out is None:
        return np.full(stage.shape, float(costs.comm))
    return costs.comm + np.asarray(costs.out, float)[stage] / costs.bandwidth


def stage_switch(costs: StageCosts) -> np.ndarray:
    """Per stage, the ``switch`` time an action of it pays after another stage's action on its
    rank (zeros without the field)."""
    if costs.switch is None:
        return np.zeros(costs.num_stages)
    return np.asarray(costs.switch, float)


def switch_charge(g, costs: StageCosts, dur: np.ndarray | None = None) -> np.ndarray:
    """Per action of a compiled graph: what it pays when its lane's previous action ran another
    stage -- its stage's ``switch`` if it occupies compute and is not a no-op (a no-op touches
    nothing); ``dur``: the actions' order-free durations, when the caller has them."""
    if dur is None:
        dur = duration_table(g.kinds, costs)[g.kind, g.stage] if g.n else np.zeros(0)
    occupies = np.array([k.occupies_compute for k in g.kinds], bool)[g.kind]
    return np.where(occupies & (dur > 0), stage_switch(costs)[g.stage], 0.0)


def switch_time(g, costs: StageCosts, dur: np.ndarray | None = None) -> np.ndarray:
    """Per action of a compiled graph: its ``switch_charge`` when the previous action on its lane
    ran another stage (0 for a lane's first action, and without ``switch``). It depends on the
    order, so only a fixed order can charge it: the simulator does, the list scheduler charges it
    as it dispatches (``dsl.scheduler``), and the exact polish and the search's bounds leave it
    out (their bounds stay lower bounds: it only adds)."""
    n = g.n
    if costs.switch is None or n == 0:
        return np.zeros(n)
    order = np.lexsort((g.lane_pos, g.lane))
    lane, stage = g.lane[order], g.stage[order]
    changed = np.r_[False, (lane[1:] == lane[:-1]) & (stage[1:] != stage[:-1])]
    out = np.zeros(n)
    out[order] = np.where(changed, switch_charge(g, costs, dur)[order], 0.0)
    return out


def action_durations(g, costs: StageCosts, *, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(duration per action, latency per dependency edge) of a compiled graph (``graph.Graph``).

    With ``comm_cpu`` the sending and the receiving action of each cross-rank edge are lengthened
    by that fraction of the message's transfer time (``out / bandwidth``). ``ordered``: the graph's
    lane order is the one that runs, so ``switch_time`` is charged (False: order-free durations,
    for a skeleton or an order still to be chosen)."""
    n = g.n
    dur = duration_table(g.kinds, costs)[g.kind, g.stage] if n else np.zeros(0)
    if costs.f_nograd is not None and n:
        nograd = nograd_forwards(g)       # forwards a recompute re-runs: no autograd graph
        if nograd.any():
            dur = dur.copy()
            dur[nograd] += (costs.f_nograd - costs.f)[g.stage[nograd]]
    if ordered and costs.switch is not None:
        dur = dur + switch_time(g, costs, dur)
    ends = (g.rank[g.src], g.rank[g.dst], g.stage[g.src], g.stage[g.dst])
    lat = edge_latency(costs, *ends)
    if costs.comm_cpu and len(lat):
        busy = costs.comm_cpu * transfer_time(costs, *ends)
        dur = dur + np.bincount(g.src, weights=busy, minlength=n) + np.bincount(g.dst, weights=busy, minlength=n)
    return dur, lat


def fold_data_input(costs: StageCosts) -> StageCosts:
    """The first stage fed by data (``data_input``): its I costs nothing, its W the fused backward
    (``bw``, or b + w), and it keeps its whole activation until W (``act_w`` = ``act``). Measured
    on CPU: that stage's I took 5 µs and its W the time of a fused B (docs/cost_model.md)."""
    if not costs.data_input or not costs.num_stages:
        return costs
    b, w = np.array(costs.b, float), np.array(costs.w, float)
    w[0] = fused_backward(costs)[0]
    b[0] = 0.0
    out = {"b": b, "w": w}
    if costs.temp is not None:          # its I allocates nothing, its W is a fused backward's
        temp = {k: np.array(v, float) for k, v in costs.temp.items()}
        if "I" in temp:
            temp["I"][0] = 0.0
        if "B" in temp:
            temp.setdefault("W", np.zeros(costs.num_stages))[0] = temp["B"][0]
        out["temp"] = temp
    if costs.act_w is not None:
        act_w = np.array(costs.act_w, float)
        act_w[0] = costs.act[0]
        out["act_w"] = act_w
    if costs.grad_first is not None and "B" in costs.grad_first:
        first = {k: np.array(v, float) for k, v in costs.grad_first.items()}
        first.setdefault("W", np.zeros(costs.num_stages))[0] = first["B"][0]
        out["grad_first"] = first
    return replace(costs, **out)
