"""Spending time to save memory: recompute (full and selective), offload copies, torch's liveness.

- ``f_nograd`` (layer): a microbatch whose forward a recompute ``R`` re-runs first runs its forward
  without autograd's graph (the runtime wraps it in ``torch.no_grad``), so that F lasts
  ``f_nograd``; ``R`` lasts ``f`` (it builds the graph). ``nograd_forwards`` finds those F actions.
- ``act_sel`` / ``f_sel`` (layer): selective recompute keeps the expensive ops' outputs (matmuls)
  and re-runs the cheap ones inside the backward (Megatron's ``--recompute-granularity
  selective``, Korthikanti et al. 2022): a stage under it holds ``act − act_sel`` and its
  backward (I, or a fused B) lasts ``f_sel`` longer (``selective_recompute``).
- ``copy_bandwidth`` (problem): ``OFF``/``LOAD`` move a stage's activation at that rate on the
  rank's copy lane (``copy_time``, read by ``ops.register_offload``'s kinds).
- ``torch_liveness`` (problem): torch.distributed.pipelining's memory analysis frees nothing at I;
  a split backward's activation lives until W (``fold_liveness``), so an exported plan's peaks
  match torch's own.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .stage import StageCosts

__all__ = ["fold_liveness", "selective_recompute", "nograd_forwards", "copy_time"]


def fold_liveness(costs: StageCosts) -> StageCosts:
    """With ``torch_liveness`` a split backward's I frees nothing: ``act_w`` is at least ``act``."""
    if not costs.torch_liveness:
        return costs
    act_w = costs.act if costs.act_w is None else np.maximum(costs.act_w, costs.act)
    return replace(costs, act_w=np.array(act_w, float))


def selective_recompute(costs: StageCosts, stages=None) -> StageCosts:
    """``costs`` with selective recompute on ``stages`` (default every stage): each holds
    ``act_sel`` less (and, after I, ``act_w`` less by the same) and its backward input pass (I,
    and a fused B) runs ``f_sel`` longer. Without ``act_sel`` nothing changes."""
    if costs.act_sel is None:
        return costs
    on = np.zeros(costs.num_stages, bool)
    on[list(range(costs.num_stages)) if stages is None else list(stages)] = True
    sel = np.where(on, np.minimum(costs.act_sel, costs.act), 0.0)
    extra = np.where(on, costs.f_sel if costs.f_sel is not None else 0.0, 0.0)
    out = {"act": costs.act - sel, "b": costs.b + extra}
    if costs.bw is not None:
        out["bw"] = costs.bw + extra
    if costs.act_w is not None:
        out["act_w"] = np.maximum(costs.act_w - sel, 0.0)
    return replace(costs, **out)


def nograd_forwards(g) -> np.ndarray:
    """Per action of a compiled graph: True for an F whose (stage, microbatch) also has an ``R``."""
    n = g.n
    if n == 0:
        return np.zeros(0, bool)
    names = [k.name for k in g.kinds]
    if "R" not in names:
        return np.zeros(n, bool)
    rid, fid = names.index("R"), names.index("F") if "F" in names else -1
    S = int(g.stage.max()) + 1
    key = g.stage.astype(np.int64) + S * g.mb.astype(np.int64)
    has_r = np.isin(key, key[g.kind == rid])
    return (g.kind == fid) & has_r


def copy_time(act: float, copy_bandwidth: float | None, default_rate: float) -> float:
    """One offload or reload copy of ``act`` MiB: ``act / copy_bandwidth``, else ``default_rate``
    per MiB."""
    if copy_bandwidth:
        return act / copy_bandwidth
    return default_rate * act
