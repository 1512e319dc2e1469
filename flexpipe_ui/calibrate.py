"""``calibrate``: refit a problem's whole cost model to measured runs.

From measured timelines (one or several plans, pooled) it refits, per layer, f, b, w and bw (each
stage's median measured F, I, W, B less the per-action ``overhead``, shared among the stage's layers
in proportion to the base problem, averaged over every stage a layer sat in), the per-kind
``overhead`` (least squares of measured durations against predicted work, when the runs have stages
of different sizes, plus the executor's own time between two actions that did not wait), ``comm``
(mean wait on cross-rank dependencies less the message's transfer time),
and the activation memory (scaled to the measured peaks). ``bandwidth`` and ``comm_cpu`` stay as
profiled. A first stage fed by data runs its whole backward in W (the executor defers I there), so
its I + W counts as one fused backward. Torch-free. Units: ms and MiB.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from flexpipe_ui.ir import Plan
from flexpipe_ui.problem import Layer, Problem, even_partition
from flexpipe_ui.timeline import Timeline

from .costfields import KINDS, _with_cost_fields, cost_fields, problem_dict

__all__ = ["calibrate", "calibrate_runs", "CalibrationError", "stage_durations"]

_FIELD = {"F": "f", "I": "b", "W": "w", "B": "bw"}


class CalibrationError(ValueError):
    """Timelines that cannot be read back into a problem (wrong plan, missing actions)."""


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


def _cross_dep(a, sched, place, r: int, when: dict):
    """(producer text, boundary stage) of ``a``'s dependency on another rank, or (None, None)."""
    if a.kind.is_forward and a.stage > 0 and place[a.stage - 1] != r:
        return f"{a.stage - 1}F{a.microbatch}", a.stage - 1
    if a.kind.computes_input_grad and a.stage + 1 < sched.num_stages and place[a.stage + 1] != r:
        dep = next((d for d in (f"{a.stage + 1}I{a.microbatch}", f"{a.stage + 1}B{a.microbatch}")
                    if d in when), None)
        return dep, a.stage
    return None, None


def _gaps(tl: Timeline, plan: Plan, transfer: Sequence[float]) -> tuple[list[float], list[float]]:
    """(comm waits, loop gaps) of a measured timeline.

    A comm wait: a consumer that started after its rank's previous action ended and after its
    cross-rank producer ended: start − producer end − the message's transfer time
    ``transfer[boundary stage]``. A loop gap: the executor's own time between two actions of a rank
    where the second did not wait (no cross-rank producer, or one that ended before the first
    action started): receive/send posting and bookkeeping outside the timed handlers."""
    sched = plan.schedule
    place = sched.placement
    when = {str(a): (int(r), float(s), float(e)) for a, r, s, e in zip(tl.actions, tl.rank, tl.start, tl.end)}
    prev: dict[str, tuple[float, float]] = {}
    for row in sched.order:
        last = None
        for a in row:
            k = str(a)
            if k in when:
                if last is not None:
                    prev[k] = last
                last = when[k][1:]
    waits, loops = [], []
    for a in tl.actions:
        k = str(a)
        r, s, _ = when[k]
        p_start, p_end = prev.get(k, (0.0, 0.0))
        dep, boundary = _cross_dep(a, sched, place, r, when)
        dep_end = when[dep][2] if dep in when else None
        if k in prev and (dep_end is None or dep_end <= p_start):
            loops.append(max(0.0, s - p_end))
        if dep_end is not None and s > p_end + 1e-9 and dep_end >= p_end:      # it waited for dep
            waits.append(max(0.0, s - dep_end - transfer[boundary]))
    return waits, loops


def _comm_estimate(tl: Timeline, plan: Plan, transfer: Sequence[float] | None = None) -> list[float]:
    """Waits of cross-rank consumers on their producers, less the transfer time (see ``_gaps``)."""
    if transfer is None:
        transfer = [0.0] * plan.schedule.num_stages
    return _gaps(tl, plan, transfer)[0]


