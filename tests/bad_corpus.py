"""A generated corpus of bad (and a few good) inputs for the ``flexpipe`` command, and its runner.

``build(folder)`` writes the plan, problem and autosave-free input files and returns ``Case``s: the
command line, the exit code it must give (2: refused with a message naming ``needle``; 0: accepted,
with finite JSON where it prints JSON) and the class of bad input it belongs to. ``run(case)`` runs
one through ``flexpipe_ui.cli.main`` in-process and classifies the outcome. Used by
``tests/test_bad_inputs.py`` and ``benchmarks/bad_inputs.py``.
"""
from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Case", "Outcome", "build", "run", "ESCAPE"]

ESCAPE = ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__=='BuiltinImporter'][0]"
          ".load_module('os').system('touch {marker}')")


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    expect: int            # 2: refused with a message naming ``needle``; 0: accepted
    needle: str            # what the error message must name (the file or the flag)
    kind: str              # the class of bad input


@dataclass(frozen=True)
class Outcome:
    case: Case
    rc: int | None
    seconds: float
    stderr: str
    verdict: str           # "refused" (exit 2 + message), "ok" (right exit 0), "other"


def _valid_plan(ranks=2, microbatches=4, layers=4) -> dict:
    from flexpipe_ui.library import build_named
    from flexpipe_ui.planfile import plan_to_dict
    from flexpipe_ui.problem import Layer, Problem
    pr = Problem(ranks=ranks, microbatches=microbatches, layers=tuple(Layer(f=1, b=1, w=1, act=1) for _ in range(layers)))
    return plan_to_dict(build_named("1f1b", pr))


def _problem(**over) -> dict:
    d = {"format": "flexpipe-problem/1", "ranks": 2, "microbatches": 4, "comm": 0.0, "memory_limit": 100.0,
         "layers": [{"f": 1.0, "b": 1.0, "w": 1.0, "act": 1.0, "mem": 0.0} for _ in range(4)]}
    d.update(over)
    return d


