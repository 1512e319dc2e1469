"""The lowering pass that derives communication: which tensor each action sends or waits for, in what order.

``derive_comm(schedule)`` is pure and torch-free (tested without torch, used by ``kernel_runtime``). For every stage boundary that crosses ranks,
``F(s, m)`` sends the activation of stage s to the rank of stage s+1, and the input-gradient
backward (``I`` or fused ``B``) of stage s+1 sends the gradient back. Messages on one directed
channel (src rank → dst rank) are numbered in the sender's execution order; receivers post their
receives in that same order (NCCL matches by order, not by tag), ahead of need, so a receive never
waits for a message that the sender produces later. Sends never block the sender's compute, so the
run is the simulator's dataflow model: a schedule the validator accepts cannot deadlock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Schedule

__all__ = ["Message", "RankComm", "CommPlan", "derive_comm"]


@dataclass(frozen=True, slots=True)
class Message:
    """One tensor crossing ranks: the activation ("act") or input gradient ("grad") of a boundary."""

    what: str            # "act": output of stage ``stage`` → stage+1; "grad": d input of stage → stage-1
    stage: int           # the producing stage
    microbatch: int
    src: int             # rank
    dst: int             # rank
    index: int           # position on the (src, dst) channel

    @property
    def consumer_stage(self) -> int:
        return self.stage + 1 if self.what == "act" else self.stage - 1

    def __str__(self) -> str:
        arrow = f"{self.stage}->{self.consumer_stage}"
        return f"{self.what} {arrow} mb{self.microbatch} (rank {self.src} -> {self.dst}, #{self.index})"


@dataclass(frozen=True)
class RankComm:
    """One rank's view: messages to send after each position, messages needed before each position."""

    sends: dict[int, tuple[Message, ...]] = field(default_factory=dict)
    needs: dict[int, tuple[Message, ...]] = field(default_factory=dict)
    inbound: dict[int, tuple[Message, ...]] = field(default_factory=dict)   # src rank → channel order


@dataclass(frozen=True)
class CommPlan:
    """Every rank's ``RankComm`` and the directed channels (src rank, dst rank) that carry messages."""

    ranks: tuple[RankComm, ...]
    channels: tuple[tuple[int, int], ...]      # (src, dst), sorted

    @property
    def num_messages(self) -> int:
        return sum(len(v) for rc in self.ranks for v in rc.sends.values())


def derive_comm(schedule: Schedule) -> CommPlan:
    """The messages of a validated schedule, numbered per directed channel in sender order."""
    S, place = schedule.num_stages, schedule.placement
    pending: dict[tuple[int, int], list[tuple[int, str, int, int]]] = {}  # channel → (pos, what, stage, mb)
    consumers: dict[tuple[str, int, int], tuple[int, int]] = {}
    for r, i, a in schedule.actions():
        if a.kind.is_forward:
            if a.stage + 1 < S and place[a.stage + 1] != r:
                pending.setdefault((r, place[a.stage + 1]), []).append((i, "act", a.stage, a.microbatch))
            if a.stage > 0 and place[a.stage - 1] != r:
                consumers[("act", a.stage - 1, a.microbatch)] = (r, i)
        elif a.kind.computes_input_grad:
            if a.stage > 0 and place[a.stage - 1] != r:
                pending.setdefault((r, place[a.stage - 1]), []).append((i, "grad", a.stage, a.microbatch))
            if a.stage + 1 < S and place[a.stage + 1] != r:
                consumers[("grad", a.stage + 1, a.microbatch)] = (r, i)
    sends: list[dict[int, list[Message]]] = [dict() for _ in range(schedule.ranks)]
    needs: list[dict[int, list[Message]]] = [dict() for _ in range(schedule.ranks)]
    inbound: list[dict[int, list[Message]]] = [dict() for _ in range(schedule.ranks)]
    for (src, dst), items in sorted(pending.items()):
        items.sort()
        for k, (pos, what, stage, mb) in enumerate(items):
            msg = Message(what, stage, mb, src, dst, k)
            sends[src].setdefault(pos, []).append(msg)
            inbound[dst].setdefault(src, []).append(msg)
            where = consumers.get((what, stage, mb))
            if where is None:
                raise ValueError(f"no consumer on rank {dst} for {msg}; validate the schedule first")
            needs[dst].setdefault(where[1], []).append(msg)
    freeze = lambda d: {k: tuple(v) for k, v in d.items()}
    ranks = tuple(RankComm(freeze(sends[r]), freeze(needs[r]), freeze(inbound[r]))
                  for r in range(schedule.ranks))
    return CommPlan(ranks, tuple(sorted(pending)))
