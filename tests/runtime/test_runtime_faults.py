"""Faults: a worker that raises, is killed, runs out of memory or hangs leaves no process behind and
the handle reports it (rank, action) within 10 s; bad plans are refused before any process starts."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plans import one_f_one_b  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow            # multi-process
psutil = pytest.importorskip("psutil")

from flexpipe_ui.ir import Plan, Schedule  # noqa: E402
from flexpipe_ui.problem import even_partition  # noqa: E402


def _spec():
    from kernel_runtime.models import demo_gpt
    return demo_gpt(vocab=32, seq=8, dim=16, heads=2, n_blocks=2, batch_size=4)


def _plan():
    return Plan(one_f_one_b(2, 4), even_partition(4, 2), {"name": "1f1b"})


def _alive(pids):
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _run_fault(handlers, timeout=60.0, steps=3):
    from kernel_runtime.run.launcher import WorkerError, launch
    h = launch(_plan(), model=_spec(), steps=steps, handlers=handlers, timeout=timeout)
    pids = h.pids
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as ei:
        h.wait(timeout=60)
    return h, ei.value, pids, t0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["raise", "kill", "oom"])
def test_worker_failure_is_reported_and_cleaned_up(kind, fail_at):
    h, err, pids, t0 = _run_fault(fail_at(1, "1B2", kind))
    # reported quickly after the failure: workers start in ~3-5 s, the fault is in step 0
    assert time.monotonic() - t0 < 20
    assert h.done
    assert err.rank == 1
    assert err.action == "1B2", str(err)
    if kind == "raise":
        assert "injected failure in 1B2" in str(err)
    elif kind == "kill":
        assert "signal 9" in str(err)
    else:
        assert err.kind == "oom" and "out of memory" in str(err)
    assert _alive(pids) == [], f"worker processes left: {_alive(pids)}"


@pytest.mark.timeout(120)
def test_hang_becomes_timeout_naming_rank_action_peer(fail_at):
    h, err, pids, t0 = _run_fault(fail_at(1, "1F1", "hang"), timeout=2.0)
    waited = time.monotonic() - t0
    # the hung rank and its action are blamed (the launcher's watchdog), not the rank that waited
    assert err.rank == 1 and err.action == "1F1" and err.kind == "hang", str(err)
    assert "rank 1 hung in action 1F1" in str(err), str(err)
    assert waited < 10 + 5          # 2 s timeout + start-up
    assert _alive(pids) == []


@pytest.mark.timeout(120)
def test_stop_leaves_no_process():
    from kernel_runtime.run.launcher import launch
    sched = one_f_one_b(2, 4)
    h = launch(Plan(sched), timed=5.0, steps=200)
    ev = h.poll(timeout=30)
    assert ev is not None and ev.step == 0
    pids = h.pids
    t0 = time.monotonic()
    h.stop()
    assert time.monotonic() - t0 < 10
    assert h.done and _alive(pids) == []


def test_invalid_plan_refused_before_start():
    from kernel_runtime.run.launcher import PlanRefused, launch
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    bad = Schedule.from_text("r0: 0F0 0B0\nr1: 1B0 1F0", 1, (0, 1))   # 1B0 before its own F
    with pytest.raises(PlanRefused, match="fails validation"):
        launch(Plan(bad, even_partition(4, 2)), model=_spec())
    wrong = Plan(one_f_one_b(2, 4), even_partition(5, 2))              # 5 layers, model has 4
    with pytest.raises(PlanRefused, match="covers 5 layers but the model has 4"):
        launch(wrong, model=_spec())
    with pytest.raises(PlanRefused, match="GPU|cuda"):
        if torch.cuda.is_available():
            pytest.skip("has a GPU")
        launch(_plan(), model=_spec(), devices="cuda")
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before