def _deferred_first(durs: dict, part, base: Problem) -> bool:
    """Stage 0 ran its backward in W (input from data): measured I is a sliver of I + W."""
    i, w = durs.get((0, "I")), durs.get((0, "W"))
    if i is None or w is None:
        return False
    if base.layers[part[0][0]].b == 0.0:
        return True
    return i < 0.1 * (i + w)


def _observations(runs, base: Problem, extra: list[dict], ov: dict[str, float]):
    """(kind, layers, measured ms, predicted work without overhead) per stage and kind of each run."""
    obs = []
    for plan, tls in runs:
        part = plan.partition or even_partition(base.num_layers, plan.schedule.num_stages)
        if sum(len(p) for p in part) != base.num_layers:
            raise CalibrationError(f"a plan covers {sum(len(p) for p in part)} layers but the problem "
                                   f"has {base.num_layers}")
        durs = stage_durations(tls, _switch_of(plan, base))
        for s, lay in enumerate(part):
            if (s, "F") not in durs:
                raise CalibrationError(f"the timelines have no F of stage {s}: are they from this plan?")
            if not any((s, k) in durs for k in "IWB"):
                raise CalibrationError(f"the timelines have no backward of stage {s}")
            kinds = dict(F=durs[(s, "F")])
            if s == 0 and _deferred_first(durs, part, base):
                kinds["B"] = durs[(0, "W")] + durs[(0, "I")] - ov.get("I", 0.0)
            else:
                kinds.update({k: durs[(s, k)] for k in "IWB" if (s, k) in durs})
            for k, d in kinds.items():
                work = sum(_base_value(base, extra, i, k) for i in lay)
                obs.append((k, tuple(lay), d, work))
    return obs


def _switch_of(plan: Plan, base: Problem) -> dict[str, float]:
    """The ``switch`` time (``costmodel.switch_time``) the model charges each action of the plan
    (by its text; empty without the field): measured durations include it, per-layer costs must
    not."""
    if not any(l.switch for l in base.layers):
        return {}
    from flexpipe_ui.costmodel import switch_time
    from flexpipe_ui.graph import compile_schedule
    from flexpipe_ui.sim import costs_for
    g = compile_schedule(plan.schedule)
    extra = switch_time(g, costs_for(plan, base))
    return {str(a): float(x) for a, x in zip(g.actions, extra) if x}


def _base_value(base: Problem, extra: list[dict], i: int, kind: str) -> float:
    l = base.layers[i]
    if kind == "B":
        bw = extra[i].get("bw")
        return float(bw) if bw is not None else l.b + l.w
    return float(getattr(l, _FIELD[kind]))


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


