"""The cost model: how long an action takes, what a cross-rank dependency costs, what memory an
action allocates and frees, the data-parallel all-reduce, and whether a peak fits a memory cap.

This is the one place these rules live (DESIGN.md, contract 4). The simulator (``sim``), the DSL's
list scheduler (``dsl.scheduler``), the exact CP-SAT polish (``search.exact``) and the search's
bounds (``search.bounds``) all take their timing and memory rules from here.

Default model (every optional field absent): an action lasts its kind's cost on its stage
(F: f, I: b, W: w, B: b + w); a dependency between two ranks adds ``comm``; a stage's activation
``act`` is held from its F's start to its W's (or B's) end. The optional problem fields switch on
extra terms, each neutral when absent:

- ``overhead`` (number or kind → time): added to every compute action's duration;
- layer ``bw``: a fused B lasts ``bw`` instead of b + w (so splitting costs b + w − bw more);
- ``bandwidth`` with layer ``out``: a cross-rank dependency costs ``comm + out / bandwidth``, where
  the message is the output of the producing stage's last layer (F→F), and the gradient of that
  same activation going back (I/B→I/B): ``out`` of the lower of the two stages;
- ``comm_cpu``: that fraction of each cross-rank message's transfer time (``out / bandwidth``)
  also lengthens the action that sends it and the action that receives it (CPU/gloo copies run
  on the ranks' own cores);
- layer ``act_w``: after I, ``act_w`` stays until W: ``act − act_w`` is freed at I's end (a
  negative amount, i.e. an allocation, when I leaves more behind than F did, e.g. the gradients
  a deferred W needs);
- ``data_input``: the model's first layer is fed data (token ids), so the first stage has no input
  gradient to send and, as torch's pipelining runtime and ours do, its I does nothing and its W
  runs the whole fused backward: stage 0's I costs 0 (no overhead), its W the fused ``bw``
  (+ B's overhead), and its activation is held whole until W (``fold_data_input``);
- ``dp``, ``dp_bandwidth``, layer ``grad``: with dp > 1 replicas each stage's gradient all-reduce
  costs ``2 (dp − 1) / dp · grad / dp_bandwidth``; it starts after the stage's last W/B, runs on its
  rank's own all-reduce lane (one at a time, in the order they become ready) and the step ends when
  the last one ends.

"Fits the cap" is ``fits``: one function, one tolerance (``FIT_TOL``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from .kinds import Kind, StageCost, get_kind

__all__ = ["StageCosts", "FIT_TOL", "fits", "fits_mask", "overhead_of", "duration_table", "edge_latency", "transfer_time",
           "action_durations", "switch_time", "switch_charge", "stage_switch", "message_size", "kind_memory_units", "memory_effects",
           "action_memory", "stage_memory", "backward_time", "fused_backward", "allreduce_time",
           "allreduce_lane", "stage_work", "first_backward", "hop_latency", "hops_latency",
           "layer_work", "layer_chain", "hold_area", "return_latency", "least_message",
           "least_hold", "plain_times", "fold_data_input"]

@dataclass(frozen=True, eq=False)
class StageCosts:
    """Per-virtual-stage costs (arrays indexed by stage) and the cross-rank latency."""

    f: np.ndarray
    b: np.ndarray
    w: np.ndarray
    act: np.ndarray
    mem: np.ndarray
    comm: float = 0.0
    # optional cost-model terms (``costmodel`` reads them; None / neutral: contract 4 exactly)
    bw: np.ndarray | None = None
    """Fused backward time per stage (None: b + w)."""
    act_w: np.ndarray | None = None
    """Activation held after I until W per stage (None: act)."""
    out: np.ndarray | None = None
    """MiB a stage sends onward (its last layer's ``out``), None: messages cost ``comm`` only."""
    grad: np.ndarray | None = None
    """MiB of gradients per stage (the data-parallel all-reduce)."""
    switch: np.ndarray | None = None
    """Extra time per stage of an action that follows another stage's action on its rank."""
    bandwidth: float | None = None
    overhead: float | Mapping[str, float] | None = None
    comm_cpu: float = 0.0
    dp: int = 1
    dp_bandwidth: float | None = None
    data_input: bool = False
    """Stage 0 is fed data: its I is a no-op, its W the fused backward (``costmodel.fold_data_input``)."""

    @property
    def num_stages(self) -> int:
        return len(self.f)

    def stage(self, s: int) -> StageCost:
        return StageCost(float(self.f[s]), float(self.b[s]), float(self.w[s]),
                         float(self.act[s]), float(self.mem[s]),
                         None if self.bw is None else float(self.bw[s]))

    def with_comm(self, comm: float) -> "StageCosts":
        return replace(self, comm=float(comm))


FIT_TOL = 1e-9
"""Relative tolerance (absolute below 1) of "peak fits the cap": float sums of activations may
overshoot a cap they exactly meet by an ulp."""


def fits(peak: float, cap: float | None) -> bool:
    """True when ``peak`` is within the memory ``cap`` (None: no cap), up to ``FIT_TOL``."""
    return cap is None or peak <= cap + FIT_TOL * max(1.0, abs(cap))


def fits_mask(peak, cap) -> np.ndarray:
    """``fits`` elementwise over arrays (``cap`` an array or a number, not None)."""
    cap = np.asarray(cap, float)
    return np.asarray(peak, float) <= cap + FIT_TOL * np.maximum(1.0, np.abs(cap))


# ---------------------------------------------------------------- durations

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
    if costs.act_w is not None:
        act_w = np.array(costs.act_w, float)
        act_w[0] = costs.act[0]
        out["act_w"] = act_w
    return replace(costs, **out)


# ---------------------------------------------------------------- memory

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


def _split_release(kind: Kind) -> int:
    """+1 for I (frees act − act_w at its end), −1 for W (frees that much less), else 0."""
    if kind.computes_input_grad and not kind.computes_weight_grad:
        return 1
    if kind.computes_weight_grad and not kind.computes_input_grad:
        return -1
    return 0


def stage_memory(kinds_per_stage: Sequence[Sequence[str]], costs: StageCosts, *, relaxed: bool = False
                 ) -> list[dict[str, tuple[float, float]]]:
    """Per stage, kind name → (MiB allocated at start, MiB changed at end) of one microbatch.
    ``relaxed``: ``act_w`` capped at ``act`` (what I leaves above F's allocation is not counted), for
    models that need every change to be a free and may under-count (the exact polish's bound)."""
    units = kind_memory_units(kinds_per_stage)
    if relaxed and costs.act_w is not None:
        costs = replace(costs, act_w=np.minimum(costs.act_w, costs.act))
    if costs.act_w is None:
        return [{k: (float(costs.act[s]) * ms, float(costs.act[s]) * me) for k, (ms, me) in eff.items()}
                for s, eff in enumerate(units)]
    release = {k: _split_release(get_kind(k)) for eff in units for k in eff}
    out = []
    for s, eff in enumerate(units):
        act = float(costs.act[s])
        early = act - float(costs.act_w[s])
        out.append({k: (act * ms, act * me - early * release[k]) for k, (ms, me) in eff.items()})
    return out


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
    return start, end


# ---------------------------------------------------------------- bounds' building blocks

def backward_time(costs: StageCosts) -> np.ndarray:
    """Per stage, the least time of the backward that sends the input gradient on (I or B)."""
    b = np.asarray(costs.b, float)
    return b if costs.bw is None else np.minimum(b, costs.bw)


def fused_backward(costs: StageCosts) -> np.ndarray:
    """Per stage, a fused B's duration (b + w unless ``bw`` says otherwise), without overhead."""
    return costs.b + costs.w if costs.bw is None else np.asarray(costs.bw, float)


def stage_work(costs: StageCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per stage, the least compute one microbatch needs: (forward, backward, total), the
    backward fused or split, whichever is less, overheads included:
    forward f + o_F, backward min(b + w + o_I + o_W, bw + o_B). Without the optional terms exactly
    (f, b + w, f + b + w) — the figures the bounds have always used."""
    if costs.bw is None and costs.overhead is None:
        return costs.f, costs.b + costs.w, costs.f + costs.b + costs.w
    o = {name: overhead_of(get_kind(name), costs) for name in ("F", "I", "W", "B")}
    fwd = costs.f + o["F"]
    bwd = np.minimum(costs.b + costs.w + (o["I"] + o["W"]), fused_backward(costs) + o["B"])
    return fwd, bwd, fwd + bwd


def first_backward(costs: StageCosts) -> float:
    """Stage 0's least backward (I + W split or B fused), the end of one microbatch's chain."""
    if costs.bw is None:
        return float(costs.b[0] + costs.w[0])
    return float(min(costs.b[0] + costs.w[0], costs.bw[0]))


def hops_latency(costs: StageCosts, cross) -> np.ndarray:
    """Cumulative latency of the rank crossings ``cross[s]`` (1 where stage s − 1 → s crosses
    ranks): entry s is what microbatch 0's forward has paid in messages on reaching stage s."""
    cross = np.asarray(cross)
    if costs.bandwidth is None or costs.out is None:
        return costs.comm * np.cumsum(cross)
    per = np.r_[0.0, hop_latency(costs, np.arange(len(cross) - 1))] if len(cross) else np.zeros(0)
    return np.cumsum(cross * per)


def layer_work(layers) -> np.ndarray:
    """Per layer, a lower bound of its compute per microbatch in any plan: f + b + w, or
    f + bw when a fused backward is cheaper (a stage's fused B costs Σ bw over its layers)."""
    return np.array([l.f + l.b + l.w if l.bw is None else min(l.f + l.b + l.w, l.f + l.bw)
                     for l in layers], float)


def layer_chain(layers) -> float:
    """One microbatch's forward through every layer, its input gradient back and layer 0's W
    (the least of split and fused where ``bw`` is set): a chain every plan contains."""
    if not layers:
        return 0.0
    if all(l.bw is None for l in layers):
        return sum(l.f + l.b for l in layers) + layers[0].w
    l0 = layers[0]
    first = l0.b + l0.w if l0.bw is None else min(l0.b + l0.w, l0.bw)
    return (sum(l.f for l in layers) + first
            + sum(l.b if l.bw is None else min(l.b, l.bw) for l in layers[1:]))


def return_latency(costs: StageCosts, up) -> np.ndarray:
    """Cumulative latency of the crossings ``up[s]`` (1 where stage s → s + 1 crosses ranks) from
    stage s to the last: what a gradient pays in messages coming back down to s."""
    up = np.asarray(up, float)
    if costs.bandwidth is None or costs.out is None:
        return costs.comm * np.cumsum(up[::-1])[::-1]
    lat = up * hop_latency(costs, np.arange(len(up)))
    return np.cumsum(lat[::-1])[::-1]


def least_message(problem) -> float:
    """The least a message between two ranks can cost in any plan (``comm``, plus the smallest
    layer output that can cross over the bandwidth)."""
    if problem.bandwidth is None or all(l.out is None for l in problem.layers[:-1]):
        return problem.comm
    return problem.comm + min(l.out or 0.0 for l in problem.layers[:-1]) / problem.bandwidth


def least_hold(costs: StageCosts) -> np.ndarray:
    """Per stage, the activation one microbatch holds at its F's end (whatever the backward)."""
    return costs.act


def plain_times(costs: StageCosts) -> bool:
    """True when no optional term changes an action's time or a message's latency."""
    return costs.bw is None and costs.overhead is None and (costs.bandwidth is None or costs.out is None)


def hold_area(costs: StageCosts, cross) -> np.ndarray:
    """Per stage, the least activation × time one microbatch holds on a placement whose rank
    crossings are ``cross[s]`` (s → s + 1): from its F's start through the forward of the later
    stages, their input-gradient backwards and the messages both ways, then ``act`` until I's end
    and ``act_w`` until W's end (split), or ``act`` until B's end (fused), whichever is less."""
    cross = np.asarray(cross, float)
    tail_f = np.cumsum(costs.f[::-1])[::-1]
    if plain_times(costs) and costs.act_w is None:  # act · (F(s..) + I(s..) + W(s) + messages)
        tail_b = np.cumsum(costs.b[::-1])[::-1]
        return costs.act * (tail_f + tail_b + costs.w + 2.0 * return_latency(costs, cross))
    tail_bt = np.r_[np.cumsum(backward_time(costs)[::-1])[::-1][1:], 0.0]
    to_backward = tail_f + tail_bt + 2.0 * return_latency(costs, cross)
    act_w = costs.act if costs.act_w is None else costs.act_w
    split = costs.act * (to_backward + costs.b) + act_w * costs.w
    fused = costs.act * (to_backward + fused_backward(costs))
    return np.minimum(split, fused)


# ---------------------------------------------------------------- data parallel

def allreduce_time(costs: StageCosts) -> np.ndarray | None:
    """Per stage, its gradient all-reduce time ``2 (dp − 1) / dp · grad / dp_bandwidth``; None
    when there is no all-reduce (dp 1 or no ``grad``)."""
    if costs.dp <= 1 or costs.grad is None or costs.dp_bandwidth is None:
        return None
    return 2.0 * (costs.dp - 1) / costs.dp * np.asarray(costs.grad, float) / costs.dp_bandwidth


def allreduce_lane(stage_rank: Sequence[int], last_backward_end: np.ndarray, costs: StageCosts
                   ) -> list[tuple[int, int, float, float]] | None:
    """(rank, stage, start, end) of each stage's all-reduce on its rank's all-reduce lane: it
    starts after the stage's last W/B (``last_backward_end[s]``) and after the lane's previous
    all-reduce, taken in the order they become ready (ties: higher stage first, as the backward
    runs). None when there is no all-reduce."""
    t = allreduce_time(costs)
    if t is None:
        return None
    free: dict[int, float] = {}
    out = []
    for s in sorted(range(len(stage_rank)), key=lambda s: (last_backward_end[s], -s)):
        r = int(stage_rank[s])
        st = max(float(last_backward_end[s]), free.get(r, 0.0))
        free[r] = st + float(t[s])
        out.append((r, s, st, free[r]))
    return out
