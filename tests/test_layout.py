"""Megatron-Core layout strings: the grammar (repeats, groups, cosmetic commas), round trips with
partitions, errors that name the position, and the CLI (plan --layout, export --megatron-layout)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from flexpipe_ui.layout import LayoutError, format_layout, layout_stages, parse_layout

ROOT = Path(__file__).resolve().parent.parent


def test_megatron_example_expands_as_megatron_reads_it():
    # DeepSeek-V3 PP16 VPP2 example from Megatron-Core's docs: 32 stages, 61 t + m + E + L
    stages = layout_stages("Et*3|(tt|)*29,m|L")
    assert len(stages) == 32
    assert stages[0] == "Ettt" and stages[1:30] == ["tt"] * 29 and stages[30:] == ["m", "L"]
    assert "".join(stages).count("t") == 61


def test_parse_gives_contiguous_partition():
    assert parse_layout("Et*2|t*2|tt|t*2L", 10) == ((0, 1, 2), (3, 4), (5, 6), (7, 8, 9))
    assert parse_layout("E, tt | tt L") == ((0, 1, 2), (3, 4, 5))        # commas and spaces cosmetic
    assert parse_layout("(Et|t)*1,L") == ((0, 1), (2, 3))
    assert parse_layout("E|(t|)*3,L") == ((0,), (1,), (2,), (3,), (4,))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=12), st.integers(0, 3))
def test_round_trip(sizes, n_mtp):
    n = sum(sizes)
    if n < 2 + n_mtp:
        return
    part, i = [], 0
    for k in sizes:
        part.append(tuple(range(i, i + k)))
        i += k
    kinds = "E" + "t" * (n - 2 - n_mtp) + "m" * n_mtp + "L"
    text = format_layout(part, kinds)
    assert parse_layout(text, n) == tuple(part)
    assert "".join(layout_stages(text)) == kinds
    assert "," not in text or ")*" in text          # commas only after groups


def test_format_compresses_repeated_stages():
    part = [(0, 1, 2, 3)] + [tuple(range(4 + 2 * k, 6 + 2 * k)) for k in range(29)] + [(62,), (63,)]
    assert format_layout(part, "E" + "t" * 61 + "mL") == "Et*3|(tt|)*29,m|L"
    assert format_layout([(0, 1), (2, 3)]) == "Et|tL"


@pytest.mark.parametrize("text,pos,words", [
    ("Et*|L", 3, "repeat count"),
    ("Etx|L", 2, "unknown layer letter 'x'"),
    ("Et)|L", 2, "without a matching"),
    ("(tt|*2", 0, "never closed"),
    ("tt|L", 0, "embedding 'E'"),
    ("E||tL", 2, "stage 1 is empty"),
    ("Et|tt", 4, "loss 'L'"),
    ("Et(tt)|L", 6, "followed by '*n'"),
])
def test_errors_name_the_position(text, pos, words):
    with pytest.raises(LayoutError) as e:
        parse_layout(text)
    msg = str(e.value)
    assert words in msg and f"position {pos}" in msg
    assert msg.splitlines()[-1] == " " * (2 + pos) + "^"


def test_layer_count_and_rank_checks():
    with pytest.raises(LayoutError, match="has 4 layers .* but the model has 6"):
        parse_layout("Et|tL", 6)
    with pytest.raises(LayoutError, match="not a multiple of 2 ranks"):
        parse_layout("Et|t|tL", ranks=2)
    with pytest.raises(LayoutError, match="cover layers"):
        format_layout([(0, 2), (1, 3)])
    with pytest.raises(LayoutError, match="layer kinds"):
        format_layout([(0, 1), (2,)], "EtL!")


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_cli_plan_layout_and_export(tmp_path):
    from flexpipe_ui.problem import Layer, Problem, save_problem
    save_problem(Problem(ranks=2, microbatches=4, layers=tuple(Layer(f=1, b=1, w=1) for _ in range(10))),
                 tmp_path / "p.json")
    out = _cli("plan", "zb-v", "--problem", "p.json", "--layout", "Et*2|t*2|tt|t*2L", "-o", "a.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "a.json").read_text())
    assert [s["layers"] for s in plan["stages"]] == [[0, 1, 2], [3, 4], [5, 6], [7, 8, 9]]
    out = _cli("export", "a.json", "--megatron-layout", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Ett|(tt|)*2,ttL"
    assert parse_layout(out.stdout.strip()) == ((0, 1, 2), (3, 4), (5, 6), (7, 8, 9))
    bad = _cli("plan", "1f1b", "--problem", "p.json", "--layout", "Et*4|t*2L", "-o", "b.json", cwd=tmp_path)
    assert bad.returncode == 2 and "has 8 layers" in bad.stderr and "Traceback" not in bad.stderr
    bad = _cli("plan", "1f1b", "--problem", "p.json", "--layout", "Et*2|t*2|tt|ttL", "-o", "b.json", cwd=tmp_path)
    assert bad.returncode == 2 and "4 stages" in bad.stderr and "2" in bad.stderr
