"""Hangs are blamed on the rank and action that hang, for any rank count, within the timeout; and a
single-machine run's workers listen on loopback only (no open rendezvous store)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from plans import one_f_one_b  # noqa: E402

torch = pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow            # multi-process

from flexpipe_ui.ir import Plan, Schedule  # noqa: E402
from flexpipe_ui.problem import even_partition  # noqa: E402


def _spec(n_blocks=2):
    from kernel_runtime.models import demo_gpt
    return demo_gpt(vocab=32, seq=8, dim=16, heads=2, n_blocks=n_blocks, batch_size=4)


def launch_with_fault(plan, fault, **kw):
    """The one place this file injects a fault (``faults.failing_handlers``, as the ``fail_at`` fixture)."""
    from faults import failing_handlers

    from kernel_runtime.run.launcher import launch
    return launch(plan, handlers=failing_handlers(fault["rank"], fault["action"], fault["kind"]), **kw)


def _alive(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks,rank,action", [(2, 1, "1F0"), (1, 0, "0F1")])
def test_compute_hang_names_the_hung_rank_and_action(ranks, rank, action):
    from kernel_runtime.run.launcher import WorkerError
    plan = Plan(one_f_one_b(ranks, 4), even_partition(4, ranks), {"name": "1f1b"})
    h = launch_with_fault(plan, {"rank": rank, "action": action, "kind": "hang"}, model=_spec(),
                          steps=2, timeout=2.0)
    pids = h.pids
    with pytest.raises(WorkerError) as ei:
        h.wait(timeout=90)
    err = ei.value
    assert err.rank == rank and err.action == action and err.kind == "hang", str(err)
    assert f"rank {rank} hung in action {action} of step 0" in str(err)
    assert "beyond the timeout of 2 s" in str(err)
    assert _alive(pids) == []


@pytest.mark.timeout(120)
def test_workers_listen_on_loopback_only():
    from kernel_runtime.run.launcher import launch
    h = launch(Plan(one_f_one_b(2, 4)), timed=20.0, steps=50)
    try:
        assert h.poll(timeout=60) is not None       # the group is up and training
        listening = []
        for pid in h.pids:
            for c in psutil.Process(pid).net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    listening.append(c.laddr.ip)
        assert listening, "expected the rendezvous store to listen somewhere"
        assert all(ip in ("127.0.0.1", "::1") for ip in listening), listening
    finally:
        h.stop()
