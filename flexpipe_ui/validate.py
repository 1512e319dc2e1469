"""The validator: explains what is wrong with a schedule and shows where.

Checks: ranges, stage placement, duplicates, completeness (one F and B or I+W per stage and
microbatch), local dependency order on each rank, and global deadlock (a wait cycle across ranks).
Errors render the rank-by-step grid with the bad cells marked, as torch's
``_format_pipeline_order`` does.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .graph import Graph, Finding, compile_schedule, structure_problems, wait_cycle
from .ir import Schedule

__all__ = ["ScheduleError", "validate", "validated", "valid_by_construction", "check", "render_grid"]

MAX_FINDINGS = 20
"""Problems listed in one error (the rest are counted), so a broken 1M-action plan stays readable."""


class ScheduleError(ValueError):
    """An invalid schedule. ``problems`` name the actions; ``cells`` are (rank, position) to mark."""

    def __init__(self, summary: str, problems: Sequence[Finding], schedule: Schedule | None = None):
        self.summary = summary
        self.problems = tuple(problems)
        self.schedule = schedule
        self.cells = tuple(dict.fromkeys(c for p in self.problems for c in p.cells))
        self.actions = tuple(dict.fromkeys(a for p in self.problems for a in p.actions))
        super().__init__(self._text())

    def _text(self) -> str:
        lines = [self.summary] + [f"  - {p.message}" for p in self.problems]
        if self.schedule is not None and self.cells:
            lines.append(render_grid(self.schedule, self.cells))
        return "\n".join(lines)


def render_grid(schedule: Schedule, marks: Iterable[tuple[int, int]] = (), width: int = 16) -> str:
    """Rank × step grid; marked cells are bracketed and an arrow points at their step.

    Long schedules show a window of ``width`` steps around the first marked step.
    """
    marks = set(marks)
    steps = max((len(r) for r in schedule.order), default=0)
    lo, hi = 0, steps
    if steps > width:
        first = min((p for _, p in marks), default=0)
        lo = max(0, min(first - width // 4, steps - width))
        hi = lo + width
    cw = max([len(str(a)) for row in schedule.order for a in row[lo:hi]] + [4]) + 2
    head = "step    " + "".join(f"{i:>{cw}}" for i in range(lo, hi))
    out = [head]
    for r, row in enumerate(schedule.order):
        cells = []
        for i in range(lo, hi):
            txt = str(row[i]) if i < len(row) else ""
            cells.append(f"[{txt}]" if (r, i) in marks else f" {txt} ")
        out.append(f"rank {r:<3}" + "".join(f"{c:>{cw}}" for c in cells))
        hit = sorted(i for rr, i in marks if rr == r and lo <= i < hi)
        if hit:
            arrow = [" " * cw] * (hi - lo)
            for i in hit:
                arrow[i - lo] = f"{'^':>{cw - 1}} "
            out.append(" " * 8 + "".join(arrow))
    if lo or hi < steps:
        out.append(f"(steps {lo}..{hi - 1} of {steps})")
    return "\n".join(out)


def order_problems(g: Graph) -> list[Finding]:
    """Dependencies on the same lane that come later in the list than their dependant."""
    same = (g.lane[g.src] == g.lane[g.dst]) & (g.lane_pos[g.src] > g.lane_pos[g.dst])
    out = []
    for a, b in zip(g.src[same].tolist(), g.dst[same].tolist()):
        r = int(g.rank[b])
        out.append(Finding(f"rank {r}: {g.actions[b]} (position {g.pos[b]}) needs {g.actions[a]}, which "
                            f"comes later (position {g.pos[a]}) on the same rank",
                            ((r, int(g.pos[b])), (r, int(g.pos[a]))), (str(g.actions[b]), str(g.actions[a]))))
    return out


def deadlock_problem(g: Graph) -> Finding | None:
    found = wait_cycle(g)
    if found is None:
        return None
    lanes, pairs = found
    parts, cells, names = [], [], []
    for blocked, awaited in pairs:
        rb, ra = int(g.rank[blocked]), int(g.rank[awaited])
        parts.append(f"rank {rb} waits at {g.actions[blocked]} for {g.actions[awaited]} (rank {ra})")
        cells += [(rb, int(g.pos[blocked])), (ra, int(g.pos[awaited]))]
        names += [str(g.actions[blocked]), str(g.actions[awaited])]
    ranks = sorted({int(g.rank[b]) for b, _ in pairs})
    return Finding(f"deadlock among ranks {ranks}: " + "; ".join(parts), tuple(cells), tuple(names))


def static_problems(schedule: Schedule) -> list[Finding]:
    """Structure problems, else local-order problems: everything short of the deadlock search."""
    if schedule.num_actions == 0 or schedule.num_stages == 0:
        return [Finding(f"the schedule has no actions ({schedule.ranks} rank(s), {schedule.num_stages} "
                        "stages): a plan needs at least one stage with its forward and backward")]
    probs = structure_problems(schedule)
    if len(probs) > MAX_FINDINGS:
        probs = probs[:MAX_FINDINGS] + [Finding(f"... and {len(probs) - MAX_FINDINGS} more problems")]
    if probs:
        return probs
    return order_problems(compile_schedule(schedule))


def check(schedule: Schedule) -> list[Finding]:
    """All problems found, in the order structure → local order → deadlock (empty if valid)."""
    probs = static_problems(schedule)
    if probs:
        return probs
    d = deadlock_problem(compile_schedule(schedule))
    return [d] if d else []


# The validator's findings are derived under a key only this module holds, so nothing else can
# mark a schedule valid except through ``valid_by_construction``.
_FINDINGS = object()


def validated(schedule: Schedule) -> bool:
    """True once ``validate`` accepted the schedule (or its builder vouched for it)."""
    return schedule.derived(_FINDINGS) == []


def valid_by_construction(schedule: Schedule) -> Schedule:
    """For builders whose construction is a feasible execution (the DSL's list scheduler ran every
    action after its dependencies, in lane order): ``validate`` and ``simulate`` skip their scans.
    Structure (ranges, placement, completeness) is still checked: with a structural problem the
    schedule is left to ``validate`` to explain."""
    if not structure_problems(schedule):
        schedule.derived(_FINDINGS, lambda s: [])
    return schedule


def proven_by_simulation(schedule: Schedule, findings: Sequence[Finding] = ()) -> None:
    """For ``sim.simulate``: what it established about this schedule, as ``check`` would return it
    -- the static problems or the deadlock it found with this module's own searches, or none when
    its timing equations reached their fixpoint with no static problem (on a cycle of positive
    durations the ends grow every sweep; zero-cost cycles it looks for itself). A ``validate``
    after a simulation then costs nothing (the Designer's drag → redraw at 64 × 256: the Kahn
    pass was ~250 ms of ~800)."""
    found = list(findings)
    schedule.derived(_FINDINGS, lambda s: found)


def validate(schedule: Schedule) -> Schedule:
    """Return the schedule if valid, else raise ``ScheduleError`` naming the offending actions."""
    probs = schedule.derived(_FINDINGS, check)
    if probs:
        n = len(probs)
        raise ScheduleError(f"invalid schedule ({schedule.ranks} ranks, {schedule.microbatches} "
                            f"microbatches): {n} problem{'s' if n > 1 else ''}", probs, schedule)
    return schedule
