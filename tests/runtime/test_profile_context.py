"""The profiler's stage context (``profiler.stage_context``) and its drift-widened repetitions
(``profile_time.drift``): layers timed alone are rescaled by how the groups they sit in add up
when timed whole; a series whose halves differ says how far the machine moved."""
from __future__ import annotations

import pytest

from kernel_runtime.measure.assemble import context_groups, stage_context
from kernel_runtime.measure.profile_time import drift

OV = {"F": 0.1, "I": 0.1, "W": 0.1, "B": 0.1}


def _u(f, b, w, bw, deferred=False):
    return {"f": f, "b": b, "w": w, "bw": bw, "deferred": deferred}


def test_layers_rescaled_by_how_their_group_adds_up():
    units = {(0,): _u(1.0, 1.0, 1.0, 2.0), (1,): _u(2.0, 1.0, 1.0, 2.0), (2,): _u(5.0, 5.0, 5.0, 5.0),
             (0, 1): _u(3.3, 2.2, 2.0, 4.4)}
    got = stage_context(units, OV, 3)
    assert got[0]["F"] == pytest.approx((3.3 - 0.1) / (0.9 + 1.9))
    assert got[0] == got[1]
    assert got[2] == {"F": 1.0, "I": 1.0, "W": 1.0, "B": 1.0}        # in no group: as timed


def test_a_data_fed_layer_leaves_its_groups_split_backward_alone():
    units = {(0,): _u(1.0, 0.0, 2.0, 2.0, deferred=True), (1,): _u(1.0, 1.0, 1.0, 2.0),
             (0, 1): _u(2.2, 1.5, 3.0, 4.0)}
    got = stage_context(units, OV, 2)
    assert got[0]["I"] == got[0]["W"] == 1.0 and got[0]["F"] != 1.0


def test_groups_are_one_stage_per_rank():
    assert context_groups(9, 2) == [(0, 1, 2, 3, 4), (5, 6, 7, 8)]
    assert context_groups(6, 4) == [(0, 1), (2, 3), (4, 5)]
    assert context_groups(1, 2) == []


def test_drift_is_the_halves_apart():
    assert drift([10, 10, 10, 10, 10, 10]) == 0.0
    assert drift([10, 10, 10, 12, 12, 12]) == pytest.approx(2 / 11)
    assert drift([10, 11]) == 0.0                                     # too few to tell


def test_median_error_is_the_medians_standard_error():
    from kernel_runtime.measure.profile_time import median_error
    assert median_error([10.0] * 8) == 0.0
    assert median_error([10, 11, 9]) == 0.0                           # too few to tell
    series = [9.0, 10.0, 11.0, 10.0, 9.0, 10.0, 11.0, 10.0]
    import statistics
    q = statistics.quantiles(series, n=4)
    assert median_error(series) == pytest.approx(1.2533 * (q[2] - q[0]) / 1.349 / 8 ** 0.5 / 10.0)
    assert median_error(series * 4) < median_error(series)           # more repetitions, surer median


def _time_two_layers(**kw):
    import torch
    from kernel_runtime.measure.profile_time import time_units
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)]
    report: dict = {}
    time_units(layers, [(0,), (1,)], torch.randn(8, 16), torch.randn(8, 4), torch.nn.functional.mse_loss,
               warmup=1, ranks=1, report=report, **kw)
    return report


def test_repetitions_widen_until_the_median_is_sure_and_stop_at_the_cap():
    loose = _time_two_layers(repeats=4, max_repeats=12, tolerance=10.0)
    assert loose["repeats"] == 4 and "error" in loose and loose["error"] >= 0.0
    strict = _time_two_layers(repeats=4, max_repeats=12, tolerance=0.0)   # never sure enough
    assert strict["repeats"] == 12
    assert _time_two_layers(repeats=4, max_repeats=10, tolerance=0.0)["repeats"] == 10   # the cap, not 12


def test_the_profiler_says_when_the_machine_was_too_noisy():
    import warnings
    from kernel_runtime.measure.profiler import ProfileNoiseWarning, _say_noise, _ProfileJob
    job = _ProfileJob(None, None, None, None, 2, "cpu", "float32", 7, 2, 0, 1, max_repeats=14, tolerance=0.03)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _say_noise({"repeats": 7, "drift": 0.02, "error": 0.01}, job)          # steady: silent
    with pytest.warns(ProfileNoiseWarning, match=r"after 14 repetitions \(max_repeats=14\) the medians "
                      r"could be 2\.50% off in another profile \(tolerance 1\.50%\);") as got:
        _say_noise({"repeats": 14, "drift": 0.02, "error": 0.025}, job)
    assert "speed moved" not in str(got[0].message)                   # only what was over is named
    with pytest.warns(ProfileNoiseWarning, match=r"speed moved 9\.00% over them \(tolerance 3\.00%\);"):
        _say_noise({"repeats": 14, "drift": 0.09, "error": 0.0}, job)


def _profile(scale: float, layers: int = 3, names=None):
    from flexpipe_ui.problem import Layer, Problem
    names = names or [f"l{i}" for i in range(layers)]
    return Problem(ranks=2, microbatches=4, comm=0.2 * scale, bandwidth=100.0 * scale, comm_cpu=0.5,
                   overhead={"F": 0.1 * scale, "I": 0.2, "W": 0.3, "B": 0.4},
                   layers=tuple(Layer(f=(i + 1) * scale, b=2.0 * scale, w=1.0, bw=3.0 * scale, act=8.0 + i,
                                      mem=16.0, name=n, switch=0.05 * scale) for i, n in enumerate(names)))


def test_merged_profiles_take_each_time_at_the_median_and_memory_from_the_first():
    from kernel_runtime.measure.assemble import merge_profiles
    a, b, c = _profile(1.0), _profile(1.2), _profile(3.0)
    m = merge_profiles([a, b])
    assert m.layers[1].f == pytest.approx(2 * 1.1) and m.layers[0].bw == pytest.approx(3.3)
    assert m.layers[0].switch == pytest.approx(0.055) and m.layers[2].w == 1.0
    assert m.comm == pytest.approx(0.22) and m.bandwidth == pytest.approx(110.0)
    assert m.overhead["F"] == pytest.approx(0.11) and m.overhead["B"] == pytest.approx(0.4)
    assert [l.act for l in m.layers] == [l.act for l in a.layers] and m.meta["merged"] == 2
    assert merge_profiles([a, c, b]).layers[0].f == pytest.approx(1.2)       # the median, not the mean
    assert merge_profiles([a]).layers[0].f == a.layers[0].f


def test_profiles_of_different_models_are_not_merged():
    from kernel_runtime.measure.assemble import merge_profiles
    with pytest.raises(ValueError, match="profile 1 has layers 4, profile 0 has 3"):
        merge_profiles([_profile(1.0), _profile(1.0, layers=4)])
    with pytest.raises(ValueError, match="layer names"):
        merge_profiles([_profile(1.0), _profile(1.0, names=["a", "b", "c"])])
    with pytest.raises(ValueError, match="no profiles"):
        merge_profiles([])
