"""Measured timelines as a file: ``flexpipe-timeline/1`` (JSON), what ``flexpipe calibrate`` reads.

    {"format": "flexpipe-timeline/1",
     "plan": {...},                          # the flexpipe-plan/1 that ran (its partition, meta)
     "steps": [{"step": 0,
                "actions": [[0, "0F0", 0.0, 1.52], ...],   # [rank, action, start ms, end ms]
                "peak_memory": [812.5, 790.1],            # optional: measured MiB per rank
                "loss": 5.53, "step_time": 0.0123},       # optional
               ...],
     "meta": {...}}                          # free: model, devices, dtype, units, ...

``flexpipe train --save-timeline run.json`` writes one (every step of the run, warm-up included:
``flexpipe calibrate --warmup`` leaves steps out). ``load_timelines`` refuses a file that is not
one with a ``TimelineFileError`` naming the file and the field (``steps[2].actions[5]``), and
checks every action against the plan: its rank, stage and microbatch. Torch-free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from .ir import ParseError, Plan, parse_action
from .jsonio import read_json, write_json
from .limits import MAX_ACTIONS, MAX_NUMBER
from .planfile import PlanFileError, plan_from_dict, plan_to_dict
from .timeline import Timeline

__all__ = ["TIMELINE_FORMAT", "TimelineFileError", "MeasuredRun", "timelines_to_dict", "timelines_from_dict",
           "save_timelines", "load_timelines"]

TIMELINE_FORMAT = "flexpipe-timeline/1"


class TimelineFileError(ValueError):
    """A timeline file is corrupt, foreign, of another version, or does not match its plan."""


@dataclass(frozen=True)
class MeasuredRun:
    """A plan and the measured timeline of each of its steps, in step order."""

    plan: Plan
    timelines: tuple[Timeline, ...]
    meta: dict = field(default_factory=dict)

    def steps(self, warmup: int = 0) -> tuple[Timeline, ...]:
        """The timelines from step ``warmup`` on (the steps before it are left out)."""
        return tuple(tl for tl in self.timelines if int(tl.meta.get("step", 0)) >= warmup)


def timelines_to_dict(plan: Plan, timelines: Sequence[Timeline], meta: dict | None = None,
                      steps: Sequence[dict] | None = None) -> dict:
    """The file's JSON object; ``steps[i]`` adds optional per-step keys (``loss``, ``step_time``)."""
    out = []
    for i, tl in enumerate(timelines):
        st: dict[str, Any] = {"step": int(tl.meta.get("step", i)),
                              "actions": [[r, a, s, e] for r, a, s, e in tl.records()]}
        if tl.peak_memory_measured is not None:
            st["peak_memory"] = [float(x) for x in tl.peak_memory_measured]
        for k, v in (steps[i] if steps else {}).items():
            if v is not None and not (isinstance(v, float) and not math.isfinite(v)):
                st[k] = v
        out.append(st)
    return {"format": TIMELINE_FORMAT, "plan": plan_to_dict(plan), "steps": out,
            "meta": {"units": "ms, MiB", **(meta or {})}}


def save_timelines(path: str | Path, plan: Plan, timelines: Sequence[Timeline], meta: dict | None = None,
                   steps: Sequence[dict] | None = None) -> None:
    """Write ``timelines`` (measured steps of ``plan``) as a ``flexpipe-timeline/1`` file."""
    write_json(timelines_to_dict(plan, timelines, meta, steps), path)


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > MAX_NUMBER:
        raise TimelineFileError(f"{where}: expected a finite number, got {v!r}")
    return float(v)


