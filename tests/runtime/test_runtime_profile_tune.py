"""The profiler (in worker processes, through the executor's handlers), measured memory in the
run's timelines, and ``tune`` end to end on a tiny real model over 2 gloo processes. No timing
assertions: times are checked for presence, sign and finiteness only."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process


def _tiny():
    from kernel_runtime.models import demo_gpt
    return demo_gpt(vocab=64, seq=8, dim=16, heads=2, n_blocks=2, batch_size=8)


def _finite_pos(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.mark.timeout(180)
def test_profile_measures_every_cost_field_in_worker_processes():
    from flexpipe_ui.calibrate import kind_overhead
    from kernel_runtime.measure.profiler import profile
    spec = _tiny()
    prob = profile(spec, ranks=2, microbatches=2, repeats=3, warmup=1, stages=[(1, 2)])
    ov = kind_overhead(prob)
    n = spec.num_layers
    assert prob.num_layers == n and prob.meta["processes"] == 2 and prob.meta["threads"] >= 1
    assert all(_finite_pos(l.f) and _finite_pos(l.w) and l.act > 0 and l.mem > 0 for l in prob.layers)
    assert prob.layers[0].b == 0.0 and all(_finite_pos(l.b) for l in prob.layers[1:])   # embedding: W does all
    # token ids in: the first stage's I is a no-op and its W the fused backward, whatever its layers
    assert prob.data_input is True
    c2 = prob.stage_costs(((0, 1), (2, 3)))
    assert c2.b[0] == 0.0 and c2.w[0] == pytest.approx(prob.layers[0].bw + prob.layers[1].bw)
    for i, e in enumerate(prob.layers):
        assert _finite_pos(e.bw) and e.act_w >= e.act
        assert (e.out > 0) if i < n - 1 else e.out == 0.0         # the head sends nothing on
    # a block's output: microbatch (4) x seq (8) x dim (16) float32
    assert prob.layers[1].out == pytest.approx(4 * 8 * 16 * 4 / 2 ** 20)
    assert set(ov) == {"F", "I", "W", "B"} and all(_finite_pos(v) for v in ov.values())
    # communication between the two workers over gloo
    assert math.isfinite(prob.comm) and prob.comm >= 0
    assert prob.bandwidth is None or _finite_pos(prob.bandwidth)
    assert 0.0 <= prob.comm_cpu <= 1.0 and len(prob.meta["comm_samples"]) >= 2
    # the executor probe (a short GPipe run): its time between actions is in every overhead,
    # its median message wait is comm
    probe = prob.meta["executor_probe"]
    assert probe["plan"] == "gpipe" and probe["steps"] == 2 and probe["loop_gap"] >= 0
    assert prob.comm == probe["comm_wait"] and math.isfinite(probe["comm_pingpong"])
    assert all(ov[k] == pytest.approx(prob.meta["overhead_measured"][k] + probe["loop_gap"])
               for k in "FIWB")
    # switching stages: measured against another stage's actions, never negative
    assert all(math.isfinite(e.switch) and e.switch >= 0 for e in prob.layers)
    st = prob.meta["stages"]
    # the groups asked for, then one stage per rank (the stage context the layers are scaled by)
    assert [s["layers"] for s in st] == [[1, 2], [0, 1], [2, 3]] and all(_finite_pos(st[0][k]) for k in "fbw")
    ctx = prob.meta["stage_context"]
    assert len(ctx) == n and all(set(c) == {"F", "I", "W", "B"} and all(v > 0 for v in c.values()) for c in ctx)
    # the same model profiled again in this process: same structure and memory, times positive
    again = profile(spec, ranks=2, microbatches=2, repeats=2, warmup=1, processes=0)
    assert [l.name for l in again.layers] == [l.name for l in prob.layers]
    assert [(l.act, l.mem) for l in again.layers] == [(l.act, l.mem) for l in prob.layers]
    assert [(e.out, e.act_w) for e in again.layers] == [(e.out, e.act_w) for e in prob.layers]
    assert all(_finite_pos(l.f) for l in again.layers) and again.meta["processes"] == 0


@pytest.mark.timeout(120)
def test_measured_memory_is_in_every_timeline_and_covers_the_parameters():
    from flexpipe_ui.library import build_named

    from kernel_runtime import launch
    spec = _tiny()
    plan = build_named("zb-h1", None, ranks=2, microbatches=2)
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.problem import even_partition
    plan = Plan(plan.schedule, even_partition(spec.num_layers, plan.schedule.num_stages))
    h = launch(plan, model=spec, steps=2)
    h.wait(100)
    layers = spec.layers(range(spec.num_layers), 0)
    param_mib = [sum(p.numel() * 4 for i in plan.partition[s] for p in layers[i].parameters()) / 2 ** 20
                 for s in range(plan.schedule.num_stages)]
    for tl in h.timelines:
        peaks = tl.peak_memory_measured
        assert peaks is not None and len(peaks) == 2
        for r in range(2):
            mine = sum(param_mib[s] for s, rr in enumerate(plan.schedule.placement) if rr == r)
            # parameters + gradients (SGD keeps no state) + some activation
            assert peaks[r] > 2 * mine, (r, peaks, mine)
        assert tl.shifted().peak_memory_measured == peaks


@pytest.mark.timeout(300)
def test_tune_end_to_end_on_two_gloo_processes():
    from flexpipe_ui.ir import Plan
    from flexpipe_ui.validate import validate

    from flexpipe_ui.calibrate import kind_overhead
    from kernel_runtime import tune
    events = []
    res = tune(_tiny(), ranks=2, microbatches=4, rounds=2, steps=2, time_limit=1.0, repeats=2,
               progress=events.append)
    assert isinstance(res.plan, Plan) and res.plan.ranks == 2
    validate(res.plan.schedule)
    assert res.problem.num_layers == res.profile.num_layers == 4
    # every plan run (the shortlist of each round) feeds the calibration
    assert res.problem.meta["calibration"]["plans"] == sum(len(r.tried) for r in res.rounds)
    for r in res.rounds:                       # the plan a round keeps is the fastest it measured
        # shortlist (3) + the best's partition neighbours (2) + the plan kept before (1)
        assert 1 <= len(r.tried) <= 3 + 2 + 1 and r.measured_ms == min(m for _, _, m in r.tried)
    assert res.stopped in ("converged", "max rounds") and 1 <= len(res.rounds) <= 2
    for r in res.rounds:
        assert _finite_pos(r.predicted_ms) and _finite_pos(r.measured_ms)
        assert len(r.peak_measured) == 2 and all(_finite_pos(x) for x in r.peak_measured)
    assert any(r.plan is res.plan or r.plan == res.plan for r in res.rounds)
    phases = [e.phase for e in events]
    assert phases[0] == "profile" and phases[-1] == "done" and "run" in phases and "calibrate" in phases
    assert set(kind_overhead(res.problem)) == {"F", "I", "W", "B"}
    assert "predicted ms" in res.table()


def test_probe_times_each_pattern_in_steady_state(monkeypatch):
    """Each repetition runs STEADY microbatches of F → B, then STEADY of F → I → W through the
    executor's handlers (F under the saved-tensor hooks), and returns the times of all but the first
    of each pattern: the order the probe times in biased the split/fused ratio (docs/cost_model.md)."""
    from types import MappingProxyType

    from kernel_runtime.measure import profile_time as pt
    spec = _tiny()
    x, tgt = spec.batch(0, 4, torch.Generator().manual_seed(0))
    layers = spec.layers(range(spec.num_layers), 0, device=torch.device("cpu"), dtype=torch.float32)
    unit = (1, 2)
    ins, gys = pt.unit_inputs(layers, [unit], x, spec.loss_fn, tgt)
    p = pt._Probe([layers[i] for i in unit], spec.loss_fn, ins[unit], tgt, gys[unit], False, False)
    calls, hooked = [], []
    real = dict(pt.HANDLERS)

    def spy(kind):
        def h(ex, a, st):
            calls.append(kind)
            if kind == "F":
                hooked.append(torch._C._autograd._top_saved_tensors_default_hooks(False) is not None)
            return real[kind](ex, a, st)
        return h
    monkeypatch.setattr(pt, "HANDLERS", MappingProxyType({**real, **{k: spy(k) for k in "FIWB"}}))
    r = pt._one_rep(p, torch.device("cpu"))
    n = pt.STEADY
    # then STEADY forwards of a microbatch a recompute re-runs: no graph, no saved-tensor hooks
    assert calls == ["F", "B"] * n + ["F", "I", "W"] * n + ["F"] * n
    assert all(hooked[:2 * n]) and not any(hooked[2 * n:])
    assert len(r["bw"]) == len(r["b"]) == len(r["w"]) == n - 1 and len(r["f"]) == 2 * (n - 1)
    assert len(r["f_nograd"]) == n - 1 and all(_finite_pos(v) for v in r["f_nograd"])
    assert all(_finite_pos(v) for k in ("f", "b", "w", "bw") for v in r[k])
    assert r["act"] > 0 and r["act_w"] >= r["act"] and r["out"] == 8 // 2 * 8 * 16 * 4 and not r["deferred"]
    # gradients accumulate over the repetition's microbatches, then are cleared
    assert all(q.grad is None for q in p.params)
    # against another stage: F p, F other, B p, B other per microbatch; p's times but the first
    other = pt.other_stage(unit, spec.num_layers, 2)
    assert other is not None and not set(other) & set(unit)
    ins, gys = pt.unit_inputs(layers, [other], x, spec.loss_fn, tgt)
    q = pt._Probe([layers[i] for i in other], spec.loss_fn, ins[other], tgt, gys[other], False,
                  other[-1] == spec.num_layers - 1)
    calls.clear()
    alt = pt._after_other(p, q, torch.device("cpu"))
    assert calls == ["F", "F", "B", "B"] * n
    assert len(alt["F"]) == len(alt["B"]) == n - 1 and all(_finite_pos(v) for v in alt["F"] + alt["B"])
    assert all(t.grad is None for t in p.params + q.params)


def test_diagnose_split_reorders_keep_every_action():
    """The variants ``benchmarks/diagnose_split.py`` runs are valid plans with the same work."""
    import sys
    from pathlib import Path

    from flexpipe_ui.library import build_named
    from flexpipe_ui.problem import Layer, Problem
    from flexpipe_ui.sim import simulate
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from diagnose_split import reorder
    prob = Problem(ranks=2, microbatches=4, layers=tuple(Layer(f=1.0, b=1.0, w=1.0) for _ in range(4)))
    base = build_named("1f1b", prob)
    for plan in (reorder(base, split_all=True), reorder(base, split_odd=True),
                 reorder(build_named("zb-h1", prob), w_now=True)):
        kinds = [a.kind.name for row in plan.schedule.order for a in row]
        assert kinds.count("F") == 8 and kinds.count("B") + kinds.count("W") == 8
        assert kinds.count("I") == kinds.count("W")
        assert simulate(plan, prob).makespan > 0          # valid: the simulator accepts it
    w_now = reorder(build_named("zb-h1", prob), w_now=True)
    for row in w_now.schedule.order:
        for i, a in enumerate(row):
            if a.kind.name == "W":
                assert row[i - 1].kind.name == "I" and row[i - 1].microbatch == a.microbatch


@pytest.mark.timeout(300)
def test_flexpipe_tune_cli_writes_a_valid_plan(tmp_path):
    """``flexpipe tune`` end to end (2 gloo processes, ``--neighbours`` passed through): the plan file
    it writes loads and validates, and the rounds' table is printed."""
    import subprocess
    import sys

    from flexpipe_ui.planfile import load_plan
    from flexpipe_ui.validate import validate
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", "tune", "--model", "demo-gpt", "--layers", "4",
                        "--dim", "16", "--seq", "8", "--batch-size", "8", "--ranks", "2", "--microbatches", "4",
                        "--rounds", "1", "--steps", "2", "--time-limit", "1", "--shortlist", "2",
                        "--neighbours", "1", "-o", str(out)], capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = load_plan(out)
    validate(plan.schedule)
    assert plan.ranks == 2 and plan.num_layers == 4
    assert "predicted ms" in r.stdout and "stopped:" in r.stdout
