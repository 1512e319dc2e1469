"""Point-to-point transport for one rank: batched isend/irecv posted in channel order, with timeouts.

Receives for each inbound channel are posted ``window`` messages ahead, in the sender's order (the
order ``flexpipe_ui.passes.comm`` numbered them), so NCCL's order matching and gloo's tag matching agree. Sends are
posted and not waited for until the end of the step, so a rank never blocks on its own sends. On
NCCL every directed channel gets its own two-rank process group (its own communicator and stream),
so a send queued towards a peer can never sit in front of a receive from that peer.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from flexpipe_ui.passes.comm import Message, RankComm

__all__ = ["Transport", "CommError", "ChannelGroups", "RECEIVE_WINDOW", "holds_sends"]

RECEIVE_WINDOW = 2
"""Receives posted ahead per inbound channel: their buffers are live until consumed (the cost
model's ``recv_ahead``, which the profiler writes from this)."""


def holds_sends(device_type: str) -> bool:
    """Whether a rank's device keeps every tensor it sent until its step ends (the cost model's
    ``sends_held``). On gloo a send's work reports completion only once waited for (measured with
    torch 2.13: ``is_completed()`` still False 1 s after the peer had received), so ``flush`` never
    drops one and ``finish_step`` waits for them all; NCCL's complete as the peer receives. CUDA
    tensors over gloo are staged through host copies: the device's own is not kept."""
    return device_type == "cpu"


class CommError(RuntimeError):
    """A receive or send that did not complete: names the rank, the action, the peer, the message."""

    def __init__(self, rank: int, action: str, peer: int, msg: Message | None, why: str):
        self.rank, self.action, self.peer, self.message = rank, action, peer, msg
        what = f" ({msg})" if msg is not None else ""
        super().__init__(f"rank {rank}, action {action}: {why} with peer rank {peer}{what}")


class ChannelGroups:
    """Process group per directed channel (NCCL) or the default group (gloo); created once, reused.

    With data parallelism the world holds ``replicas`` pipelines of ``ranks`` processes each:
    pipeline rank r of replica d is global rank ``d * ranks + r``. Channels are named by pipeline
    ranks; ``global_rank`` maps a peer into this process's replica, and on NCCL every replica gets
    its own group per channel (all processes create all of them, in one order).
    """

    def __init__(self, backend: str, ranks: int | None = None, replica: int = 0, replicas: int = 1):
        self.backend = backend
        self.ranks, self.replica, self.replicas = ranks, replica, replicas
        self._groups: dict[tuple[int, int], object] = {}

    def global_rank(self, r: int) -> int:
        """Global rank of pipeline rank ``r`` in this process's replica."""
        return r if self.ranks is None else self.replica * self.ranks + r

    def ensure(self, channels: tuple[tuple[int, int], ...], rank: int, device: torch.device) -> None:
        """Create (collectively: every rank calls this with the same channels) and warm up groups."""
        if self.backend != "nccl":
            return
        new = [c for c in channels if c not in self._groups]
        R = self.ranks or 0
        for c in new:                    # new_group is collective over the world: same order everywhere
            for d in range(self.replicas):
                g = dist.new_group(sorted(d * R + r for r in c))
                if d == self.replica:
                    self._groups[c] = g
        # warm up in one global order so each lazy communicator init finds its peer
        for c in new:
            if rank in c:
                t = torch.zeros(1, device=device)
                if rank == c[0]:
                    dist.send(t, dst=self.global_rank(c[1]), group=self._groups[c])
                else:
                    dist.recv(t, src=self.global_rank(c[0]), group=self._groups[c])

    def group(self, src: int, dst: int):
        return self._groups.get((src, dst))


@dataclass(eq=False)
class _Recv:
    msg: Message
    buf: torch.Tensor
    work: object


class Transport:
    """Sends and receives of one rank for one plan; ``start_step`` before each step."""

    def __init__(self, rank: int, comm: RankComm, shapes: dict, device: torch.device,
                 groups: ChannelGroups, timeout: float, window: int = RECEIVE_WINDOW):
        self.rank, self.comm, self.shapes, self.device = rank, comm, shapes, device
        self.groups, self.timeout, self.window = groups, float(timeout), max(1, int(window))
        self.nccl = groups.backend == "nccl"
        # CUDA tensors over gloo (processes sharing GPUs): stage every message through host memory
        self.staged = device.type == "cuda" and not self.nccl
        self.buf_device = torch.device("cpu") if self.staged else device
        self._ops: list = []
        self._sends: list[tuple[Message, object, torch.Tensor]] = []

    # -- step lifecycle ------------------------------------------------------------------------
    def start_step(self) -> None:
        self._posted = {src: 0 for src in self.comm.inbound}
        self._recvs: dict[tuple[int, int], _Recv] = {}
        self._consumed = {src: 0 for src in self.comm.inbound}
        for src in self.comm.inbound:
            self._post_recvs(src, self.window)
        self.flush()

    def finish_step(self, action: str = "end of step") -> None:
        """Wait for every send of the step (they completed long ago unless a peer is stuck)."""
        self.flush()
        for msg, work, _ in self._sends:
            self._wait(work, action, msg.dst, msg, "send did not complete")
        self._sends.clear()
        left = {src: len(msgs) - self._consumed[src] for src, msgs in self.comm.inbound.items()
                if self._consumed[src] != len(msgs)}
        assert not left, f"rank {self.rank}: unconsumed messages {left}"

    # -- receive ---------------------------------------------------------------------------------
    def _post_recvs(self, src: int, upto: int) -> None:
        msgs = self.comm.inbound[src]
        upto = min(upto, len(msgs))
        while self._posted[src] < upto:
            msg = msgs[self._posted[src]]
            shape, dtype = self.shapes[(msg.what, msg.stage)]
            buf = torch.empty(shape, dtype=dtype, device=self.buf_device)
            rec = _Recv(msg, buf, None)
            self._recvs[(src, msg.index)] = rec
            self._ops.append(("recv", rec, dist.P2POp(dist.irecv, buf, self.groups.global_rank(src),
                                                      self.groups.group(src, self.rank))))
            self._posted[src] += 1

    def receive(self, msg: Message, action: str) -> torch.Tensor:
        """The tensor of ``msg``, waiting for it (error after ``timeout`` s)."""
        src = msg.src
        self._post_recvs(src, msg.index + 1)
        self.flush()
        rec = self._recvs.pop((src, msg.index))
        self._wait(rec.work, action, src, msg, f"no message after {self.timeout:g} s")
        self._consumed[src] += 1
        self._post_recvs(src, self._consumed[src] + self.window)
        return rec.buf.to(self.device, non_blocking=False) if self.staged else rec.buf

    # -- send ------------------------------------------------------------------------------------
    def send(self, msg: Message, tensor: torch.Tensor) -> None:
        t = tensor.detach()
        if self.staged:
            t = t.cpu()
        if not t.is_contiguous():
            t = t.contiguous()
        self._ops.append(("send", (msg, t), dist.P2POp(dist.isend, t, self.groups.global_rank(msg.dst),
                                                       self.groups.group(self.rank, msg.dst))))

    def flush(self) -> None:
        """Post queued operations, one batch per process group."""
        if not self._ops:
            return
        ops, self._ops = self._ops, []
        by_group: dict[int, list] = {}
        for item in ops:
            by_group.setdefault(id(item[2].group), []).append(item)
        for items in by_group.values():
            p2p = [it[2] for it in items]
            works = dist.batch_isend_irecv(p2p) if len(p2p) > 1 else [
                (dist.isend if it[0] == "send" else dist.irecv)(
                    it[2].tensor, it[2].peer, group=it[2].group) for it in items]
            for (kind, obj, _), w in zip(items, works):
                if kind == "recv":
                    obj.work = w
                else:
                    msg, t = obj
                    self._sends.append((msg, w, t))
        # drop finished sends so their buffers (a contiguous copy, a staged host copy) are freed early
        self._sends = [s for s in self._sends if not s[1].is_completed()]

    def _wait(self, work, action: str, peer: int, msg: Message | None, why: str) -> None:
        try:
            if self.nccl:
                deadline = time.monotonic() + self.timeout
                while not work.is_completed():
                    if time.monotonic() > deadline:
                        raise CommError(self.rank, action, peer, msg, why)
                    time.sleep(5e-5)
                work.wait()
            else:
                work.wait(timedelta(seconds=self.timeout))
        except CommError:
            raise
        except RuntimeError as e:
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            if "timed out" in text.lower() or "timeout" in text.lower():
                raise CommError(self.rank, action, peer, msg, why) from None
            raise CommError(self.rank, action, peer, msg, f"communication failed ({text})") from None
