"""The plan-independent bound (``search.plan_bound``): below every plan, and exact where it can be
(equal layers, no comm: auto reaches it, so no plan beats auto there)."""
import random
from dataclasses import replace

import pytest

from flexpipe_ui.dsl import Program, Rules, explicit
from flexpipe_ui.partition import partition_from_sizes
from flexpipe_ui.problem import Layer, Problem
from flexpipe_ui.search import auto_search, fill_packing_makespan, ideal_makespan, plan_bound
from flexpipe_ui.search import space as sp
from flexpipe_ui.search.bounds import chain_makespan, fill_offsets
from flexpipe_ui.sim import simulate


def _equal(p, m, n, comm=0.0):
    return Problem(ranks=p, microbatches=m, comm=comm,
                   layers=tuple(Layer(f=0.25, b=0.25, w=0.25, act=1.0) for _ in range(n)))


def _random_problem(rng, ranks):
    n = rng.randint(ranks, 4 * ranks)
    layers = tuple(Layer(f=rng.uniform(0.05, 3), b=rng.uniform(0.0, 3), w=rng.uniform(0.0, 2), act=1.0)
                   for _ in range(n))
    return Problem(ranks=ranks, microbatches=rng.choice([1, 2, ranks, 2 * ranks, 3 * ranks]), layers=layers,
                   comm=rng.choice([0.0, 0.2, 1.5]))


def _random_explicit(rng, problem):
    """A random placement (any map, 1-3 stages per rank) with a random split, zero-bubble rules."""
    p = problem.ranks
    S = min(problem.num_layers, p * rng.randint(1, 3))
    place = [r for r in range(p)] + [rng.randrange(p) for _ in range(S - p)]
    rng.shuffle(place)
    cuts = sorted(rng.sample(range(1, problem.num_layers), S - 1))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [problem.num_layers])]
    prog = Program(placement=explicit(place), rules=Rules(backward="split", priority=("I", "F", "W"),
                                                          w_policy="fill"))
    return prog.plan(problem=problem, partition=partition_from_sizes(sizes))


def test_offsets_count_the_forward_and_the_crossings():
    prob = Problem(ranks=4, microbatches=2, comm=0.5,
                   layers=tuple(Layer(f=f, b=1, w=1) for f in (1.0, 2.0, 3.0, 4.0, 5.0)))
    assert fill_offsets(prob).tolist() == [0.0, 1.0 + 0.5, 3.0 + 1.0, 6.0 + 1.5]
    short = Problem(ranks=4, microbatches=2, layers=(Layer(f=1, b=1, w=1),) * 2)
    assert fill_offsets(short)[2:].tolist() == [float("inf")] * 2  # ranks 2, 3 can hold nothing


def _with_terms(rng, problem):
    """Random optional cost-model fields: message sizes and bandwidth, per-action overhead, CPU
    copies, a fused backward cheaper than b + w, part of the activation freed at I."""
    layers = tuple(replace(l, out=rng.uniform(0.0, 3.0), bw=rng.uniform(0.3, 1.0) * (l.b + l.w),
                           act_w=rng.uniform(0.0, 1.0) * l.act) for l in problem.layers)
    return replace(problem, layers=layers, bandwidth=rng.uniform(0.5, 8.0), comm_cpu=rng.choice([0.0, 0.5]),
                   overhead=rng.choice([0.0, 0.25, {"F": 0.1, "I": 0.3, "W": 0.05, "B": 0.2}]))


@pytest.mark.parametrize("terms", [False, True])
def test_the_bound_is_below_every_plan(terms):
    """Random costs, comm and microbatch counts (and, with ``terms``, random new cost-model fields):
    library seeds, DSL programs on the search's splits, random explicit placements and auto's plan
    all simulate to at least the bound."""
    rng = random.Random(7)
    for trial in range(10 if not terms else 6):
        problem = _random_problem(rng, rng.choice([2, 3, 4]))
        if terms:
            problem = _with_terms(rng, problem)
        bound = plan_bound(problem)
        assert bound >= ideal_makespan(problem) and bound >= chain_makespan(problem)
        plans = []
        cands = sp.seed_candidates(problem) + sp.program_candidates(problem)
        for c in rng.sample(cands, min(8, len(cands))):
            try:
                plans.append(c.build())
            except ValueError:
                continue
        plans += [_random_explicit(rng, problem) for _ in range(4)]
        plans.append(auto_search(problem, max_evals=40).best)
        for plan in plans:
            span = simulate(plan, problem).makespan
            assert span >= bound * (1 - 1e-9), (trial, plan.meta.get("name"), span, bound)


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("v", [1, 2, 4])
@pytest.mark.parametrize("mult", [1, 2])
def test_equal_layers_without_comm_auto_meets_the_bound(p, v, mult):
    """Equal layers, no comm, m = p or 2p: every rank holds v layers and the last one starts after
    p - 1 layer forwards, so nothing beats ideal + (p - 1)·f; auto's plan is that fast, i.e. optimal."""
    m = mult * p
    problem = _equal(p, m, v * p)
    assert fill_packing_makespan(problem) == pytest.approx(ideal_makespan(problem) + (p - 1) * 0.25)
    res = auto_search(problem)
    assert res.makespan == pytest.approx(plan_bound(problem), rel=1e-9)
    assert res.stats["stopped"] == "optimal"  # the search ends once it meets the bound
    assert res.lower_bound == pytest.approx(plan_bound(problem))


def test_with_as_many_microbatches_as_ranks_no_plan_is_near_the_work_bound():
    """32 equal layers, 8 ranks, 8 microbatches: the fill alone keeps every plan 7.3% above
    Σ work / ranks (24 -> 25.75), whatever the schedule."""
    problem = _equal(8, 8, 32)
    assert ideal_makespan(problem) == pytest.approx(24.0)
    assert plan_bound(problem) == pytest.approx(25.75)