def _step(d: Any, where: str, plan: Plan) -> Timeline:
    """One step's timeline, every action checked against ``plan``."""
    if not isinstance(d, dict):
        raise TimelineFileError(f"{where}: expected an object with 'step' and 'actions'")
    step = d.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TimelineFileError(f"{where}.step: expected an integer >= 0, got {step!r}")
    acts = d.get("actions")
    if not isinstance(acts, list) or not acts:
        raise TimelineFileError(f"{where}.actions: expected a non-empty list of [rank, action, start, end]")
    sched = plan.schedule
    recs = []
    for j, rec in enumerate(acts):
        w = f"{where}.actions[{j}]"
        if not isinstance(rec, list) or len(rec) != 4:
            raise TimelineFileError(f"{w}: expected [rank, action, start, end], got {rec!r}"[:300])
        r, text, s, e = rec
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < plan.ranks:
            raise TimelineFileError(f"{w}: rank {r!r} is not one of the plan's ranks 0..{plan.ranks - 1}")
        if not isinstance(text, str):
            raise TimelineFileError(f"{w}: expected an action like '0F1', got {text!r}"[:300])
        try:
            a = parse_action(text)
        except (ParseError, ValueError) as err:
            raise TimelineFileError(f"{w}: {err}") from None
        if not (a.stage < sched.num_stages and a.microbatch < sched.microbatches):
            raise TimelineFileError(f"{w}: {a} is outside the plan ({sched.num_stages} stages, "
                                    f"{sched.microbatches} microbatches)")
        if sched.placement[a.stage] != r:
            raise TimelineFileError(f"{w}: {a} ran on rank {r}, but the plan places stage {a.stage} on "
                                    f"rank {sched.placement[a.stage]}: is this the plan that ran?")
        s, e = _number(s, f"{w} start"), _number(e, f"{w} end")
        if e < s:
            raise TimelineFileError(f"{w}: {a} ends ({e:g}) before it starts ({s:g})")
        recs.append((r, a, s, e))
    tl = Timeline.from_records(plan.ranks, recs, source="measured", schedule=sched)
    peaks = d.get("peak_memory")
    if peaks is not None:
        if not isinstance(peaks, list) or len(peaks) != plan.ranks:
            raise TimelineFileError(f"{where}.peak_memory: expected a list of {plan.ranks} numbers (MiB per rank)")
        tl = replace(tl, peak_memory_measured=tuple(_number(x, f"{where}.peak_memory[{k}]")
                                                    for k, x in enumerate(peaks)))
    tl.meta.update(step=step, units="ms")
    return tl


def timelines_from_dict(d: Any, source: str = "timeline file") -> MeasuredRun:
    """Read a ``flexpipe-timeline/1`` object; errors name ``source`` and the field."""
    if not isinstance(d, dict):
        raise TimelineFileError(f"{source}: expected a JSON object, got {type(d).__name__}")
    fmt = d.get("format")
    if fmt != TIMELINE_FORMAT:
        hint = ""
        if isinstance(fmt, str) and fmt.startswith(("flexpipe-plan", "flexpipe-problem")):
            hint = f" (a {fmt.split('/')[0][9:]} file, not measured timelines)"
        raise TimelineFileError(f"{source}: format is {fmt!r}, this version reads {TIMELINE_FORMAT!r}{hint}")
    for key in ("plan", "steps"):
        if key not in d:
            raise TimelineFileError(f"{source}: missing key {key!r}")
    try:
        plan = plan_from_dict(d["plan"], f"{source}: plan")
    except PlanFileError as e:
        raise TimelineFileError(str(e)) from None
    steps = d["steps"]
    if not isinstance(steps, list) or not steps:
        raise TimelineFileError(f"{source}: 'steps' must be a non-empty list")
    if sum(len(s.get("actions") or ()) for s in steps if isinstance(s, dict)) > MAX_ACTIONS:
        raise TimelineFileError(f"{source}: more than {MAX_ACTIONS} actions (flexpipe_ui.limits.MAX_ACTIONS)")
    tls = tuple(_step(s, f"{source}: steps[{i}]", plan) for i, s in enumerate(steps))
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise TimelineFileError(f"{source}: 'meta' must be an object")
    return MeasuredRun(plan, tls, meta)


def load_timelines(path: str | Path) -> MeasuredRun:
    """Read a ``flexpipe-timeline/1`` file; errors name the file and the field."""
    return timelines_from_dict(read_json(path, TimelineFileError, "timeline file"), str(path))
