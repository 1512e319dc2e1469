"""calibrate refits the cost model from measured timelines (torch-free, fast): per-kind scale
factors, comm, overhead and activation memory come back from synthetic runs of several plans."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from flexpipe_ui.library import build_named
from flexpipe_ui.problem import Layer, Problem, load_problem, save_problem
from flexpipe_ui.sim import simulate

from flexpipe_ui.calibrate import CalibrationError, _fit_overhead, calibrate, calibrate_runs, kind_overhead

ROOT = Path(__file__).resolve().parents[2]


def _base(n=8):
    return Problem(ranks=2, microbatches=4, comm=0.0,
                   layers=tuple(Layer(f=1.0 + i % 3, b=1.0 + (i % 2), w=0.5 + 0.25 * (i % 4), act=1.0 + i,
                                      mem=2.0, name=f"l{i}") for i in range(n)))


def _scaled(p: Problem, sf, sb, sw, comm) -> Problem:
    return p.with_(comm=comm, layers=tuple(replace(l, f=l.f * sf, b=l.b * sb, w=l.w * sw) for l in p.layers))


def _measured(plan, prob, peaks=None):
    tl = simulate(plan, prob).timeline
    return replace(tl, source="measured", peak_memory_measured=peaks)


def test_calibrate_recovers_known_scale_factors_from_several_plans():
    base = _base()
    truth = _scaled(base, 1.3, 0.8, 1.5, comm=0.4)
    plans = [build_named(n, base) for n in ("1f1b", "zb-h1", "interleaved-1f1b")]
    runs = [(p, [_measured(p, truth)]) for p in plans]
    got = calibrate_runs(runs, base, fit_overhead=False)
    assert got.comm == pytest.approx(0.4)
    for lg, lt in zip(got.layers, truth.layers):
        for k in "fbw":
            assert getattr(lg, k) == pytest.approx(getattr(lt, k)), (k, lg, lt)
    # a plan none of the runs used is predicted as the truth predicts it
    other = build_named("zb-v", base)
    assert simulate(other, got).makespan == pytest.approx(simulate(other, truth).makespan)
    cal = got.meta["calibration"]
    assert cal["plans"] == 3 and cal["kind_scale"]["F"] == pytest.approx(1.3)
    assert cal["kind_scale"]["I"] == pytest.approx(0.8) and cal["kind_scale"]["W"] == pytest.approx(1.5)
    # 1F1B's fused B: each of its stages' bw sums to that stage's measured B (= b + w of the truth)
    bw = [l.bw for l in got.layers]
    for lay in plans[0].partition:
        assert sum(bw[i] for i in lay) == pytest.approx(sum(truth.layers[i].b + truth.layers[i].w for i in lay))


def test_calibrate_takes_the_switch_off_before_refitting():
    """Runs of plans whose ranks switch stages (interleaved, ZB-V) include the ``switch`` time;
    calibrate takes it off each action first, so the per-layer costs are not inflated by it and
    the refit problem predicts every plan as the truth does."""
    base = replace(_base(), layers=tuple(replace(l, switch=0.25 + 0.125 * (i % 2))
                                         for i, l in enumerate(_base().layers)))
    truth = _scaled(base, 1.25, 0.75, 1.5, comm=0.0)
    plans = [build_named(n, base) for n in ("1f1b", "zb-h1", "interleaved-1f1b")]
    got = calibrate_runs([(p, [_measured(p, truth)]) for p in plans], base, fit_overhead=False)
    for lg, lt in zip(got.layers, truth.layers):
        for k in ("f", "b", "w", "switch"):
            assert getattr(lg, k) == pytest.approx(getattr(lt, k)), (k, lg, lt)
    other = build_named("zb-v", base)
    assert simulate(other, got).makespan == pytest.approx(simulate(other, truth).makespan)


def test_the_profilers_probe_loop_gap_is_replaced_not_added_twice():
    """A profiled overhead holds the handlers' fixed part + the executor probe's loop gap
    (meta["executor_probe"]); calibrate puts the runs' own loop gap in its place."""
    base = _base()
    truth = base.with_(overhead=0.125)
    profiled = base.with_(meta={"executor_probe": {"loop_gap": 0.25}}, overhead=0.375)
    plans = [build_named(n, base) for n in ("1f1b", "zb-h1")]
    got = calibrate_runs([(p, [_measured(p, truth)]) for p in plans], profiled, fit_overhead=False)
    assert got.meta["calibration"]["loop_gap"] == 0.0          # simulated runs: no executor gaps
    assert kind_overhead(got) == {k: pytest.approx(0.125) for k in "FIWB"}
    assert "executor_probe" not in got.meta


