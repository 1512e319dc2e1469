"""Per-microbatch recompute and offload: the edit step, the greedy fit, the new cost terms, and the
search under a cap (issue 22)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flexpipe_ui.costmodel import fits, fold_liveness, selective_recompute
from flexpipe_ui.ir import EditError, Plan, Schedule
from flexpipe_ui.kinds import scoped_kinds
from flexpipe_ui.library import build_named
from flexpipe_ui.memory_fit import (AddMemoryOps, add_memory_ops, best_named_full_recompute, fit_memory,
                                    full_recompute, memory_summary)
from flexpipe_ui.problem import Layer, Problem, even_partition
from flexpipe_ui.sim import simulate


def _problem(ranks=4, microbatches=8, cap=None, **kw):
    layers = tuple(Layer(f=1.0, b=1.0, w=1.0, act=1.0, mem=1.0) for _ in range(ranks * 2))
    return Problem(ranks=ranks, microbatches=microbatches, layers=layers, memory_limit=cap, **kw)


@pytest.fixture(autouse=True)
def _kinds():
    with scoped_kinds():
        yield


def test_the_edit_step_places_recompute_and_copies_around_their_pairs():
    p = _problem()
    plan = build_named("1f1b", p)
    s = add_memory_ops(plan.schedule, recompute=[(0, 1)], offload=[(1, 2)])
    row0 = [str(a) for a in s.order[0]]
    assert row0.index("0R1") == row0.index("0B1") - 1
    row1 = [str(a) for a in s.order[1]]
    assert row1.index("1OFF2") == row1.index("1F2") + 1
    assert row1.index("1LOAD2") == row1.index("1B2") - 1
    assert s.num_actions == plan.schedule.num_actions + 3
    # recorded as one step: it replays and prints as Python
    edited = plan.edit(AddMemoryOps(((0, 1),), ((1, 2),)))
    ns: dict = {}
    exec(edited.to_python(), ns)
    assert ns["plan"].schedule == edited.schedule


def test_the_edit_step_names_a_bad_pair():
    s = build_named("1f1b", _problem()).schedule
    with pytest.raises(EditError, match="stage 9 microbatch 0 has no forward"):
        add_memory_ops(s, recompute=[(9, 0)])
    with pytest.raises(EditError, match="both recomputed and offloaded"):
        add_memory_ops(s, recompute=[(0, 0)], offload=[(0, 0)])
    once = add_memory_ops(s, recompute=[(0, 0)])
    with pytest.raises(EditError, match="already recomputed"):
        add_memory_ops(once, recompute=[(0, 0)])


def test_fit_leaves_a_fitting_plan_alone_and_says_when_nothing_can_fit():
    p = _problem()
    plan = build_named("1f1b", p)
    peak = max(simulate(plan, p).metrics.peak_memory)
    fr = fit_memory(plan, replace(p, memory_limit=peak))
    assert fr.fits and fr.recompute == () and fr.offload == () and fr.plan is plan
    # static 2 + one microbatch's activation being made (1): a cap of 2.5 cannot hold a forward
    fr = fit_memory(plan, replace(p, memory_limit=2.5))
    assert not fr.fits and fr.plan is None


def test_fit_recomputes_some_microbatches_not_all_and_beats_full_recompute():
    p = _problem()
    plan = build_named("1f1b", p)
    sim = simulate(plan, p)
    # 1F1B holds min(p - r, m) = 4 microbatches on rank 0 (2 units of its stages each): cap it at 3
    cap = max(sim.metrics.static_memory) + 6.0
    capped = replace(p, memory_limit=cap)
    fr = fit_memory(plan, capped)
    assert fr.fits
    res = simulate(fr.plan, capped)
    assert all(fits(x, cap) for x in res.metrics.peak_memory)
    assert res.makespan == pytest.approx(fr.makespan)
    total = sum(1 for _, _, a in plan.schedule.actions() if a.kind.is_forward)
    assert 0 < len(fr.recompute) < total
    full = simulate(full_recompute(plan), capped)
    assert fits(max(full.metrics.peak_memory), cap)
    assert fr.makespan < full.makespan
    # microbatches chosen, not whole stages: some of stage 0's microbatches are kept
    assert 0 < sum(1 for s, _ in fr.recompute if s == 0) < p.microbatches


def test_fit_offloads_when_a_copy_is_cheaper_than_the_forward_it_saves():
    p = _problem(copy_bandwidth=100.0)          # a copy of one unit: 0.01 < a forward's 1
    plan = build_named("1f1b", p)
    cap = max(simulate(plan, p).metrics.static_memory) + 6.0
    fr = fit_memory(plan, replace(p, memory_limit=cap))
    assert fr.fits and len(fr.offload) > 0
    last = plan.schedule.num_stages - 1
    assert all(s != last for s, _ in fr.offload)    # the last stage's reload would follow at once
    kinds = {a.kind.name for _, _, a in fr.plan.schedule.actions()}
    assert {"OFF", "LOAD"} <= kinds
    res = simulate(fr.plan, replace(p, memory_limit=cap))
    off = [d for a, st, en in zip(res.timeline.actions, res.timeline.start, res.timeline.end)
           if a.kind.name == "OFF" for d in [en - st]]
    assert off and np.allclose(off, 2.0 / 100.0)   # a stage of two layers: act 2 at 100 per unit
    # without the bandwidth (no copy engine known) the same fit recomputes
    assert fit_memory(plan, replace(p, memory_limit=cap, copy_bandwidth=None)).offload == ()


def test_a_reload_led_ahead_is_issued_that_many_compute_actions_before_its_backward():
    s = build_named("1f1b", _problem()).schedule
    led = add_memory_ops(s, offload=[(0, 0)], lead=[(0, 0, 2)])
    row = [a for a in led.order[0]]
    names = [str(a) for a in row]
    i, j = names.index("0LOAD0"), names.index("0B0")
    assert sum(1 for a in row[i + 1:j] if a.kind.stream == "compute") == 2
    # a lead longer than the row since the offload stops just after the OFF
    far = [str(a) for a in add_memory_ops(s, offload=[(0, 0)], lead=[(0, 0, 999)]).order[0]]
    assert far.index("0LOAD0") == far.index("0OFF0") + 1
    with pytest.raises(EditError, match="lead for stage 0 microbatch 1, which is not offloaded"):
        add_memory_ops(s, offload=[(0, 0)], lead=[(0, 1, 1)])
    with pytest.raises(EditError, match="must be >= 0"):
        add_memory_ops(s, offload=[(0, 0)], lead=[(0, 0, -1)])


def test_fit_hides_copies_slower_than_the_forward_and_beats_recomputing():
    # a copy of a stage's activation (2 units at 0.5 per ms) takes 4, twice the stage's forward:
    # offloading pays only if the copies run under compute, the reload issued ahead of its backward
    p = _problem(copy_bandwidth=0.5)
    plan = build_named("1f1b", p)
    capped = replace(p, memory_limit=max(simulate(plan, p).metrics.static_memory) + 6.0)
    fr = fit_memory(plan, capped)
    rec_only = fit_memory(plan, capped, offload=False)
    assert fr.fits and rec_only.fits and len(fr.offload) > 0
    assert fr.makespan < rec_only.makespan
    res = simulate(fr.plan, capped)
    assert all(fits(x, capped.memory_limit) for x in res.metrics.peak_memory)
    tl = res.timeline
    span = {str(a): (st, en) for a, st, en in zip(tl.actions, tl.start, tl.end)}
    copies = [n for n in span if "OFF" in n or "LOAD" in n]
    assert all(span[n][1] - span[n][0] == pytest.approx(4.0) for n in copies)
    step = fr.plan.trace[-1]
    assert isinstance(step, AddMemoryOps) and any(k > 0 for _, _, k in step.lead)
    # the same pairs with every reload just before its backward are slower: the leads hide them
    flat = simulate(plan.edit(AddMemoryOps(step.recompute, step.offload)), capped)
    assert fr.makespan < flat.makespan


def test_kinds_carried_by_a_plan_register_in_dependency_order():
    from flexpipe_ui.kinds import _REGISTRY, ensure_registered, get_kind
    from flexpipe_ui.ops import register_offload
    off, load = register_offload()
    _REGISTRY.pop("OFF")
    _REGISTRY.pop("LOAD")
    ensure_registered([load, off])           # LOAD depends on OFF: registered after it
    assert get_kind("LOAD").after[0].kinds == frozenset({"OFF"}) and get_kind("OFF") == off


def test_a_recomputed_forward_runs_without_the_graph():
    layers = tuple(Layer(f=1.0, b=1.0, w=1.0, act=1.0, f_nograd=0.6) for _ in range(2))
    p = Problem(ranks=2, microbatches=2, layers=layers)
    plan = build_named("1f1b", p).edit(AddMemoryOps(recompute=((0, 1),)))
    tl = simulate(plan, p).timeline
    dur = {str(a): e - s for a, s, e in zip(tl.actions, tl.start, tl.end)}
    assert dur["0F1"] == pytest.approx(0.6) and dur["0F0"] == pytest.approx(1.0)
    assert dur["0R1"] == pytest.approx(1.0)


def test_selective_recompute_and_torch_liveness_terms():
    layers = tuple(Layer(f=1.0, b=1.0, w=1.0, act=4.0, act_sel=1.5, f_sel=0.25, act_w=2.0) for _ in range(2))
    p = Problem(ranks=2, microbatches=2, layers=layers)
    c = p.stage_costs(even_partition(2, 2))
    sel = selective_recompute(c)
    assert np.allclose(sel.act, 2.5) and np.allclose(sel.b, 1.25) and np.allclose(sel.act_w, 0.5)
    assert np.allclose(selective_recompute(c, [1]).act, [4.0, 2.5])
    assert selective_recompute(_problem().stage_costs(even_partition(8, 4))).act_sel is None
    tc = replace(p, torch_liveness=True).stage_costs(even_partition(2, 2))
    assert np.allclose(tc.act_w, 4.0) and np.allclose(fold_liveness(replace(c, torch_liveness=True)).act_w, 4.0)
    assert np.allclose(c.act_w, 2.0)
    # round trip of the new fields through the problem file
    d = replace(p, torch_liveness=True, copy_bandwidth=3.0).to_dict()
    back = Problem.from_dict(d)
    assert back.torch_liveness is True and back.copy_bandwidth == 3.0 and back.layers[0].act_sel == 1.5
    with pytest.raises(Exception, match="torch_liveness"):
        Problem.from_dict({**d, "torch_liveness": "yes"})
    with pytest.raises(Exception, match="copy_bandwidth"):
        Problem.from_dict({**d, "copy_bandwidth": 0})


def test_auto_under_a_tight_cap_recomputes_per_microbatch_and_beats_full_recompute():
    from flexpipe_ui import presets
    from flexpipe_ui.search import auto_search
    p = presets.tight_memory(4, 8, fraction=0.6)
    res = auto_search(p)
    sim = simulate(res.best, p)
    assert all(fits(x, p.memory_limit) for x in sim.metrics.peak_memory)
    base, desc = best_named_full_recompute(p)
    assert sim.makespan <= base
    line = memory_summary(res.best, p, sim.makespan)
    assert line.startswith(f"fits {p.memory_limit:g} with ") and "full recompute + best named" in line


def test_the_gantt_draws_recompute_and_copies_as_their_own_bars_with_the_memory_curve():
    from flexpipe_ui.gantt import gantt_figure
    p = _problem(copy_bandwidth=2.0)        # copies as long as a forward: wide enough to draw alone
    plan = build_named("1f1b", p).edit(AddMemoryOps(recompute=((0, 3),), offload=((0, 1), (2, 2))))
    sim = simulate(plan, p)
    fig = gantt_figure(sim, title="fitted")
    bars = {t.name.split(" ")[0]: t for t in fig.data if t.type == "bar"}
    assert {"F", "B", "R", "OFF", "LOAD"} <= set(bars)
    assert list(bars["R"].y) == [0.0] and bars["R"].width == 0.8           # compute lane
    assert sorted(bars["OFF"].y) == [0.3, 2.3] and bars["OFF"].width == 0.2   # the copy lane
    assert bars["R"].marker.color != bars["F"].marker.color
    # the hover names stage and microbatch, start, end, duration and memory
    assert "stage" in bars["LOAD"].hovertemplate and "memory" in bars["LOAD"].hovertemplate
    # the memory lanes see the drops: rank 0's curve never rises above the simulated peak
    assert any(t.type == "scatter" and "memory" in (t.name or "").lower() for t in fig.data)


def test_the_auto_panel_says_what_the_cap_cost():
    pytest.importorskip("ipywidgets")
    from flexpipe_ui import presets
    from flexpipe_ui.widgets import AutoPanel
    p = presets.tight_memory(4, 8, fraction=0.6)
    panel = AutoPanel(p, time_limit=30)
    panel.run(wait=True)
    assert panel.error is None, panel.status
    assert panel.memory_line.startswith(f"fits {p.memory_limit:g} with ")
    assert "recomputes" in panel.memory_line and "full recompute + best named" in panel.memory_line
    assert "full recompute + best named" in panel.status
    # without a cap, no such line
    free = AutoPanel(replace(p, memory_limit=None), time_limit=30)
    free.run(wait=True)
    assert free.memory_line == "" and "full recompute" not in free.status


def test_the_summary_leaves_the_baseline_out_past_its_size(monkeypatch):
    import flexpipe_ui.memory_fit as mf
    from flexpipe_ui import presets
    p = presets.tight_memory(4, 8, fraction=0.6)
    plan = full_recompute(build_named("1f1b", p))
    monkeypatch.setattr(mf, "SUMMARY_MAX_ACTIONS", 10)
    line = memory_summary(plan, p)
    assert f"with {p.microbatches * plan.schedule.num_stages} recomputes" in line
    assert "not simulated at" in line and "best_named_full_recompute" in line


def test_search_holds_budget_back_for_memory_fitting():
    from flexpipe_ui import presets
    from flexpipe_ui.search.state import SearchState
    S = SearchState(presets.tight_memory(4, 8, fraction=0.8), seed=0, time_limit=None, max_evals=400,
                    max_actions=1000, progress=None, stop=lambda: False, top=1)
    S.hold_back(0.25)
    assert (S.max_evals, S.max_actions) == (300, 750)
    S.actions = 800
    assert S.out_of_budget() and S.stopped == "max_actions"
    S.release()
    assert (S.max_evals, S.max_actions) == (400, 1000) and S.stopped == ""
    assert not S.out_of_budget()


def _deferred_pair(s):
    """A (stage, microbatch) whose W is not right after its I in the rank's list."""
    for row in s.order:
        names = [str(a) for a in row]
        for a in row:
            if a.kind.role == "backward_input":
                w = f"{a.stage}W{a.microbatch}"
                if w in names and names.index(w) != names.index(str(a)) + 1:
                    return (a.stage, a.microbatch), names
    raise AssertionError("no deferred W in this schedule")