def calibrate_runs(runs: Sequence[tuple[Plan, Sequence[Timeline]]], problem: Problem,
                   fit_overhead: bool = True) -> Problem:
    """``problem`` refitted to measured runs of several plans, pooled (see the module docstring)."""
    runs = [(p, [tl] if isinstance(tl, Timeline) else list(tl)) for p, tl in runs]
    runs = [(p, tls) for p, tls in runs if tls]
    if not runs:
        raise CalibrationError("no timelines to calibrate from")
    cf = cost_fields(problem)
    extra = cf["layers"]
    # the profiler's executor probe already added a loop gap to the overhead: these runs' own
    # loop gap replaces it below (not counted twice)
    probe_loop = float((problem.meta.get("executor_probe") or {}).get("loop_gap", 0.0))
    ov0 = {k: max(float(cf["overhead"].get(k, 0.0)) - probe_loop, 0.0) for k in KINDS}
    obs = _observations(runs, problem, extra, ov0)
    ov = _fit_overhead(obs, ov0) if fit_overhead else ov0
    # per layer and kind: weighted mean of the measured/predicted ratios of the stages it sat in
    num = np.zeros((problem.num_layers, 4))
    den = np.zeros((problem.num_layers, 4))
    for k, lay, d, work in obs:
        j = KINDS.index(k)
        target = max(d - ov.get(k, 0.0), 0.0)
        ratio = target / work if work > 0 else None
        for i in lay:
            share = _base_value(problem, extra, i, k)
            if ratio is None:                            # nothing predicted: spread evenly
                num[i, j] += target / len(lay)
                den[i, j] += 1.0 if share == 0 else share
            else:
                num[i, j] += ratio * max(share, 1e-12)
                den[i, j] += max(share, 1e-12)
    layers, new_extra, scales = [], [], {}
    for i, l in enumerate(problem.layers):
        vals = {}
        for j, k in enumerate(KINDS):
            cur = _base_value(problem, extra, i, k)
            vals[k] = cur * num[i, j] / den[i, j] if den[i, j] > 0 and cur > 0 else \
                (num[i, j] / den[i, j] if den[i, j] > 0 else None)
        split_seen = vals["I"] is not None or vals["W"] is not None
        if vals["B"] is not None and not split_seen:      # only fused runs: split b:w as before
            r = vals["B"] / max(_base_value(problem, extra, i, "B"), 1e-12)
            vals["I"], vals["W"] = l.b * r, l.w * r
        vals = {k: (v if v is not None else _base_value(problem, extra, i, k)) for k, v in vals.items()}
        if den[i, 3] == 0:                                 # bw never measured: scale like b + w
            base_bw = _base_value(problem, extra, i, "B")
            r = (vals["I"] + vals["W"]) / max(l.b + l.w, 1e-12) if l.b + l.w > 0 else 1.0
            vals["B"] = base_bw * r
        layers.append({"f": vals["F"], "b": vals["I"], "w": vals["W"], "act": l.act, "mem": l.mem,
                       "name": l.name})
        new_extra.append({**{k: v for k, v in extra[i].items() if v is not None}, "bw": vals["B"]})
    comm, loop = _fit_comm(runs, problem, extra, cf)
    # the executor's time between actions is paid once per action, like the handlers' fixed part
    ov = {k: v + loop for k, v in ov.items()}
    act_scale = _fit_activation(runs, problem)
    if act_scale is not None:
        for l, e in zip(layers, new_extra):
            l["act"] *= act_scale
            if e.get("act_w") is not None:
                e["act_w"] *= act_scale
    d = problem_dict(problem)
    d.update(layers=layers, comm=comm)
    meta = dict(d.get("meta") or {})
    meta.pop("executor_probe", None)            # its loop gap is no longer in the overhead
    meta["calibrated_from"] = sum(len(t) for _, t in runs)
    meta["calibration"] = {"plans": len(runs), "overhead": ov, "loop_gap": loop, "act_scale": act_scale,
                           "kind_scale": _kind_scales(obs, ov)}
    meta.setdefault("units", "ms, MiB")
    d["meta"] = meta
    return _with_cost_fields(d, bandwidth=cf["bandwidth"], overhead=ov if any(ov.values()) else None,
                             comm_cpu=cf["comm_cpu"], layers=new_extra)


def _kind_scales(obs, ov) -> dict[str, float]:
    out = {}
    for k in KINDS:
        m = sum(max(d - ov.get(k, 0.0), 0.0) for kk, _, d, _ in obs if kk == k)
        p = sum(w for kk, _, _, w in obs if kk == k)
        if p > 0:
            out[k] = m / p
    return out


def _fit_comm(runs, problem: Problem, extra, cf, wait_stat=np.mean) -> tuple[float, float]:
    """(comm, loop gap): the mean wait beyond transfer on cross-rank dependencies (the mean: a
    critical path pays every wait, the slow ones included; ``wait_stat`` another statistic),
    and the median loop gap."""
    bw = cf["bandwidth"]
    gaps, loops = [], []
    for plan, tls in runs:
        part = plan.partition or even_partition(problem.num_layers, plan.schedule.num_stages)
        transfer = []
        for lay in part:
            out = extra[lay[-1]].get("out") if extra else None
            transfer.append(out / bw if (out and bw) else 0.0)
        for tl in tls:
            w, l = _gaps(tl, plan, transfer)
            gaps += w
            loops += l
    return (float(wait_stat(gaps)) if gaps else float(problem.comm),
            float(np.median(loops)) if loops else 0.0)


def _fit_activation(runs, problem: Problem) -> float | None:
    """Measured (peak − static) / simulated activation peak, median over ranks and steps."""
    from flexpipe_ui.sim import simulate
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