def _plan_files(folder: Path) -> list[tuple[str, bytes, int, str]]:
    """(name, content, expected exit, kind)."""
    good = _valid_plan()
    out: list[tuple[str, bytes, int, str]] = []

    def add(name, data, kind, expect=2):
        raw = data if isinstance(data, bytes) else (data if isinstance(data, str) else json.dumps(data)).encode()
        out.append((name, raw, expect, kind))

    def with_(**kw):
        d = json.loads(json.dumps(good))
        d.update(kw)
        return d

    add("deep_list", "[" * 5000 + "]" * 5000, "depth")
    add("deep_obj", '{"a":' * 3000 + "1" + "}" * 3000, "depth")
    add("deep_meta", json.dumps(with_()).replace('"meta": {', '"meta": {"x": ' + "[" * 40 + "]" * 40 + ", ", 1), "depth")
    for i, act in enumerate(["0F" + "9" * 30, "9" * 30 + "F0", "0F" + "9" * 5000, "0" + "A" * 100 + "0", "0X0",
                             "", " ", "F0", "0F", "-1F0", "0F-1", "0f0", "0F0 0F1", "\u00e90F0"]):
        d = with_()
        d["order"]["0"][0] = act
        add(f"action_{i}", d, "action text")
    for i, v in enumerate([123, None, 1.5, ["0F0"], {"a": 1}, True]):
        d = with_()
        d["order"]["0"][1] = v
        add(f"action_type_{i}", d, "action text")
    bigs = [10**9, 10**18, "BIG400", 1e30, -1, 0, "8", 2.5, True, None, [], {}, 10**6]
    for key in ("microbatches", "ranks"):
        for i, v in enumerate(bigs):
            text = json.dumps(with_(**{key: 0 if v == "BIG400" else v}))
            if v == "BIG400":
                text = text.replace(f'"{key}": 0', f'"{key}": ' + "9" * 400)
            add(f"{key}_{i}", text, f"plan {key}")
    for key in ("ranks", "microbatches"):
        for c in ("NaN", "Infinity", "-Infinity"):
            add(f"{key}_{c}", json.dumps(with_()).replace(f'"{key}": ', f'"{key}": {c}, "x{key}": ', 1), "non-finite")
    add("meta_nan", json.dumps(with_()).replace('"meta": {', '"meta": {"x": NaN, ', 1), "non-finite")
    raw = json.dumps(with_(meta={"name": "PLACEHOLDER"})).encode()
    add("latin1", raw.replace(b"PLACEHOLDER", "caf\u00e9".encode("latin-1")), "encoding")
    add("ff_byte", raw.replace(b"PLACEHOLDER", b"\xff\xfe"), "encoding")
    add("utf16", json.dumps(good).encode("utf-16"), "encoding")
    add("empty_plan", {"format": "flexpipe-plan/1", "ranks": 1, "microbatches": 1, "order": {"0": []}}, "empty plan")
    add("empty_plan_stage", {"format": "flexpipe-plan/1", "ranks": 1, "microbatches": 1, "stages": [{"rank": 0}],
                             "order": {"0": []}}, "empty plan")
    add("empty_file", b"", "syntax")
    add("whitespace", b"  \n ", "syntax")
    add("truncated", json.dumps(good)[:-7], "syntax")
    add("trailing", json.dumps(good) + "]", "syntax")
    for i, top in enumerate([[], None, 3, "plan", True]):
        add(f"top_{i}", top, "structure")
    add("format_wrong", with_(format="flexpipe-plan/9"), "structure")
    add("format_problem", with_(format="flexpipe-problem/1"), "structure")
    add("format_long", with_(format="x" * 100000), "structure")
    for key in ("ranks", "microbatches", "order"):
        d = with_()
        del d[key]
        add(f"missing_{key}", d, "structure")
    for i, order in enumerate([[], "0F0", {"0": "0F0 0B0"}, {"5": ["0F0"]}, {"-1": []}, {"abc": []},
                               {str(k): [] for k in range(3000)}]):
        add(f"order_{i}", with_(order=order), "structure")
    for i, stages in enumerate([[], {}, [1, 2], [{"rank": 5}, {"rank": 1}], [{"rank": -1}, {"rank": 1}],
                                [{"rank": 0, "layers": [0, 1]}, {"rank": 1, "layers": [3, 2]}],
                                [{"rank": 0, "layers": ["0"]}, {"rank": 1, "layers": [1]}],
                                [{"rank": 0, "layers": []}, {"rank": 1, "layers": [0]}],
                                [{"rank": 0, "layers": [0, 1]}, {"rank": 1}],
                                [{"rank": 0, "layers": [0]}, {"rank": 1, "layers": [1]}, {"rank": 1, "layers": [2]}],
                                [{"rank": 0}] * 20000]):
        add(f"stages_{i}", with_(stages=stages), "structure")
    add("meta_list", with_(meta=[1, 2]), "structure")
    add("big_stage_number", with_(stages=None, order={"0": ["0F0", "999999999F0"], "1": []}) | {}, "range")
    # schedule problems (the validator): missing, duplicated, misplaced, out of range, deadlock
    d = with_()
    d["order"]["1"] = d["order"]["1"][:-1]
    add("sched_missing", d, "schedule")
    d = with_()
    d["order"]["0"] = d["order"]["0"] + [d["order"]["0"][0]] * 5
    add("sched_dup", d, "schedule")
    d = with_()
    d["order"]["0"][0], d["order"]["1"][0] = d["order"]["1"][0], d["order"]["0"][0]
    add("sched_wrong_rank", d, "schedule")
    d = with_()
    d["order"]["0"].append("0F77")
    add("sched_mb_range", d, "schedule")
    d = with_()
    r1 = d["order"]["1"]
    d["order"]["1"] = r1[1:2] + r1[:1] + r1[2:]
    add("sched_order", d, "schedule")
    d = with_()
    d["order"]["0"] = list(reversed(d["order"]["0"]))
    add("sched_reversed", d, "schedule")
    many = with_()
    many["order"]["0"] = many["order"]["0"] + ["0F0"] * 200_000    # a duplicate-heavy plan (2 MB)
    add("dup_200k", many, "size")
    add("sparse_wide", {"format": "flexpipe-plan/1", "ranks": 1024, "microbatches": 900,   # 1.8M missing
                        "stages": [{"rank": i} for i in range(1024)], "order": {"0": ["0F0", "0B0"]}}, "size")
    # accepted plans: the right exit 0
    add("good_1f1b", good, "valid", 0)
    from flexpipe_ui.library import build_named
    from flexpipe_ui.planfile import plan_to_dict
    for name, r, m in (("zb-h1", 4, 8), ("interleaved-1f1b", 2, 4), ("gpipe", 3, 5)):
        add(f"good_{name}", plan_to_dict(build_named(name, None, ranks=r, microbatches=m)), "valid", 0)
    add("good_ranks_idle", with_(ranks=8, order={**good["order"]}), "valid", 0)
    return out