def test_the_edit_step_moves_a_deferred_w_next_to_its_i_and_names_a_fused_backward():
    plan = build_named("zb-h2", _problem())
    (st, m), _ = _deferred_pair(plan.schedule)
    edited = plan.edit(AddMemoryOps(w_early=((st, m),)))
    row = next(r for r in edited.schedule.order if any(a.stage == st for a in r))
    names = [str(a) for a in row]
    assert names.index(f"{st}W{m}") == names.index(f"{st}I{m}") + 1
    assert edited.schedule.num_actions == plan.schedule.num_actions     # moved, not added
    ns: dict = {}
    exec(edited.to_python(), ns)                                        # replays as Python
    assert ns["plan"].schedule == edited.schedule
    with pytest.raises(EditError, match="stage 0 microbatch 1, which has no split backward"):
        add_memory_ops(build_named("1f1b", _problem()).schedule, w_early=[(0, 1)])


def test_fit_moves_deferred_ws_where_no_drop_frees_the_peak():
    # act_w = act: after I a deferred W holds its whole activation, which no recompute before I
    # frees; ZB-H2's extra warm-up forwards are held that way until the W's run in the drain
    p = _problem()
    plan = build_named("zb-h2", p)
    sim = simulate(plan, p)
    assert any(a.kind.role == "backward_weight" for _, _, a in plan.schedule.actions())
    cap = max(sim.metrics.peak_memory) - 1.0
    capped = replace(p, memory_limit=cap)
    fr = fit_memory(plan, capped)
    assert fr.fits and len(fr.w_early) > 0
    res = simulate(fr.plan, capped)
    assert all(fits(x, cap) for x in res.metrics.peak_memory)
    assert res.makespan == pytest.approx(fr.makespan)
    assert fr.makespan <= simulate(full_recompute(plan), capped).makespan
    # each moved W now runs straight after its I on its rank
    for st, m in fr.w_early:
        row = next(r for r in fr.plan.schedule.order if any(a.stage == st and a.microbatch == m for a in r))
        names = [str(a) for a in row]
        assert names.index(f"{st}W{m}") == names.index(f"{st}I{m}") + 1
    assert fr.plan.meta.get("edits") == 1                    # one recorded edit step
