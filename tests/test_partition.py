"""Partitioner: exact against brute force on small problems, memory-aware, clear errors."""
import itertools
import random

import numpy as np
import pytest

from flexpipe_ui.partition import (PartitionError, balanced_partition, default_inflight, rank_loads,
                                   rank_memory, refine_for_ranks, stage_memory, summarize_partition)
from flexpipe_ui.problem import Layer, Problem, even_partition


def _problem(n, seed, ranks=4, mb=8, limit=None):
    rng = random.Random(seed)
    layers = tuple(Layer(f=rng.uniform(0.2, 2), b=rng.uniform(0.2, 2), w=rng.uniform(0, 1),
                         act=rng.uniform(0.5, 2), mem=rng.uniform(0, 3)) for _ in range(n))
    return Problem(ranks=ranks, microbatches=mb, layers=layers, memory_limit=limit)


def _all_splits(n, S):
    for cuts in itertools.combinations(range(1, n), S - 1):
        b = (0,) + cuts + (n,)
        yield tuple(tuple(range(a, c)) for a, c in zip(b[:-1], b[1:]))


def _work(p, part):
    return [sum(p.layers[i].f + p.layers[i].b + p.layers[i].w for i in s) for s in part]


def _is_partition(part, n, S):
    flat = [i for s in part for i in s]
    return len(part) == S and flat == list(range(n)) and all(len(s) for s in part)


@pytest.mark.parametrize("n,S,seed", [(6, 2, 0), (9, 3, 1), (10, 4, 2), (12, 4, 3), (8, 8, 4), (11, 5, 5)])
def test_bottleneck_is_optimal_against_brute_force(n, S, seed):
    p = _problem(n, seed, ranks=S)
    part = balanced_partition(p, S)
    assert _is_partition(part, n, S)
    best = min(max(_work(p, q)) for q in _all_splits(n, S))
    assert max(_work(p, part)) == pytest.approx(best, rel=1e-9)
    # among bottleneck-optimal splits, the smallest spread (sum of squares)
    spread = min(sum(x * x for x in _work(p, q)) for q in _all_splits(n, S)
                 if max(_work(p, q)) <= best * (1 + 1e-9))
    assert sum(x * x for x in _work(p, part)) == pytest.approx(spread, rel=1e-9)


def test_uniform_layers_split_evenly():
    p = Problem(ranks=4, microbatches=8, layers=tuple(Layer(f=1, b=1, w=1) for _ in range(16)))
    assert balanced_partition(p, 4) == even_partition(16, 4)


def test_heavy_last_layer_gets_a_short_stage():
    layers = [Layer(f=1, b=1, w=1)] * 15 + [Layer(f=5, b=5, w=5)]
    p = Problem(ranks=4, microbatches=8, layers=tuple(layers))
    part = balanced_partition(p, 4)
    even = even_partition(16, 4)
    assert max(_work(p, part)) < max(_work(p, even))
    assert len(part[-1]) < len(even[-1])


@pytest.mark.parametrize("seed", [1, 3, 5, 6])  # seeds where the cap excludes the free optimum
def test_memory_aware_split_fits_and_is_best_feasible(seed):
    n, S = 10, 3
    p = _problem(n, seed, ranks=S, mb=4)
    infl = default_inflight(S, S, 4)
    mems = {q: max(stage_memory(p, q, infl)) for q in _all_splits(n, S)}
    # a cap that excludes the unconstrained optimum but leaves some feasible splits
    free = balanced_partition(p, S, memory_limit=None)
    feasible_caps = sorted(set(mems.values()))
    cap = next((c for c in feasible_caps if c < mems[free]), None)
    assert cap is not None, "pick a seed whose unconstrained optimum is not the smallest in memory"
    q = p.with_(memory_limit=cap)
    part = balanced_partition(q, S)
    assert max(rank_memory(q, part, tuple(range(S)), infl)) <= cap + 1e-9
    best = min(max(_work(p, x)) for x, m in mems.items() if m <= cap + 1e-9)
    assert max(_work(p, part)) == pytest.approx(best, rel=1e-9)


def test_nothing_fits_raises_with_numbers():
    p = _problem(8, 0, ranks=2, limit=1.0)
    with pytest.raises(PartitionError, match=r"memory_limit=1.*smallest stage memory estimate is [0-9.]+"):
        balanced_partition(p, 2)


def test_too_many_stages_and_bad_inputs():
    p = _problem(4, 0)
    with pytest.raises(PartitionError, match="cannot split 4 layers into 5 stages"):
        balanced_partition(p, 5)
    with pytest.raises(PartitionError, match="placement has 3 stages"):
        balanced_partition(p, 4, placement=(0, 1, 2))
    with pytest.raises(PartitionError, match="inflight"):
        balanced_partition(p, 2, inflight=-1)


def test_default_inflight_is_1f1b_count():
    assert default_inflight(4, 4, 8).tolist() == [4, 3, 2, 1]
    assert default_inflight(4, 4, 2).tolist() == [2, 2, 2, 1]
    assert default_inflight(8, 4, 32).tolist() == [4, 4, 3, 3, 2, 2, 1, 1]


def test_interleaved_rank_refinement_never_worsens_rank_balance():
    p = _problem(24, 7, ranks=4)
    placement = tuple(s % 4 for s in range(8))
    raw = balanced_partition(p, 8, placement=placement, refine=False)
    ref = refine_for_ranks(p, raw, placement)
    assert _is_partition(ref, 24, 8)
    assert rank_loads(p, ref, placement).max() <= rank_loads(p, raw, placement).max() + 1e-12
    full = balanced_partition(p, 8, placement=placement)  # reweighted DP, then the same refinement
    assert rank_loads(p, full, placement).max() <= rank_loads(p, ref, placement).max() + 1e-12


def test_v_placement_gives_the_heavy_head_rank_a_light_first_stage():
    # rank 0 holds stage 0 and the last stage (the head) in a V: its first stage must shrink
    layers = [Layer(f=1, b=1, w=1)] * 23 + [Layer(f=6, b=6, w=6)]
    p = Problem(ranks=4, microbatches=8, layers=tuple(layers))
    v = (0, 1, 2, 3, 3, 2, 1, 0)
    part = balanced_partition(p, 8, placement=v)
    loads = rank_loads(p, part, v)
    assert loads.max() <= 3 * 8 + 1e-9          # total 87 over 4 ranks: 24 is the best contiguous
    assert len(part[0]) < len(part[1])


def test_vshape_placement_memory_is_per_rank():
    p = _problem(16, 3, ranks=4, mb=8)
    v = (0, 1, 2, 3, 3, 2, 1, 0)
    free = balanced_partition(p, 8, placement=v, memory_limit=None)
    cap = 0.97 * max(rank_memory(p, free, v))
    part = balanced_partition(p.with_(memory_limit=cap), 8, placement=v)
    assert max(rank_memory(p, part, v)) <= cap + 1e-9


def test_summary_and_realistic_preset():
    from flexpipe_ui.presets import gpt_heavy_head
    p = gpt_heavy_head(8, 32)
    even = even_partition(p.num_layers, 8)
    bal = balanced_partition(p, 8)
    se, sb = summarize_partition(p, even), summarize_partition(p, bal)
    assert sb.imbalance < se.imbalance
    assert sum(sb.sizes) == p.num_layers
    assert np.isclose(sum(sb.rank_work), sum(se.rank_work))