def _perturbed_plans(n: int = 30) -> list[tuple[str, bytes, int, str]]:
    """Valid library plans with one certain defect each: an action deleted, duplicated, moved to
    another rank, or given a microbatch out of range (``n`` of each, seeded)."""
    import random
    from flexpipe_ui.library import build_named
    from flexpipe_ui.planfile import plan_to_dict
    rng = random.Random(13)
    bases = [plan_to_dict(build_named(name, None, ranks=r, microbatches=m))
             for name, r, m in (("1f1b", 2, 4), ("zb-h1", 3, 4), ("interleaved-1f1b", 2, 4), ("gpipe", 4, 4))]
    out = []
    for i in range(n):
        for how in ("delete", "duplicate", "move", "range"):
            d = json.loads(json.dumps(rng.choice(bases)))
            ranks = [k for k, row in d["order"].items() if row]
            r = rng.choice(ranks)
            j = rng.randrange(len(d["order"][r]))
            a = d["order"][r][j]
            if how == "delete":
                del d["order"][r][j]
            elif how == "duplicate":
                d["order"][r].insert(rng.randrange(len(d["order"][r]) + 1), a)
            elif how == "move":
                other = rng.choice([k for k in d["order"] if k != r])
                del d["order"][r][j]
                d["order"][other].insert(rng.randrange(len(d["order"][other]) + 1), a)
            else:
                stage = a[:len(a) - len(a.lstrip("0123456789"))]
                d["order"][r][j] = f"{stage}{a[len(stage)]}{d['microbatches'] + rng.randrange(5)}"
            out.append((f"perturbed_{how}_{i}", json.dumps(d).encode(), 2, "schedule"))
    return out


