"""Building blocks of the search's lower bounds: true lower bounds under every term (the least of
fused and split backward, overheads counted, message sizes on crossings)."""
from __future__ import annotations

import numpy as np

from ..kinds import get_kind
from .durations import hop_latency, overhead_of
from .stage import StageCosts, fused_backward

__all__ = ["backward_time", "stage_work", "first_backward", "hops_latency", "layer_work", "layer_chain",
           "return_latency", "least_message", "least_hold", "plain_times", "hold_area"]


def backward_time(costs: StageCosts) -> np.ndarray:
    """Per stage, the least time of the backward that sends the input gradient on (I or B)."""
    b = np.asarray(costs.b, float)
    return b if costs.bw is None else np.minimum(b, costs.bw)


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
