"""``calibrate``: refit a problem's cost model to measured runs, by inverting ``costmodel``.

From measured timelines (one or several plans, pooled) it refits, per layer, f, b, w and bw (each
stage's median measured F, I, W, B less the per-action ``overhead`` and the ``switch`` the model
charges that action, shared among the stage's layers in proportion to the base problem, averaged
over every stage a layer sat in), the per-kind ``overhead`` (least squares of measured durations
against predicted work, when the runs have stages of different sizes, plus the executor's own time
between two actions that did not wait), ``comm`` (mean wait on cross-rank dependencies less the
message's transfer time) and the activation memory (scaled to the measured peaks). ``bandwidth``
and ``comm_cpu`` stay as profiled; every other field of the problem and its layers is carried
over unchanged (``dataclasses.replace``: a field added to ``Layer`` or ``Problem`` needs no edit
here). Torch-free. Units: ms and MiB.

It reads the runs through the cost model's own rules, not a restatement of them: which actions
wait on another rank (``graph.compile_schedule``'s dependency edges that cross ranks), what a
message costs to move (``costmodel.transfer_time``: a stage's message is its last layer's
``out``), what ``switch`` each action was charged (``costmodel.switch_time``), what a layer's fused
backward is (``costmodel.fused_backward``), each kind's overhead (``costmodel.overhead_of``), and
the first stage fed by data (``data_input``: its I is a no-op and its W the fused backward, so its
measured I + W count as one B).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from .costmodel import StageCosts, fused_backward, overhead_of, switch_time, transfer_time
from .graph import compile_schedule
from .ir import Plan
from .kinds import get_kind
from .problem import Layer, Problem, even_partition
from .timeline import Timeline

__all__ = ["calibrate", "calibrate_runs", "CalibrationError", "stage_durations", "kind_overhead",
           "fit_comm", "gaps", "KINDS"]

KINDS = ("F", "I", "W", "B")
"""The kinds whose cost calibrate refits (B: the fused backward, ``bw``)."""


class CalibrationError(ValueError):
    """Timelines that cannot be read back into a problem (wrong plan, missing actions)."""


def kind_overhead(problem: Problem) -> dict[str, float]:
    """Per kind of ``KINDS``, the fixed time the cost model adds to each action
    (``costmodel.overhead_of``); {} when the problem has no ``overhead``."""
    if problem.overhead is None:
        return {}
    costs = StageCosts(f=np.zeros(1), b=np.zeros(1), w=np.zeros(1), act=np.zeros(1), mem=np.zeros(1),
                       overhead=problem.overhead)
    return {k: overhead_of(get_kind(k), costs) for k in KINDS}


def _layer_costs(problem: Problem) -> np.ndarray:
    """(layers × KINDS) each layer's F, I, W and fused B work without overhead, as the cost model
    sums them into a stage (a one-layer stage each; no data-input folding: that is per stage)."""
    single = replace(problem, data_input=None).stage_costs([(i,) for i in range(problem.num_layers)])
    return np.column_stack([single.f, single.b, single.w, fused_backward(single)]).astype(float)


def stage_durations(timelines: Sequence[Timeline],
                    less: dict[str, float] | None = None) -> dict[tuple[int, str], float]:
    """Median measured duration of each (stage, kind) over the timelines; ``less``: action text →
    time taken off that action first (the model's ``switch``, charged apart)."""
    less = less or {}
    out: dict[tuple[int, str], list[float]] = {}
    for tl in timelines:
        for a, s, e in zip(tl.actions, tl.start, tl.end):
            out.setdefault((a.stage, a.kind.name), []).append(max(float(e - s) - less.get(str(a), 0.0), 0.0))
    return {k: float(np.median(v)) for k, v in out.items()}


def _partition(plan: Plan, problem: Problem):
    part = plan.partition or even_partition(problem.num_layers, plan.schedule.num_stages)
    if sum(len(p) for p in part) != problem.num_layers:
        raise CalibrationError(f"a plan covers {sum(len(p) for p in part)} layers but the problem "
                               f"has {problem.num_layers}")
    return part


def _costs(plan: Plan, problem: Problem) -> StageCosts:
    return problem.stage_costs(_partition(plan, problem))


# ---------------------------------------------------------------- waits between actions

def _cross_deps(plan: Plan, costs: StageCosts) -> dict[str, list[tuple[str, float]]]:
    """Consumer action text → (producer text, transfer ms) of each of its dependencies on another
    rank: the graph's dependency edges that cross ranks, each with the time to move its message
    (``costmodel.transfer_time``; 0 without ``bandwidth`` and ``out``)."""
    g = compile_schedule(plan.schedule)
    cross = g.rank[g.src] != g.rank[g.dst]
    src, dst = g.src[cross], g.dst[cross]
    moved = transfer_time(costs, g.rank[src], g.rank[dst], g.stage[src], g.stage[dst])
    out: dict[str, list[tuple[str, float]]] = {}
    for s, d, t in zip(src.tolist(), dst.tolist(), np.asarray(moved, float).tolist()):
        out.setdefault(str(g.actions[d]), []).append((str(g.actions[s]), t))
    return out


def _previous(tl: Timeline, plan: Plan, when: dict) -> dict[str, tuple[float, float]]:
    """Action text → (start, end) of the measured action before it on its rank, in list order."""
    prev: dict[str, tuple[float, float]] = {}
    for row in plan.schedule.order:
        last = None
        for a in row:
            k = str(a)
            if k in when:
                if last is not None:
                    prev[k] = last
                last = when[k][1:]
    return prev


def _gaps(tl: Timeline, plan: Plan, deps: dict[str, list[tuple[str, float]]]) -> tuple[list[float], list[float]]:
    """(comm waits, loop gaps) of a measured timeline, given ``_cross_deps``.

    A comm wait: a consumer that started after its rank's previous action ended and after its
    cross-rank producer ended: start − producer end − the message's transfer time. A loop gap:
    the executor's own time between two actions of a rank where the second did not wait (no
    cross-rank producer, or one that ended before the first action started): receive/send
    posting and bookkeeping outside the timed handlers."""
    when = {str(a): (int(r), float(s), float(e)) for a, r, s, e in zip(tl.actions, tl.rank, tl.start, tl.end)}
    prev = _previous(tl, plan, when)
    waits, loops = [], []
    for a in tl.actions:
        k = str(a)
        _, s, _ = when[k]
        p_start, p_end = prev.get(k, (0.0, 0.0))
        got = [(when[d][2], t) for d, t in deps.get(k, ()) if d in when]
        dep_end, moved = max(got) if got else (None, 0.0)     # the producer it waited for last
        if k in prev and (dep_end is None or dep_end <= p_start):
            loops.append(max(0.0, s - p_end))
        if dep_end is not None and s > p_end + 1e-9 and dep_end >= p_end:      # it waited for dep
            waits.append(max(0.0, s - dep_end - moved))
    return waits, loops


def gaps(tl: Timeline, plan: Plan, problem: Problem) -> tuple[list[float], list[float]]:
    """(comm waits, loop gaps) of one measured timeline of ``plan`` (see ``_gaps``)."""
    return _gaps(tl, plan, _cross_deps(plan, _costs(plan, problem)))


def fit_comm(runs: Sequence[tuple[Plan, Sequence[Timeline]]], problem: Problem,
             wait_stat: Callable = np.mean) -> tuple[float, float]:
    """(comm, loop gap): the mean wait beyond transfer on cross-rank dependencies (the mean: a
    critical path pays every wait, the slow ones included; ``wait_stat`` another statistic),
    and the median loop gap. Without any wait, ``comm`` stays the problem's."""
    waits, loops = [], []
    for plan, tls in runs:
        deps = _cross_deps(plan, _costs(plan, problem))
        for tl in tls:
            w, l = _gaps(tl, plan, deps)
            waits += w
            loops += l
    return (float(wait_stat(waits)) if waits else float(problem.comm),
            float(np.median(loops)) if loops else 0.0)


# ---------------------------------------------------------------- per-stage observations

def _switch_of(plan: Plan, problem: Problem, costs: StageCosts) -> dict[str, float]:
    """The ``switch`` time (``costmodel.switch_time``) the model charges each action of the plan
    (by its text; empty without the field): measured durations include it, per-layer costs must
    not."""
    if costs.switch is None:
        return {}
    g = compile_schedule(plan.schedule)
    extra = switch_time(g, costs)
    return {str(a): float(x) for a, x in zip(g.actions, extra) if x}


def _fused_first(durs: dict, costs: StageCosts, first_b: float) -> bool:
    """Stage 0 ran its backward in W: the problem says its first layer is fed data (the cost
    model's ``data_input`` rule), or it has no input-gradient cost, or the measured I is a sliver
    of I + W (a run of a problem that does not say so)."""
    i, w = durs.get((0, "I")), durs.get((0, "W"))
    if i is None or w is None:
        return False
    if costs.data_input or first_b == 0.0:
        return True
    return i < 0.1 * (i + w)


def _observations(runs, problem: Problem, per_layer: np.ndarray, ov: dict[str, float]):
    """(kind, layers, measured ms, predicted work without overhead) per stage and kind of each run."""
    obs = []
    for plan, tls in runs:
        part = _partition(plan, problem)
        costs = problem.stage_costs(part)
        durs = stage_durations(tls, _switch_of(plan, problem, costs))
        for s, lay in enumerate(part):
            if (s, "F") not in durs:
                raise CalibrationError(f"the timelines have no F of stage {s}: are they from this plan?")
            if not any((s, k) in durs for k in "IWB"):
                raise CalibrationError(f"the timelines have no backward of stage {s}")
            kinds = dict(F=durs[(s, "F")])
            if s == 0 and _fused_first(durs, costs, float(per_layer[part[0][0], 1])):
                kinds["B"] = durs[(0, "W")] + durs[(0, "I")] - ov.get("I", 0.0)
            else:
                kinds.update({k: durs[(s, k)] for k in "IWB" if (s, k) in durs})
            for k, d in kinds.items():
                work = float(per_layer[list(lay), KINDS.index(k)].sum())
                obs.append((k, tuple(lay), d, work))
    return obs


def _fit_overhead(obs, ov: dict[str, float]) -> dict[str, float]:
    """Per kind: measured = a · work + o by least squares over stages of different sizes; o in
    [0, smallest measured]; kept as profiled when the sizes do not tell it apart."""
    out = dict(ov)
    for k in KINDS:
        pts = [(w, d) for kk, _, d, w in obs if kk == k and w > 0]
        xs = np.array([p[0] for p in pts])
        if len(pts) < 3 or np.ptp(xs) < 0.2 * xs.mean():
            continue
        ys = np.array([p[1] for p in pts])
        a, o = np.polyfit(xs, ys, 1)
        if a > 0:
            out[k] = float(min(max(o, 0.0), ys.min()))
    return out


def _kind_scales(obs, ov) -> dict[str, float]:
    out = {}
    for k in KINDS:
        m = sum(max(d - ov.get(k, 0.0), 0.0) for kk, _, d, _ in obs if kk == k)
        p = sum(w for kk, _, _, w in obs if kk == k)
        if p > 0:
            out[k] = m / p
    return out


# ---------------------------------------------------------------- the fit

def _ratios(obs, per_layer: np.ndarray, ov: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(num, den) per layer and kind: the weighted mean of the measured/predicted ratios of the
    stages the layer sat in is num / den (a stage predicted at 0 spreads its time evenly)."""
    num = np.zeros(per_layer.shape)
    den = np.zeros(per_layer.shape)
    for k, lay, d, work in obs:
        j = KINDS.index(k)
        target = max(d - ov.get(k, 0.0), 0.0)
        ratio = target / work if work > 0 else None
        for i in lay:
            share = float(per_layer[i, j])
            if ratio is None:
                num[i, j] += target / len(lay)
                den[i, j] += 1.0 if share == 0 else share
            else:
                num[i, j] += ratio * max(share, 1e-12)
                den[i, j] += max(share, 1e-12)
    return num, den


def _fit_layer(l: Layer, cur: np.ndarray, num: np.ndarray, den: np.ndarray) -> Layer:
    """Layer ``l`` with f, b, w and bw refitted (``cur``: its F, I, W, B work before)."""
    vals = {}
    for j, k in enumerate(KINDS):
        if den[j] > 0:
            vals[k] = cur[j] * num[j] / den[j] if cur[j] > 0 else num[j] / den[j]
        else:
            vals[k] = None
    if vals["B"] is not None and vals["I"] is None and vals["W"] is None:   # only fused runs: keep b:w
        r = vals["B"] / max(cur[3], 1e-12)
        vals["I"], vals["W"] = l.b * r, l.w * r
    vals = {k: (v if v is not None else cur[j]) for j, (k, v) in enumerate(vals.items())}
    if den[3] == 0:                                    # bw never measured: scale like b + w
        r = (vals["I"] + vals["W"]) / max(l.b + l.w, 1e-12) if l.b + l.w > 0 else 1.0
        vals["B"] = cur[3] * r
    return replace(l, f=float(vals["F"]), b=float(vals["I"]), w=float(vals["W"]), bw=float(vals["B"]))


def calibrate_runs(runs: Sequence[tuple[Plan, Sequence[Timeline]]], problem: Problem,
                   fit_overhead: bool = True) -> Problem:
    """``problem`` refitted to measured runs of several plans, pooled (see the module docstring)."""
    runs = [(p, [tl] if isinstance(tl, Timeline) else list(tl)) for p, tl in runs]
    runs = [(p, tls) for p, tls in runs if tls]
    if not runs:
        raise CalibrationError("no timelines to calibrate from")
    per_layer = _layer_costs(problem)
    # the profiler's executor probe already added a loop gap to the overhead: these runs' own
    # loop gap replaces it below (not counted twice)
    probe_loop = float((problem.meta.get("executor_probe") or {}).get("loop_gap", 0.0))
    profiled = kind_overhead(problem)
    ov0 = {k: max(profiled.get(k, 0.0) - probe_loop, 0.0) for k in KINDS}
    obs = _observations(runs, problem, per_layer, ov0)
    ov = _fit_overhead(obs, ov0) if fit_overhead else ov0
    num, den = _ratios(obs, per_layer, ov)
    layers = [_fit_layer(l, per_layer[i], num[i], den[i]) for i, l in enumerate(problem.layers)]
    comm, loop = fit_comm(runs, problem)
    # the executor's time between actions is paid once per action, like the handlers' fixed part
    ov = {k: v + loop for k, v in ov.items()}
    act_scale = _fit_activation(runs, problem)
    if act_scale is not None:
        layers = [replace(l, act=l.act * act_scale,
                          act_w=None if l.act_w is None else l.act_w * act_scale) for l in layers]
    meta = dict(problem.meta)
    meta.pop("executor_probe", None)            # its loop gap is no longer in the overhead
    meta["calibrated_from"] = sum(len(t) for _, t in runs)
    meta["calibration"] = {"plans": len(runs), "overhead": ov, "loop_gap": loop, "act_scale": act_scale,
                           "kind_scale": _kind_scales(obs, ov)}
    meta.setdefault("units", "ms, MiB")
    return problem.with_(layers=tuple(layers), comm=comm, meta=meta,
                         overhead=ov if any(ov.values()) else None)


def _fit_activation(runs, problem: Problem) -> float | None:
    """Measured (peak − static) / simulated activation peak, median over ranks and steps."""
    from .sim import simulate
    ratios = []
    for plan, tls in runs:
        meas = [tl.peak_memory_measured for tl in tls if getattr(tl, "peak_memory_measured", None)]
        if not meas:
            continue
        m = simulate(plan, problem).metrics
        for r in range(plan.ranks):
            pa = m.peak_activation[r]
            got = float(np.median([x[r] for x in meas])) - m.static_memory[r]
            if pa > 0 and got > 0:
                ratios.append(got / pa)
    return float(np.median(ratios)) if ratios else None


def calibrate(timelines: Timeline | Sequence[Timeline], plan: Plan, problem: Problem | None = None) -> Problem:
    """A problem fitted to measured timelines of ``plan`` (``calibrate_runs`` with one plan).
    Without a base ``problem``, layers start from equal shares of each stage's measured times."""
    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    if not tls:
        raise CalibrationError("no timelines to calibrate from")
    if problem is None:
        n = plan.num_layers or plan.schedule.num_stages
        problem = Problem(ranks=plan.ranks, microbatches=plan.microbatches,
                          layers=tuple(Layer(f=1.0, b=1.0, w=1.0, name=f"layer{i}") for i in range(n)))
    elif plan.num_layers and problem.num_layers != plan.num_layers:
        raise CalibrationError(f"the problem has {problem.num_layers} layers but the plan covers "
                               f"{plan.num_layers}")
    return calibrate_runs([(plan, tls)], problem, fit_overhead=False)
