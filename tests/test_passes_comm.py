"""The communication lowering pass (torch-free): every cross-rank boundary sends one activation and
one gradient per microbatch, numbered in sender order, each needed by exactly one action."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "runtime"))  # the runtime tests' hand orders (torch-free)
from plans import one_f_one_b, zb_h1  # noqa: E402

from flexpipe_ui.passes import derive_comm  # noqa: E402


def _schedules():
    from flexpipe_ui.ir import Schedule
    out = {"1f1b": one_f_one_b(4, 8), "zb-h1": zb_h1(4, 8),
           # V placement: stages 1 and 2 share rank 1, so that boundary needs no message
           "v": Schedule.from_text("r0: 0F0 3F0 3B0 0B0\nr1: 1F0 2F0 2B0 1B0", 1, (0, 1, 1, 0))}
    return out


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "v"])
def test_messages_cover_cross_rank_boundaries(name):
    s = _schedules()[name]
    cp = derive_comm(s)
    cross = sum(1 for i in range(s.num_stages - 1) if s.placement[i] != s.placement[i + 1])
    assert cp.num_messages == 2 * cross * s.microbatches
    for r, rc in enumerate(cp.ranks):
        needed = [m for ms in rc.needs.values() for m in ms]
        inbound = [m for ms in rc.inbound.values() for m in ms]
        assert sorted(map(str, needed)) == sorted(map(str, inbound))
        for src, msgs in rc.inbound.items():
            assert [m.index for m in msgs] == list(range(len(msgs)))
            assert all(m.src == src and m.dst == r for m in msgs)
        for pos, msgs in rc.sends.items():
            a = s.order[r][pos]
            for m in msgs:
                assert m.stage == a.stage and m.microbatch == a.microbatch
                assert m.what == ("act" if a.kind.is_forward else "grad")


def test_channel_order_is_sender_order():
    s = zb_h1(2, 4)
    cp = derive_comm(s)
    sent = [m for pos in sorted(cp.ranks[0].sends) for m in cp.ranks[0].sends[pos]]
    assert [m.index for m in sent] == list(range(len(sent)))
    assert cp.channels == ((0, 1), (1, 0))