def _problem_files(folder: Path) -> list[tuple[str, bytes, int, str]]:
    out = []

    def add(name, data, kind, expect=2):
        raw = data if isinstance(data, bytes) else (data if isinstance(data, str) else json.dumps(data)).encode()
        out.append((name, raw, expect, kind))

    bad_values = ["BIG400", 1e308, -1, "1", True, None, "NaN", "Infinity", []]
    for key in ("ranks", "microbatches", "comm", "memory_limit"):
        for i, v in enumerate(bad_values):
            if key == "memory_limit" and v is None:
                continue                     # null memory_limit means "no cap": valid
            text = json.dumps(_problem(**{key: 0.5 if isinstance(v, str) and v in ("BIG400", "NaN", "Infinity") else v}))
            if v in ("BIG400", "NaN", "Infinity"):
                text = text.replace(f'"{key}": 0.5', f'"{key}": ' + ("9" * 400 if v == "BIG400" else v))
            add(f"p_{key}_{i}", text, f"problem {key}")
    for key in ("f", "b", "w", "act", "mem"):
        for i, v in enumerate(bad_values):
            d = _problem()
            d["layers"][2][key] = 0.5 if v in ("BIG400", "NaN", "Infinity") else v
            text = json.dumps(d)
            if v in ("BIG400", "NaN", "Infinity"):
                text = text.replace(f'"{key}": 0.5', f'"{key}": ' + ("9" * 400 if v == "BIG400" else v))
            add(f"p_layer_{key}_{i}", text, "problem layer cost")
    for i, layers in enumerate([[], {}, [1], [{"f": 1}], [{"f": 1, "b": 1, "w": 1, "name": 3}],
                                [{"f": 1, "b": 1, "w": 1}] * 20000]):
        add(f"p_layers_{i}", _problem(layers=layers), "problem structure")
    add("p_ranks_1e6", _problem(ranks=10**6), "problem ranks")
    add("p_mbs_1e6", _problem(microbatches=10**6), "problem microbatches")
    add("p_top_list", [1, 2], "problem structure")
    add("p_format", _problem(format="flexpipe-plan/1"), "problem structure")
    add("p_deep", '{"layers":' + "[" * 4000 + "]" * 4000 + "}", "depth")
    add("p_ff", json.dumps(_problem()).encode().replace(b'"comm"', b'"c\xffomm"'), "encoding")
    return out


def _flag_cases(plan: str, problem: str, out: str) -> list[Case]:
    c = []

    def add(argv, needle):
        c.append(Case(tuple(argv), 2, needle, "flag"))

    for v in ("-1", "nan", "inf", "-inf", "x", "1e400"):
        add(["simulate", plan, "--comm", v], "--comm")
    for v in ("-3", "0", "x", "99999999999999999999999"):
        add(["show", plan, "--steps", v], "--steps")
    for v in ("nan", "0", "-1", "inf"):
        add(["auto", problem, "-o", out, "--time-limit", v], "--time-limit")
    for v in ("0", "-5", "1.5"):
        add(["auto", problem, "-o", out, "--max-evals", v], "--max-evals")
    for v in ("nan", "0", "-1", "inf"):
        add(["auto", problem, "-o", out, "--memory-limit", v], "--memory-limit")
    add(["auto", problem, "-o", out, "--top", "0"], "--top")
    add(["auto", problem, "-o", out, "--exact", "-1"], "--exact")
    for v in ("0", "-2", "100000"):
        add(["import-torch", "1f1b", "--ranks", v, "--microbatches", "4", "-o", out], "--ranks")
    add(["import-torch", "1f1b", "--ranks", "2", "--microbatches", "0", "-o", out], "--microbatches")
    add(["import-torch", "1f1b", "--ranks", "1024", "--microbatches", "65536", "-o", out], "MAX_ACTIONS")
    for v in ("100000", "0", "-1"):
        add(["plan", "1f1b", "--ranks", v, "--microbatches", "8", "-o", out], "--ranks")
    add(["plan", "1f1b", "--ranks", "1024", "--microbatches", "65536", "-o", out], "MAX_ACTIONS")
    add(["plan", "1f1b", "--ranks", "2", "--microbatches", "10000000", "-o", out], "--microbatches")
    add(["plan", "1f1b", "--ranks", "2", "--microbatches", "4", "--chunks", "0", "-o", out], "--chunks")
    tr = ["train", "--schedule", "1f1b", "--ranks", "2"]
    add(tr + ["--batch-size", "0"], "--batch-size")
    add(tr + ["--dim", "30"], "--dim 30")
    add(tr + ["--dtype", "int8"], "--dtype")
    for v in ("-1", "0", "nan", "inf"):
        add(tr + ["--timeout", v], "--timeout")
    add(tr + ["--steps", "0"], "--steps")
    add(tr + ["--lr", "nan"], "--lr")
    add(tr + ["--layers", "1"], "--layers")
    add(tr[:3] + ["--ranks", "0"], "--ranks")
    add(["profile", "--ranks", "0"], "--ranks")
    add(["profile", "--repeats", "0"], "--repeats")
    return c


