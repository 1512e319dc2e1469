"""The data-parallel gradient all-reduce: its time per stage and its lane."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .stage import StageCosts

__all__ = ["allreduce_time", "allreduce_lane"]


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
