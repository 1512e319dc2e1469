"""``partition_neighbours``: the plans ``tune`` and bench_truth measure next to the model's best --
same schedule, one stage boundary moved by a layer, ranked by the simulator."""
from __future__ import annotations

from flexpipe_ui.library import build_named
from flexpipe_ui.problem import Layer, Problem
from flexpipe_ui.sim import simulate
from kernel_runtime.measure.tuning import partition_neighbours, plan_key


def _heavy_head(n: int = 8, **kw) -> Problem:
    layers = [Layer(f=1.0, b=1.0, w=1.0, act=1.0) for _ in range(n - 1)] + [Layer(f=4.0, b=4.0, w=4.0, act=1.0)]
    return Problem(ranks=2, microbatches=4, layers=tuple(layers), **kw)


def _sizes(plan) -> list[int]:
    return [len(p) for p in plan.partition]


def test_neighbours_move_one_boundary_and_rank_by_the_simulator():
    prob = _heavy_head()
    base = build_named("1f1b", prob)                                # even: 4 + 4
    got = partition_neighbours(base, prob, k=2)
    assert [_sizes(p) for p, _ in got] == [[5, 3], [3, 5]]         # the head's stage lighter first
    spans = [simulate(p, prob).makespan for p, _ in got]
    assert spans == sorted(spans) and spans[0] < simulate(base, prob).makespan
    for p, desc in got:
        assert p.schedule == base.schedule and plan_key(p) != plan_key(base)
        assert desc.endswith("layers " + "+".join(map(str, _sizes(p))))
    # four stages on two ranks (V shape): three boundaries, each moved both ways
    zbv = build_named("zb-v", prob)
    every = partition_neighbours(zbv, prob, k=10)
    assert len(every) == 6 and all(min(_sizes(p)) >= 1 and sum(_sizes(p)) == 8 for p, _ in every)
    assert len({plan_key(p) for p, _ in every}) == 6


def test_no_neighbours_without_room_or_when_none_are_asked():
    prob = _heavy_head()
    assert partition_neighbours(build_named("1f1b", prob), prob, k=0) == []
    two = _heavy_head(2)
    assert partition_neighbours(build_named("1f1b", two), two, k=2) == []   # 1 + 1: nothing to move


def test_neighbours_keep_the_memory_cap():
    free = _heavy_head()
    base = build_named("1f1b", free)
    peak = simulate(base, free).metrics.max_peak_memory
    capped = _heavy_head(memory_limit=peak)
    for p, _ in partition_neighbours(base, capped, k=2):
        assert simulate(p, capped).metrics.max_peak_memory <= peak + 1e-9
