"""The cost model's memory terms measured on the user's model: ``temp`` (what an action holds
while it runs, above its start and end), ``recv_ahead`` (received inputs and posted receive
buffers), and the gradients' lifetime (``grad``: allocated by a stage's first weight-gradient
action). Each against hand-computed peaks on a 2-rank toy; none changes anything when absent."""
import json

import numpy as np
import pytest

from flexpipe_ui.dsl.hand import hand_plan
from flexpipe_ui.problem import Layer, Problem, ProblemError, load_problem, save_problem
from flexpipe_ui.sim import simulate
from flexpipe_ui.timeline import memory_curve

# two stages, stage s on rank s; act 4 each, mem 10 each; one stage per layer unless said
FUSED = "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1"


def _prob(layers=None, n=2, **terms):
    layers = layers or {}
    return Problem(ranks=2, microbatches=2, comm=0.5,
                   layers=tuple(Layer(f=1.0, b=2.0, w=1.0, act=4.0, mem=10.0, **layers.get(i, {}))
                                for i in range(n)), **terms)


def _peaks(problem, text=FUSED, partition=((0,), (1,))):
    plan = hand_plan(text, placement=(0, 1), microbatches=problem.microbatches, partition=partition)
    return simulate(plan, problem).metrics.peak_memory


def test_no_terms_no_change():
    assert _peaks(_prob()) == (10 + 8, 10 + 4)


def test_temp_rises_above_the_action_and_falls_back():
    # rank 0 holds both microbatches (8) when 0B0 runs: + its B workspace 3 -> 21;
    # F's workspace 1 on top of its own activation: 0F1 reaches 10 + 8 + 1 = 19 < 21
    p = _prob({0: {"temp": {"F": 1.0, "B": 3.0}}, 1: {"temp": {"B": 0.5}}})
    assert _peaks(p) == (10 + 8 + 3, 10 + 4 + 0.5)
    # the curve comes back down: after 0B1 rank 0 holds its static memory only
    plan = hand_plan(FUSED, placement=(0, 1), microbatches=2, partition=((0,), (1,)))
    res = simulate(plan, p)
    _, vals = memory_curve(res.timeline, res.costs, 0)
    assert vals[-1] == pytest.approx(10.0)


def test_stage_temp_is_a_peak_less_later_activations():
    # one stage of two layers on rank 0 (acts 4 + 4), F temps 3 and 5: layer 0's F workspace stands
    # where layer 1's activation does not exist yet (3 - 4 < 0), layer 1's on everything: 5.
    # B (frees as it goes): layer 1's 6 with everything held; layer 0's 7 with layer 1's 4 freed -> 3.
    from flexpipe_ui.problem import _stage_temp
    layers = [Layer(f=1, b=1, w=1, act=4.0, temp={"F": 3.0, "B": 7.0, "W": 2.0}),
              Layer(f=1, b=1, w=1, act=4.0, temp={"F": 5.0, "B": 6.0, "W": 1.0})]
    assert _stage_temp(layers, "F") == 5.0
    assert _stage_temp(layers, "B") == 6.0
    assert _stage_temp(layers, "W") == 2.0            # a split W keeps the graph: the largest


def test_recv_ahead_holds_received_inputs_and_buffers():
    # layer 0 sends out=2 MiB to rank 1: rank 1 keeps each received input with its activation
    # (+2 per microbatch in flight: 1 at a time here) and 2 posted buffers per inbound channel:
    # rank 1 receives activations (2 MiB) -> +4; rank 0 receives their gradients (2 MiB) -> +4
    base = _prob({0: {"out": 2.0}, 1: {"out": 1.0}})
    assert _peaks(base) == (18, 14)                       # out alone: time only
    p = _prob({0: {"out": 2.0}, 1: {"out": 1.0}}, recv_ahead=2)
    assert _peaks(p) == (18 + 4, 14 + 2 + 4)


def test_gradients_exist_from_the_first_weight_gradient_action():
    # GPipe-like on rank 0: both F before any B; grads (6 of the 10 MiB static) appear at 0B0
    # rank 0: F0 F1 -> 4 + 8 act + (10 - 6); 0B0 starts with 8 act + 6 grads + 4 = 18
    gpipe = "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1F1 1B0 1B1"
    p = _prob({0: {"grad": 6.0}, 1: {"grad": 6.0}})
    assert _peaks(p, gpipe) == (18, 18)
    # without grad: mem counted whole from the start: same peak here, more before the first B
    plan = hand_plan(gpipe, placement=(0, 1), microbatches=2, partition=((0,), (1,)))
    res = simulate(plan, p)
    t, vals = memory_curve(res.timeline, res.costs, 0)
    assert vals[0] == 4.0                                  # static 10 less the grads 6
    assert max(v for tt, v in zip(t, vals) if tt < res.timeline.of("0B0")[0]) == 4 + 8


