"""The cost model's optional fields (problem ``bandwidth``, ``overhead``, ``comm_cpu``; layer ``out``,
``bw``, ``act_w``) as the profiler and ``calibrate`` write and read them.

The runtime builds problems as ``flexpipe-problem/1`` dicts and loads them with
``flexpipe_ui.problem`` (whose ``Problem``/``Layer`` carry the fields); ``cost_fields`` reads them
back in one normalised dict (overhead as kind → ms).
"""
from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

from flexpipe_ui.problem import Problem, ProblemError

__all__ = ["PROBLEM_FIELDS", "LAYER_FIELDS", "KINDS", "_with_cost_fields", "cost_fields",
           "problem_dict"]

PROBLEM_FIELDS = ("bandwidth", "overhead", "comm_cpu")
LAYER_FIELDS = ("out", "bw", "act_w", "grad", "switch")
KINDS = ("F", "I", "W", "B")


def _clean(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _with_cost_fields(problem_dict: Mapping[str, Any], *, bandwidth: float | None = None,
                      overhead: Mapping[str, float] | float | None = None, comm_cpu: float | None = None,
                      layers: Sequence[Mapping[str, float]] | None = None) -> Problem:
    """``problem_dict`` plus the cost fields, loaded as a ``Problem``. ``layers[i]`` holds layer i's
    ``out``/``bw``/``act_w`` (None entries are left out: the cost model's defaults apply)."""
    d = copy.deepcopy(dict(problem_dict))
    top = _clean({"bandwidth": bandwidth, "overhead": dict(overhead) if isinstance(overhead, Mapping)
                  else overhead, "comm_cpu": comm_cpu})
    per_layer = [_clean(dict(l)) for l in (layers or [])]
    if per_layer and len(per_layer) != len(d["layers"]):
        raise ProblemError(f"cost fields for {len(per_layer)} layers but the problem has {len(d['layers'])}")
    full = copy.deepcopy(d)
    full.update(top)
    for ld, extra in zip(full["layers"], per_layer):
        ld.update(extra)
    return Problem.from_dict(full)


def cost_fields(problem: Problem) -> dict:
    """{"bandwidth", "overhead" (kind → ms), "comm_cpu", "layers": [{"out", "bw", "act_w"}]} of a
    problem; absent fields are None / {}."""
    top = {k: getattr(problem, k, None) for k in PROBLEM_FIELDS}
    layers = [{k: getattr(l, k, None) for k in LAYER_FIELDS} for l in problem.layers]
    ov = top.get("overhead")
    if ov is None:
        ov = {}
    elif isinstance(ov, (int, float)):
        ov = {k: float(ov) for k in KINDS}
    else:
        ov = {str(k): float(v) for k, v in dict(ov).items()}
    top["overhead"] = ov
    top["layers"] = layers
    return top


def problem_dict(problem: Problem) -> dict:
    """The problem as a ``flexpipe-problem/1`` dict without the cost fields (they are re-added by
    ``_with_cost_fields``)."""
    d = problem.to_dict()
    for k in PROBLEM_FIELDS:
        d.pop(k, None)
    for ld in d["layers"]:
        for k in LAYER_FIELDS:
            ld.pop(k, None)
    meta = dict(d.get("meta") or {})
    meta.pop("cost_fields", None)
    if meta:
        d["meta"] = meta
    else:
        d.pop("meta", None)
    return d