def test_calibrate_with_fused_backward_refits_bw_and_keeps_the_split():
    base = _base()
    truth = _scaled(base, 1.0, 2.0, 2.0, comm=0.0)
    plan = build_named("1f1b", base)            # fused B: measured B = 2 (b + w)
    got = calibrate(_measured(plan, truth), plan, base)
    for lg, lb in zip(got.layers, base.layers):
        assert lg.bw == pytest.approx(2 * (lb.b + lb.w))
        assert lg.b / lg.w == pytest.approx(lb.b / lb.w)        # only fused runs: the b:w split is kept


def test_overhead_fit_recovers_the_fixed_part():
    a, o = 1.7, 0.35
    obs = [("F", (i,), a * w + o, w) for i, w in enumerate([1.0, 2.0, 3.5, 5.0])]
    got = _fit_overhead(obs, {"F": 0.0, "I": 0.1, "W": 0.0, "B": 0.0})
    assert got["F"] == pytest.approx(o) and got["I"] == 0.1          # I: no points, kept
    # stages of one size cannot tell overhead from work: kept as profiled
    same = [("W", (i,), 2.0 + 0.01 * i, 1.0) for i in range(4)]
    assert _fit_overhead(same, {"F": 0, "I": 0, "W": 0.2, "B": 0})["W"] == 0.2


def test_activation_memory_is_scaled_to_measured_peaks():
    base = _base()
    plan = build_named("zb-h1", base)
    m = simulate(plan, base).metrics
    peaks = tuple(s + 1.5 * a for s, a in zip(m.static_memory, m.peak_activation))
    got = calibrate(_measured(plan, base, peaks), plan, base)
    assert got.meta["calibration"]["act_scale"] == pytest.approx(1.5)
    assert simulate(plan, got).metrics.peak_memory == pytest.approx(peaks)


def test_calibrate_refuses_timelines_of_another_plan():
    base = _base()
    tl = _measured(build_named("1f1b", base), base)
    with pytest.raises(CalibrationError, match="stage"):
        calibrate(tl, build_named("interleaved-1f1b", base), base)
    with pytest.raises(CalibrationError, match="no timelines"):
        calibrate_runs([], base)


def test_cost_fields_round_trip_through_a_problem_file(tmp_path):
    base = _base(3)
    p = base.with_(bandwidth=2.5, overhead={"F": 0.1, "I": 0.2, "W": 0.05, "B": 0.2}, comm_cpu=0.3,
                   layers=(replace(base.layers[0], out=0.5, bw=1.0, act_w=0.5, grad=2.0, switch=0.25),
                           replace(base.layers[1], out=0.5), base.layers[2]))
    path = tmp_path / "p.json"
    save_problem(p, path)
    got = load_problem(path)
    assert got.bandwidth == 2.5 and got.comm_cpu == 0.3 and kind_overhead(got)["I"] == 0.2
    l0 = got.layers[0]
    assert (l0.out, l0.bw, l0.act_w, l0.grad, l0.switch) == (0.5, 1.0, 0.5, 2.0, 0.25)
    assert got.layers[1].out == 0.5 and got.layers[2].bw is None and got.layers[1].switch is None
    assert kind_overhead(_base(2)) == {} and _base(2).bandwidth is None


def test_calibrate_imports_without_torch():
    code = ("import sys, flexpipe_ui.calibrate; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_executors_time_between_actions_becomes_overhead():
    base = _base()
    plan = build_named("zb-h1", base)
    g = 0.25                      # each stage's action took work + g on the rank, only work was timed
    padded = base.with_(layers=tuple(replace(l, f=l.f + g / 4, b=l.b + g / 4, w=l.w + g / 4)
                                     for l in base.layers))
    tl = simulate(plan, padded).timeline
    measured = replace(tl, source="measured", end=tl.end - g)
    got = calibrate(measured, plan, base)
    assert got.meta["calibration"]["loop_gap"] == pytest.approx(g)
    assert kind_overhead(got) == pytest.approx({k: g for k in "FIWB"})
    for lay in plan.partition:
        for k in "fbw":
            assert sum(getattr(got.layers[i], k) for i in lay) == pytest.approx(
                sum(getattr(base.layers[i], k) for i in lay))


def test_latency_and_bandwidth_fit():
    pytest.importorskip("torch")
    from kernel_runtime.measure.profile_comm import fit_latency_bandwidth
    pts = [(mib, 0.08 + mib / 2.5) for mib in (0.0, 0.0625, 1.0, 4.0)]
    lat, bw = fit_latency_bandwidth(pts)
    assert lat == pytest.approx(0.08) and bw == pytest.approx(2.5)
    # flat or single points: latency only, infinite bandwidth; never a negative latency
    assert fit_latency_bandwidth([(1.0, 0.3)]) == (0.3, float("inf"))
    lat, bw = fit_latency_bandwidth([(0.0, 0.01), (4.0, 2.0), (8.0, 4.2)])
    assert lat >= 0 and bw > 0
