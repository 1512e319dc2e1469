import json
import subprocess
import sys
from pathlib import Path

import pytest

from flexpipe_ui import Plan, save_plan, save_problem, Problem, Layer
from flexpipe_ui.cli import main
from oracles import onef1b

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)


@pytest.fixture
def files(tmp_path):
    plan = tmp_path / "plan.json"
    save_plan(Plan(onef1b(4, 8), tuple((i, ) for i in range(4))), plan)
    prob = tmp_path / "prob.json"
    save_problem(Problem(ranks=4, microbatches=8, comm=0.0, memory_limit=3.5,
                         layers=tuple(Layer(f=1, b=1, w=1, act=1) for _ in range(4))), prob)
    return tmp_path, plan, prob


def test_validate_and_simulate_json(files, capsys):
    tmp, plan, prob = files
    assert main(["validate", str(plan)]) == 0
    assert "ok:" in capsys.readouterr().out
    assert main(["simulate", str(plan), "--problem", str(prob), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["makespan"] == 33.0 and d["peak_memory"] == [4.0, 3.0, 2.0, 1.0]
    assert d["fits_memory"] is False and len(d["bubble_per_rank"]) == 4


def test_show_prints_grid_and_metrics(files, capsys):
    tmp, plan, prob = files
    assert main(["show", str(plan), "--problem", str(prob)]) == 0
    out = capsys.readouterr().out
    assert "rank 3" in out and "makespan   33" in out and "> memory_limit!" in out


def test_export_and_import_torch(files, capsys):
    tmp, plan, prob = files
    assert main(["export", str(plan), "--torch-csv", str(tmp / "o.csv")]) == 0
    assert (tmp / "o.csv").read_text().startswith("0F0,0F1,0F2,0F3,0B0")
    assert main(["import-torch", "zb-v", "--ranks", "4", "--microbatches", "8", "--problem", str(prob),
                 "-o", str(tmp / "z.json")]) == 2
    assert "cannot split 4 layers into 8 stages" in capsys.readouterr().err
    big = tmp / "big.json"
    save_problem(Problem(ranks=4, microbatches=8, layers=tuple(Layer(f=1, b=1, w=1) for _ in range(10))), big)
    assert main(["import-torch", "zb-v", "--ranks", "4", "--microbatches", "8", "--problem", str(big),
                 "-o", str(tmp / "z.json")]) == 0
    d = json.loads((tmp / "z.json").read_text())
    assert len(d["stages"]) == 8 and d["stages"][7]["rank"] == 0
    assert d["stages"][0]["layers"] == [0, 1] and d["stages"][2]["layers"] == [4]


def test_bad_input_exits_2_without_traceback(files):
    tmp, plan, prob = files
    (tmp / "bad.json").write_text("{nope")
    r = run("validate", tmp / "bad.json")
    assert r.returncode == 2 and "corrupt JSON" in r.stderr and "Traceback" not in r.stderr
    r = run("import-torch", "1f1b", "--ranks", "4", "--microbatches", "8", "-o", tmp / "t.json")
    assert r.returncode == 2 and "3F8" in r.stderr and "Traceback" not in r.stderr
    r = run("simulate", plan, "--problem", tmp / "missing.json")
    assert r.returncode == 2 and "missing.json" in r.stderr
    r = run("simulate")
    assert r.returncode == 2


def test_show_html_writes_offline_gantt(files, capsys):
    tmp, plan, prob = files
    out = tmp / "g.html"
    assert main(["show", str(plan), "--problem", str(prob), "--html", str(out)]) == 0
    html = out.read_text()
    assert "plotly" in html.lower() and "makespan" in html
    assert "<script src=\"http" not in html and len(html) > 1_000_000  # plotly.js inlined: offline
