"""Plans the runtime tests run: the library's named schedules when it is there, else torch-imported
ones plus hand 1F1B / ZB-H1 orders, and an auto plan."""
from __future__ import annotations

from flexpipe_ui.ir import Plan, Schedule
from flexpipe_ui.problem import even_partition


def one_f_one_b(p: int, m: int) -> Schedule:
    """Hand 1F1B (fused B): warm-up p-r-1 forwards, then one F one B, then the remaining Bs."""
    rows = []
    for r in range(p):
        warm = min(p - r - 1, m)
        row = [f"{r}F{i}" for i in range(warm)]
        for k in range(m):
            if warm + k < m:
                row.append(f"{r}F{warm + k}")
            row.append(f"{r}B{k}")
        rows.append(row)
    return Schedule.from_rows(rows, m, tuple(range(p)))


def zb_h1(p: int, m: int) -> Schedule:
    """Hand ZB-H1 shape: 1F1B with split I/W, rank r's W deferred by p-1-r to fill its cool-down."""
    rows = []
    for r in range(p):
        warm, d = min(p - r - 1, m), p - 1 - r
        row, w_next = [f"{r}F{i}" for i in range(warm)], 0
        for k in range(m):
            if warm + k < m:
                row.append(f"{r}F{warm + k}")
            row.append(f"{r}I{k}")
            if k - d >= 0:
                row.append(f"{r}W{w_next}")
                w_next += 1
        row += [f"{r}W{j}" for j in range(w_next, m)]
        rows.append(row)
    return Schedule.from_rows(rows, m, tuple(range(p)))


def library_plans(p: int, m: int, n_layers: int) -> dict[str, Plan]:
    """name → Plan with an even partition of ``n_layers``."""
    out: dict[str, Plan] = {}
    try:
        from flexpipe_ui.library import NAMED, build_named
    except ImportError:
        NAMED = None
    if NAMED:
        for name in NAMED:
            try:
                plan = build_named(name, None, ranks=p, microbatches=m)
            except ValueError:
                continue
            S = plan.schedule.num_stages
            if S <= n_layers:
                out[name] = Plan(plan.schedule, even_partition(n_layers, S), {"name": name})
        return out
    from flexpipe_ui.torch_interop import import_torch_schedule
    from flexpipe_ui.validate import check
    scheds = {"1f1b": one_f_one_b(p, m), "zb-h1": zb_h1(p, m)}
    for name in ("gpipe", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zb-v", "dualpipe-v"):
        try:
            s = import_torch_schedule(name, p, m)
        except ValueError:
            continue
        if not check(s):
            scheds[name] = s
    for name, s in scheds.items():
        if s.num_stages <= n_layers:
            out[name] = Plan(s, even_partition(n_layers, s.num_stages), {"name": name})
    return out


def auto_plan(problem) -> Plan:
    from flexpipe_ui.search import auto
    plan = auto(problem, time_limit=2.0)
    return plan.with_meta(name="auto")


def random_schedule(p: int, m: int, placement: tuple[int, ...], split: bool, seed: int) -> Schedule:
    """A random valid order: ranks take turns at random, each appending a random ready action.

    Ready means its dependencies are done, so the order is deadlock-free; microbatches are
    consumed out of the order they were sent in, which exercises the receive windows.
    """
    import random
    rng = random.Random(seed)
    S = len(placement)
    bwd = "I" if split else "B"
    todo = {(s, k, mb) for s in range(S) for mb in range(m) for k in (("F", "I", "W") if split else ("F", "B"))}
    done: set = set()

    def ready(s, k, mb):
        if k == "F":
            return s == 0 or (s - 1, "F", mb) in done
        if k in ("I", "B"):
            return (s, "F", mb) in done and (s == S - 1 or (s + 1, bwd, mb) in done)
        return (s, "I", mb) in done

    rows = [[] for _ in range(p)]
    while todo:
        cands = [a for a in todo if ready(*a)]
        s, k, mb = rng.choice(cands)
        todo.discard((s, k, mb))
        done.add((s, k, mb))
        rows[placement[s]].append(f"{s}{k}{mb}")
    return Schedule.from_rows(rows, m, placement)


def assert_steps_match_reference(h, ref, steps: int, plans: int, tol: float = 1e-10) -> None:
    """Every step of every plan of a finished launch ``h`` has the reference run's loss and
    gradients within ``tol``."""
    import numpy as np
    import pytest
    assert len(h.step_events) == steps * plans
    for ev in h.step_events:
        assert ev.loss == pytest.approx(ref.losses[ev.step], abs=tol)
        g = ref.grads[ev.step]
        assert max(float(np.abs(ev.grads[k] - g[k]).max()) for k in g) <= tol
