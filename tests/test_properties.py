"""Property tests (hypothesis): the loaders give a valid object or their own ValueError subclass on
any JSON-ish data, and the validator accepts or raises ScheduleError on perturbed plans, the
accepted ones simulating to finite metrics."""
from __future__ import annotations

import json
import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flexpipe_ui.ir import Plan  # noqa: E402
from flexpipe_ui.library import build_named  # noqa: E402
from flexpipe_ui.planfile import PlanFileError, load_plan, plan_from_dict, plan_to_dict  # noqa: E402
from flexpipe_ui.problem import Problem, ProblemError, load_problem  # noqa: E402
from flexpipe_ui.sim import simulate  # noqa: E402
from flexpipe_ui.validate import ScheduleError, validate  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.integers(-2 ** 70, 2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from(["0F0", "0B0", "1F0", "1B0", "0I0", "0W0", "0F" + "9" * 30, "flexpipe-plan/1",
                                     "flexpipe-problem/1"]))
json_ish = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                          st.dictionaries(st.text(max_size=6), inner, max_size=5)),
                        max_leaves=30)
GOOD_PLAN = plan_to_dict(build_named("1f1b", None, ranks=2, microbatches=3))
GOOD_PROBLEM = {"ranks": 2, "microbatches": 3, "comm": 0.1,
                "layers": [{"f": 1.0, "b": 1.0, "w": 1.0, "act": 1.0, "mem": 0.5}] * 4}
PLAN_KEYS = ["format", "ranks", "microbatches", "stages", "order", "meta"]
PROBLEM_KEYS = ["format", "ranks", "microbatches", "comm", "memory_limit", "layers", "meta"]


def _mutated(base: dict, keys: list[str]):
    """The good document with some keys (or nested parts) replaced by arbitrary JSON-ish data."""
    return st.dictionaries(st.sampled_from(keys), json_ish, max_size=3).map(lambda ch: {**base, **ch})


def _write(tmp_path, data) -> object:
    p = tmp_path / "x.json"
    try:
        p.write_text(json.dumps(data))
    except ValueError:          # e.g. a key json cannot write; nothing to load then
        return None
    return p


@SETTINGS
@given(data=st.one_of(json_ish, _mutated(GOOD_PLAN, PLAN_KEYS)))
def test_load_plan_gives_a_plan_or_plan_file_error(tmp_path, data):
    p = _write(tmp_path, data)
    for load in (lambda: plan_from_dict(data, "x"), (lambda: load_plan(p)) if p else None):
        if load is None:
            continue
        try:
            plan = load()
        except PlanFileError:
            continue
        assert isinstance(plan, Plan)


@SETTINGS
@given(data=st.one_of(json_ish, _mutated(GOOD_PROBLEM, PROBLEM_KEYS),
                      st.lists(json_ish, max_size=3).map(lambda ls: {**GOOD_PROBLEM, "layers": ls}),
                      st.dictionaries(st.sampled_from(["f", "b", "w", "act", "mem", "name"]), scalars).map(
                          lambda lay: {**GOOD_PROBLEM, "layers": [lay]})))
def test_load_problem_gives_a_problem_or_problem_error(tmp_path, data):
    p = _write(tmp_path, data)
    for load in (lambda: Problem.from_dict(data, "x"), (lambda: load_problem(p)) if p else None):
        if load is None:
            continue
        try:
            prob = load()
        except ProblemError:
            continue
        assert isinstance(prob, Problem)
        for l in prob.layers:
            assert all(math.isfinite(getattr(l, k)) and getattr(l, k) >= 0 for k in ("f", "b", "w", "act", "mem"))


BASES = [build_named(n, None, ranks=r, microbatches=m).schedule
         for n, r, m in (("1f1b", 2, 3), ("zb-h1", 3, 4), ("interleaved-1f1b", 2, 4), ("gpipe", 3, 3))]
edit = st.tuples(st.sampled_from(["swap", "move", "delete", "duplicate", "cross"]),
                 st.integers(0, 10 ** 6), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6))


def _perturb(sched, edits):
    order = [list(row) for row in sched.order]
    for how, a, b, c in edits:
        r = a % len(order)
        row = order[r]
        if not row:
            continue
        i, j = b % len(row), c % len(row)
        if how == "swap":
            row[i], row[j] = row[j], row[i]
        elif how == "move":
            row.insert(j, row.pop(i))
        elif how == "delete":
            row.pop(i)
        elif how == "duplicate":
            row.insert(j, row[i])
        else:
            other = order[c % len(order)]
            other.insert(b % (len(other) + 1), row.pop(i))
    return sched.with_order(order)


@SETTINGS
@given(base=st.sampled_from(range(len(BASES))), edits=st.lists(edit, min_size=1, max_size=3))
def test_validator_accepts_or_raises_schedule_error_and_accepted_ones_simulate(base, edits):
    s = _perturb(BASES[base], edits)
    try:
        validate(s)
    except ScheduleError as e:
        assert e.problems and str(e)
        return
    res = simulate(s)
    m = res.metrics
    assert math.isfinite(m.makespan) and m.makespan > 0 and 0 <= m.bubble < 1
    assert len(res.timeline.actions) == s.num_actions
