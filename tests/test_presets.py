"""Presets: realistic, heterogeneous where they claim to be, loadable as problem files."""
import pytest

from flexpipe_ui.presets import (PRESETS, Device, PresetError, Transformer, decoder_block, gpt,
                                 list_presets, preset, tight_memory)
from flexpipe_ui.partition import default_inflight, rank_memory
from flexpipe_ui.problem import Problem, even_partition, load_problem, save_problem


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_problem_that_round_trips(name, tmp_path):
    p = preset(name)
    assert isinstance(p, Problem) and p.num_layers >= p.ranks
    assert p.meta["preset"] == name and p.meta["units"] == {"time": "ms", "memory": "MiB"}
    save_problem(p, tmp_path / "p.json")
    q = load_problem(tmp_path / "p.json")
    assert q.layers == p.layers and q.comm == p.comm and q.memory_limit == p.memory_limit


def test_block_costs_follow_flop_counts():
    t, dev = Transformer(), Device(tflops=100.0)
    blk = decoder_block(t, dev)
    lin = 2 * 4096 * t.block_params
    assert blk.w == pytest.approx(lin / 100e12 * 1e3)      # W = linear weight gradients only
    assert blk.b > blk.f > blk.w                            # attention backward lands in I
    assert blk.mem == pytest.approx(16 * t.block_params / 2 ** 20)


def test_heterogeneity_where_promised():
    g = preset("gpt_heavy_head")
    blk, head = g.layers[1], g.layers[-1]
    assert head.f > 3 * blk.f and g.layers[0].b == 0.0
    v = preset("vision_llm")
    assert v.layers[0].f < 0.5 * v.layers[-2].f
    lora = preset("lora_finetune")
    assert lora.layers[1].w < 0.02 * lora.layers[1].b
    assert preset("high_comm").comm > 0.4 * blk.f > preset("gpt").comm
    assert preset("few_microbatches").microbatches == 8


def test_tight_memory_excludes_1f1b_on_an_even_split():
    p = tight_memory(8, 32)
    part = even_partition(p.num_layers, 8)
    est = rank_memory(p, part, tuple(range(8)), default_inflight(8, 8, 32))
    static = rank_memory(p, part, tuple(range(8)), 0.0)
    assert max(est) > p.memory_limit > max(static)


def test_unknown_preset_and_listing():
    with pytest.raises(PresetError, match="unknown preset 'nope'; known: uniform_gpt"):
        preset("nope")
    names = [n for n, _ in list_presets()]
    assert names == list(PRESETS) and all(d for _, d in list_presets())
    assert gpt(4, 4).ranks == 4
