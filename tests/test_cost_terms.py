"""The optional cost fields have one list: the ``Layer`` and ``Problem`` dataclasses.

Adding a cost term touches the cost model (``flexpipe_ui/problem.py`` declares the field and how
a stage sums it, ``flexpipe_ui/costmodel/`` uses it), the profiler probe that measures it
(``kernel_runtime/measure/profile_time.py``) and the docs: nothing else. The test below proves
it on a copy of the source: it adds a field to ``Layer`` and a measurement of the same name to the
probe, and the field then round-trips through the problem file, ``calibrate`` and the profiler's
combination and assembly with no other edit.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from flexpipe_ui.costmodel import StageCosts
from flexpipe_ui.problem import _LAYER_KIND_MAPS, LAYER_TERMS, PROBLEM_TERMS, Layer, Problem

ROOT = Path(__file__).resolve().parents[1]


def test_the_terms_are_the_dataclasses_optional_fields():
    assert LAYER_TERMS == tuple(f.name for f in fields(Layer) if f.default is None)
    assert set(PROBLEM_TERMS) == {f.name for f in fields(Problem) if f.default is None} - {"memory_limit"}
    assert {"out", "bw", "act_w", "grad", "switch", "temp"} <= set(LAYER_TERMS)
    assert {"bandwidth", "overhead", "comm_cpu", "data_input"} <= set(PROBLEM_TERMS)


def test_no_second_list_of_the_cost_fields():
    """No tuple, list or set literal in the core or the runtime names three or more cost fields:
    such a list goes stale when a field is added (costfields.LAYER_FIELDS did)."""
    terms = set(LAYER_TERMS) | set(PROBLEM_TERMS)
    found = []
    for pkg in ("flexpipe_ui", "kernel_runtime"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                    if len(names & terms) >= 3:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(names & terms)}")
    assert not found, f"a second list of cost fields: {found}"


@pytest.mark.parametrize("name", LAYER_TERMS)
def test_every_layer_term_reaches_the_cost_model(name):
    """A layer field that is set arrives in ``StageCosts`` (else the model would ignore it)."""
    assert name in {f.name for f in fields(StageCosts)}
    value = {"F": 0.5} if name in _LAYER_KIND_MAPS else 0.5          # a kind map (temp) or a number
    layers = tuple(Layer(f=1.0, b=1.0, w=1.0, act=1.0, **{name: value}) for _ in range(2))
    costs = Problem(ranks=2, microbatches=2, layers=layers).stage_costs(((0,), (1,)))
    assert getattr(costs, name) is not None


@pytest.mark.parametrize("name", PROBLEM_TERMS)
def test_every_problem_term_reaches_the_cost_model(name):
    assert name in {f.name for f in fields(StageCosts)}


_ADD_TO_LAYER = '''
    probe_extra: float | None = None
    """A new cost term (tests/test_cost_terms.py)."""
'''
_ADD_TO_PROBE = '''    probe_extra: float = field(default=0.0, metadata=_ms())
'''

_CHECK = '''
import sys
from dataclasses import replace
from pathlib import Path

import flexpipe_ui
assert Path(flexpipe_ui.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), flexpipe_ui.__file__
from flexpipe_ui.calibrate import calibrate_runs
from flexpipe_ui.library import build_named
from flexpipe_ui.problem import LAYER_TERMS, Layer, Problem, load_problem, save_problem
from flexpipe_ui.sim import simulate
assert "probe_extra" in LAYER_TERMS

# the problem file
base = Problem(ranks=2, microbatches=4, layers=tuple(
    Layer(f=1.0 + i, b=1.0, w=0.5, act=1.0, probe_extra=0.25 * (i + 1)) for i in range(4)))
path = Path(sys.argv[1]) / "p.json"
save_problem(base, path)
again = load_problem(path)
assert [l.probe_extra for l in again.layers] == [0.25, 0.5, 0.75, 1.0], again.layers

# calibrate: the refit problem keeps the field
truth = base.with_(layers=tuple(replace(l, f=2 * l.f) for l in base.layers))
runs = []
for name in ("1f1b", "zb-h1"):
    plan = build_named(name, base)
    runs.append((plan, [replace(simulate(plan, truth).timeline, source="measured")]))
got = calibrate_runs(runs, base)
assert [l.probe_extra for l in got.layers] == [0.25, 0.5, 0.75, 1.0], got.layers
assert abs(got.layers[0].f - 2.0) < 1e-9

# the profiler: averaged over workers (a time), and assembled into the layer
from kernel_runtime.measure import profiler as pr
def unit(extra):
    return {"f": 1.0, "b": 1.0, "w": 1.0, "bw": 1.5, "act": 2 ** 20, "act_w": 2 ** 20, "out": 2 ** 19,
            "deferred": False, "switch": 0.0, "probe_extra": extra, "samples": {}}
def worker(extra):
    return {"units": {(0,): unit(extra), (1,): unit(extra)}, "temps": {0: {}, 1: {}},
            "noise": {"repeats": 1, "drift": 0.0},
            "overhead": {k: 0.1 for k in "FIWB"},
            "comm": None, "params": [0, 0], "names": ["a", "b"], "grads": [0, 0], "threads": 1,
            "model": "m", "device": "cpu", "dtype": "float32", "torch": "x"}
res = pr._combine([worker(0.2), worker(0.4)])
job = pr._ProfileJob(None, None, None, None, 4, "cpu", "float32", 1, 1, 0, 1, [], 2)
prob = pr._assemble(res, job, ranks=2, optimizer="sgd", comm=None, memory_limit=None, path=None)
assert [round(l.probe_extra, 9) for l in prob.layers] == [0.3, 0.3], prob.layers
print("ok")
'''


@pytest.mark.slow
def test_a_field_added_to_layer_and_the_probe_needs_no_other_edit(tmp_path):
    for pkg in ("flexpipe_ui", "kernel_runtime"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    problem = tmp_path / "flexpipe_ui" / "problem.py"
    text = problem.read_text()
    anchor = "class Problem:"
    head, tail = text.split("@dataclass(frozen=True, kw_only=True)\n" + anchor, 1)
    problem.write_text(head.rstrip("\n") + "\n" + _ADD_TO_LAYER + "\n\n@dataclass(frozen=True, kw_only=True)\n"
                       + anchor + tail)
    probe = tmp_path / "kernel_runtime" / "measure" / "profile_time.py"
    text = probe.read_text()
    anchor = "    samples: dict = field(default_factory=dict)\n"
    assert text.count(anchor) == 1
    probe.write_text(text.replace(anchor, _ADD_TO_PROBE + anchor))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHECK), str(tmp_path)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(tmp_path),
                                                                          "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