def _program_cases(out: str, marker: Path) -> list[Case]:
    base = ["plan", "--ranks", "2", "--microbatches", "4", "-o", out, "--program"]
    bad = [ESCAPE.format(marker=marker), f"__import__('os').system('touch {marker}')",
           "Program(placement=vshape(), rules=Rules().__class__)", "(lambda: Program())()",
           "Program(rules=Rules(priority=tuple(x for x in 'IFW')))", "open('/etc/passwd')",
           "Program(**{'placement': vshape()})", "Program(placement=vshape(), rules=Rules(in_flight=f'{1}'))",
           "Program(" * 200 + ")" * 200, "Program(placement=looped(2)" + " " * 20000 + ")",
           "Program(placement=", "Rules(priority=('I','F','W'))", "looped(2)", "Program(placement=looped(0))",
           "Program(placement=looped(2**70))", "Program(rules=Rules(traversal='sideways'))",
           "Program(placement=vshape()).on(1)", "Program(placement=vshape()); import os",
           "Program(placement=vshape(), rules=Rules(backward='split', priority=('I','F','W'), in_flight='__import__(\"os\")'))",
           "[Program()][0]", "Program(placement=explicit([0, 5]))"]
    cases = [Case(tuple(base + [p]), 2, "error", "dsl program") for p in bad]
    for p in ("Program(placement=vshape(), rules=Rules(backward='split', priority=('I','F','W')))",
              "Program(placement=looped(2), rules=Rules(in_flight='2 * p').on(1, warmup=3))",
              "Program(rules=Rules(backward='split', w_policy='fill'))"):
        cases.append(Case(tuple(base + [p]), 0, "", "valid"))
    cases.append(Case(tuple(base[:-1] + ["--recompute", "--program", "Program(placement=vshape())"]), 0, "", "valid"))
    return cases