def test_temp_and_recv_ahead_round_trip_and_errors(tmp_path):
    p = _prob({0: {"temp": {"F": 1.5, "B": 2.0}, "out": 1.0}}, recv_ahead=2)
    save_problem(p, tmp_path / "p.json")
    assert load_problem(tmp_path / "p.json") == p
    d = json.loads((tmp_path / "p.json").read_text())
    d["layers"][0]["temp"] = {"F": -1}
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError, match=r"layer 0, key 'temp', kind 'F'"):
        load_problem(tmp_path / "bad.json")
    d["layers"][0]["temp"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError, match=r"layer 0, key 'temp': expected an object"):
        load_problem(tmp_path / "bad.json")
    d["layers"][0]["temp"] = {"F": 1}
    d["recv_ahead"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError, match="recv_ahead"):
        load_problem(tmp_path / "bad.json")


def test_data_fed_first_stage_takes_the_fused_workspace_in_w():
    from flexpipe_ui.costmodel import kind_temp
    from flexpipe_ui.kinds import get_kind
    p = _prob({0: {"temp": {"I": 1.0, "W": 0.5, "B": 3.0}}}, data_input=True)
    costs = p.stage_costs(((0,), (1,)))
    assert kind_temp(get_kind("I"), costs)[0] == 0.0
    assert kind_temp(get_kind("W"), costs)[0] == 3.0
    assert np.all(kind_temp(get_kind("F"), costs) == 0.0)


def test_runtime_memory_is_held_by_every_rank_once():
    assert _peaks(_prob(runtime_mem=65.0)) == (10 + 8 + 65, 10 + 4 + 65)
    # two stages on one rank: counted once for that rank
    p = _prob(n=3, runtime_mem=5.0)
    plan = hand_plan("r0: 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1\nr1: 1F0 1F1 1B0 1B1", placement=(0, 1, 0),
                     microbatches=2, partition=((0,), (1,), (2,)))
    static = simulate(plan, p).metrics.static_memory
    assert static == (20 + 5, 10 + 5)


def test_sends_held_keep_what_a_rank_sent_until_its_step_ends():
    # one microbatch in flight per rank; layer 0 sends 2 MiB (its output forward, its gradient back)
    # rank 0: 0F0 0B0 0F1 -- with sends held, 0F0's output (in its activation until 0B0) stays
    # after 0B0: 0F1 stands on it: 10 + 2 + 4. rank 1: 1B0 sends a new 2 MiB gradient upstream,
    # kept: 1F1 reaches 10 + 2 + 4
    text = "r0: 0F0 0B0 0F1 0B1\nr1: 1F0 1B0 1F1 1B1"
    assert _peaks(_prob({0: {"out": 2.0}}), text) == (14, 14)
    held = _prob({0: {"out": 2.0}}, sends_held=True)
    assert _peaks(held, text) == (16, 16)
    # nothing crosses ranks: nothing is sent, nothing kept
    one = hand_plan("r0: 0F0 1F0 1B0 0B0 0F1 1F1 1B1 0B1\nr1:", placement=(0, 0), microbatches=2,
                    partition=((0,), (1,)))
    assert simulate(one, held).metrics.peak_memory == simulate(one, _prob({0: {"out": 2.0}})).metrics.peak_memory
    # a split backward: the gradient is kept from I's end, while the activation waits for W:
    # rank 1 at 1I1's end holds 10 + 4 (microbatch 1) + 2 + 2 (both gradients sent); rank 0 as fused
    split = "r0: 0F0 0I0 0W0 0F1 0I1 0W1\nr1: 1F0 1I0 1W0 1F1 1I1 1W1"
    assert _peaks(held, split) == (16, 18)
    assert _peaks(_prob({0: {"out": 2.0}}), split) == (14, 14)


def test_sends_held_round_trip_and_errors(tmp_path):
    p = _prob({0: {"out": 1.0}}, recv_ahead=2, sends_held=True)
    save_problem(p, tmp_path / "p.json")
    assert load_problem(tmp_path / "p.json") == p
    d = json.loads((tmp_path / "p.json").read_text())
    d["sends_held"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ProblemError, match="sends_held"):
        load_problem(tmp_path / "bad.json")
