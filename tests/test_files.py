import json

import pytest

from flexpipe_ui import (Layer, Plan, PlanFileError, Problem, ProblemError, Schedule, load_plan,
                         load_problem, plan_from_dict, plan_to_dict, save_plan, save_problem)
from oracles import onef1b


def _plan(p=3, m=4):
    s = onef1b(p, m)
    return Plan(s, tuple((i,) for i in range(p)), {"name": "1f1b", "note": [1, 2]})


@pytest.mark.parametrize("p,m", [(1, 1), (2, 3), (4, 8)])
def test_plan_file_round_trip(tmp_path, p, m):
    plan = _plan(p, m)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    d = json.loads(path.read_text())
    assert d["format"] == "flexpipe-plan/1" and d["ranks"] == p and d["microbatches"] == m
    assert d["stages"] == [{"rank": i, "layers": [i]} for i in range(p)]
    assert d["order"]["0"][0] == "0F0" and set(d["order"]) == {str(r) for r in range(p)}
    back = load_plan(path)
    assert back.schedule == plan.schedule and back.partition == plan.partition and back.meta == plan.meta


def test_plan_without_layers_or_stages():
    d = plan_to_dict(Plan(onef1b(2, 2)))
    assert "layers" not in d["stages"][0]
    assert plan_from_dict(d).partition is None
    del d["stages"]
    assert plan_from_dict(d).schedule.placement == (0, 1)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(format="flexpipe-plan/2"), "flexpipe-plan/2"),
    (lambda d: d.pop("format"), "no 'format'"),
    (lambda d: d.update(format="flexpipe-problem/1"), "problem file"),
    (lambda d: d.pop("order"), "missing key 'order'"),
    (lambda d: d["order"].update({"0": ["0F0", "0Z1"]}), "0Z1"),
    (lambda d: d["order"].update({"7": []}), "outside"),
    (lambda d: d.update(ranks="two"), "'ranks'"),
    (lambda d: d["stages"][1].update(layers=[5]), "contiguous"),
    (lambda d: d["stages"][0].update(rank=9), "stage 0 is on rank 9"),
])
def test_plan_file_errors_are_clear(mutate, needle):
    d = plan_to_dict(_plan())
    mutate(d)
    with pytest.raises(PlanFileError) as e:
        plan_from_dict(d, "x.json")
    assert needle in str(e.value)


def test_corrupt_plan_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"format": "flexpipe-plan/1", "ranks": ')
    with pytest.raises(PlanFileError) as e:
        load_plan(p)
    assert "corrupt JSON" in str(e.value) and "line 1" in str(e.value)


def _problem_dict():
    return {"ranks": 2, "microbatches": 4, "comm": 0.1, "memory_limit": 10.0,
            "layers": [{"f": 1.0, "b": 1.0, "w": 0.5, "act": 1.0, "mem": 2.0},
                       {"f": 2, "b": 2, "w": 1}]}


def test_problem_round_trip(tmp_path):
    pr = Problem.from_dict(_problem_dict())
    assert pr.layers[1].act == 0.0 and pr.memory_limit == 10.0
    save_problem(pr, tmp_path / "p.json")
    d = json.loads((tmp_path / "p.json").read_text())
    assert d["format"] == "flexpipe-problem/1"
    assert load_problem(tmp_path / "p.json") == pr
    sc = pr.stage_costs([(0, 1)])
    assert sc.f.tolist() == [3.0] and sc.w.tolist() == [1.5] and sc.mem.tolist() == [2.0] and sc.comm == 0.1


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["layers"][1].update(f=-1), "layer 1, key 'f'"),
    (lambda d: d["layers"][0].pop("b"), "layer 0: missing key 'b'"),
    (lambda d: d["layers"][1].update(w="fast"), "layer 1, key 'w': expected a number"),
    (lambda d: d.pop("ranks"), "missing key 'ranks'"),
    (lambda d: d.update(microbatches=2.5), "'microbatches': expected an integer"),
    (lambda d: d.update(memory_limit=0), "'memory_limit'"),
    (lambda d: d.update(format="flexpipe-plan/1"), "format"),
    (lambda d: d.update(layers=[]), "non-empty"),
    (lambda d: d["layers"].append(3), "layer 2"),
])
def test_problem_errors_name_layer_and_key(mutate, needle):
    d = _problem_dict()
    mutate(d)
    with pytest.raises(ProblemError) as e:
        Problem.from_dict(d, "prob.json")
    assert needle in str(e.value)