def build(folder: Path) -> list[Case]:
    """Write the corpus under ``folder`` and return every case (files x commands, flags, programs)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = str(folder / "out.json")
    cases: list[Case] = []
    plan_good = folder / "plan_good.json"
    plan_good.write_text(json.dumps(_valid_plan()))
    prob_good = folder / "problem_good.json"
    prob_good.write_text(json.dumps(_problem()))
    for name, raw, expect, kind in _plan_files(folder):
        p = folder / f"plan_{name}.json"
        p.write_bytes(raw)
        for cmd in (["validate", str(p)], ["simulate", str(p), "--json"], ["show", str(p)],
                    ["export", str(p), "--torch-csv", str(folder / "out.csv")]):
            cases.append(Case(tuple(cmd), expect, p.name, kind))
    for name, raw, expect, kind in _perturbed_plans():
        p = folder / f"plan_{name}.json"
        p.write_bytes(raw)
        for cmd in (["validate", str(p)], ["simulate", str(p), "--json"]):
            cases.append(Case(tuple(cmd), expect, p.name, kind))
    big = folder / "plan_over_size_limit.json"       # just over MAX_FILE_BYTES: refused before reading
    from flexpipe_ui.limits import MAX_FILE_BYTES
    with open(big, "wb") as fh:
        fh.write(b'{"format": "flexpipe-plan/1", "ranks": 1, "microbatches": 1, "order": {"0": [')
        fh.write(b'"0F0",' * ((MAX_FILE_BYTES // 6) + 10) + b'"0F0"]}}')
    cases.append(Case(("validate", str(big)), 2, big.name, "size"))
    for name, raw, expect, kind in _problem_files(folder):
        p = folder / f"problem_{name}.json"
        p.write_bytes(raw)
        cases.append(Case(("simulate", str(plan_good), "--problem", str(p), "--json"), expect, p.name, kind))
        cases.append(Case(("plan", "1f1b", "--problem", str(p), "-o", out), expect, p.name, kind))
        if name.endswith("_0") or name.startswith("p_layers") or "1e6" in name:
            cases.append(Case(("auto", str(p), "-o", out, "--max-evals", "3", "-q"), expect, p.name, kind))
    # problems that load but do not fit the command
    three = folder / "problem_three_layers.json"
    three.write_text(json.dumps(_problem(layers=[{"f": 1, "b": 1, "w": 1}] * 3)))
    nolayers = folder / "plan_4_stages_no_layers.json"
    d = _valid_plan(ranks=4, microbatches=4, layers=4)
    for st in d["stages"]:
        st.pop("layers")
    nolayers.write_text(json.dumps(d))
    for cmd in ("validate", "simulate", "show"):
        cases.append(Case((cmd, str(nolayers), "--problem", str(three)), 2, nolayers.name, "plan vs problem"))
    zero = folder / "problem_zero_cost.json"
    zero.write_text(json.dumps(_problem(layers=[{"f": 0, "b": 0, "w": 0}] * 4)))
    cases.append(Case(("auto", str(zero), "-o", str(folder / "zero_out.json"), "-q"), 2, "f = b = w = 0", "zero cost"))
    cases.append(Case(("simulate", str(plan_good), "--problem", str(zero), "--json"), 0, "", "valid"))
    huge_cost = folder / "problem_huge_costs.json"
    huge_cost.write_text(json.dumps(_problem(layers=[{"f": 1e12, "b": 1e-12, "w": 1e12, "act": 1e12, "mem": 1e12},
                                                     {"f": 1e-12, "b": 1e12, "w": 0, "act": 0, "mem": 0}] * 2,
                                             memory_limit=None)))
    cases.append(Case(("simulate", str(plan_good), "--problem", str(huge_cost), "--json"), 0, "", "valid"))
    cases.append(Case(("plan", "1f1b", "--problem", str(huge_cost), "--partition", "balanced", "-o", out), 0, "", "valid"))
    cases.append(Case(("auto", str(huge_cost), "-o", out, "--max-evals", "5", "-q"), 0, "", "valid"))
    many = folder / "problem_600_layers.json"
    many.write_text(json.dumps(_problem(layers=[{"f": 1, "b": 1, "w": 1}] * 600)))
    cases.append(Case(("auto", str(many), "-o", out), 2, "MAX_AUTO_LAYERS", "auto size"))
    mbs = folder / "problem_2000_microbatches.json"
    mbs.write_text(json.dumps(_problem(microbatches=2000)))
    cases.append(Case(("auto", str(mbs), "-o", out), 2, "MAX_AUTO_MICROBATCHES", "auto size"))
    cases += _flag_cases(str(plan_good), str(prob_good), out)
    cases += _program_cases(out, folder / "ESCAPED")
    return cases


def _finite_json(text: str) -> bool:
    def refuse(c):
        raise ValueError(c)
    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


def run(case: Case) -> Outcome:
    """Run one case through ``flexpipe_ui.cli.main`` in-process and classify it."""
    from flexpipe_ui.cli import main
    err, out = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    rc: int | None
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(list(case.argv))
    except SystemExit as e:          # argparse
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException as e:       # noqa: BLE001 - a traceback is what the corpus hunts for
        rc = None
        err.write(f"{type(e).__name__}: {e}")
    dt = time.perf_counter() - t0
    stderr = err.getvalue()
    verdict = "other"
    if case.expect == 2 and rc == 2:
        first = stderr.strip().splitlines()[0] if stderr.strip() else ""
        if "error:" in first and case.needle in stderr and "Traceback" not in stderr:
            verdict = "refused"
    elif case.expect == 0 and rc == 0:
        text = out.getvalue()
        if "--json" not in case.argv or _finite_json(text):
            verdict = "ok"
    return Outcome(case, rc, dt, stderr[:2000], verdict)
