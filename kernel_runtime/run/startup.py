"""Starting a worker process: one sequence for every process the runtime starts.

``launch``'s workers, the profiler's workers and torchrun's workers all begin with
``start_process``, so a profile sees the process a run sees (the same allocator settings, CPU
pinning, threads, loopback-only sockets). In order:

1. a spawned worker dies with the process that started it (no orphans, Linux);
2. on one machine, the rendezvous and gloo's/NCCL's sockets stay on loopback (``loopback``);
3. freed host memory is kept (``allocator.keep_freed_memory``: no page-fault churn per step);
4. its device is chosen (CUDA: ``local_rank`` modulo the GPUs) and the process group joined (on
   loopback, rank 0 binds the rendezvous store to 127.0.0.1 itself);
5. its main thread is pinned to its share of the CPUs (``affinity.pin_worker``), after the join so
   that the communication threads the join started are not, and given its thread count.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ProcessStart", "start_process", "die_with_parent"]


@dataclass(frozen=True, kw_only=True)
class ProcessStart:
    """How one worker process starts (picklable, torch-free)."""

    rank: int
    """Global rank in the process group."""
    world: int
    """Processes in the group."""
    device: str = "cpu"
    """"cpu" or "cuda"."""
    backend: str = "gloo"
    """"gloo" or "nccl"."""
    local_rank: int | None = None
    """Index among this machine's workers (CPU share, GPU); None: ``rank``."""
    local_world: int | None = None
    """Workers on this machine; None: ``LOCAL_WORLD_SIZE`` if set (torchrun), else ``world``."""
    threads: int | None = None
    """torch threads (None: torch's default)."""
    pin_cpus: bool = True
    """Pin a CPU worker to its share of the cores (``affinity.pin_worker``)."""
    timeout: float = 60.0
    """Seconds the process group waits for a peer."""
    master_addr: str = "127.0.0.1"
    """Rendezvous address (one machine: loopback)."""
    master_port: int | None = None
    """Rendezvous port; None: the environment's (torchrun sets MASTER_ADDR/PORT)."""
    loopback: bool = True
    """One machine: the rendezvous store and gloo/NCCL sockets listen on 127.0.0.1 only."""
    spawned: bool = True
    """Started by ``launch``/``profile`` (dies with its parent); False under torchrun."""
    group: bool = True
    """Join the process group (False: a lone profiling process)."""


def die_with_parent() -> None:
    """Linux: SIGKILL this worker if the launching process dies (no orphans)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _loopback_sockets() -> None:
    """gloo's pair sockets on loopback (else on the hostname's address); NCCL's bootstrap
    sockets likewise (intra-node data goes over P2P/SHM anyway). Settings already made win."""
    import socket
    lo = [n for _, n in socket.if_nameindex() if n in ("lo", "lo0")]
    if lo:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", lo[0])
        os.environ.setdefault("NCCL_SOCKET_IFNAME", lo[0])


def _loopback_store(ps: ProcessStart, timeout):
    """The rendezvous TCPStore bound to 127.0.0.1 only (torch's own binds every interface, "::"):
    rank 0 binds the socket itself and hands it over (``master_listen_fd``)."""
    import socket

    import torch.distributed as dist
    if ps.rank != 0:
        return dist.TCPStore("127.0.0.1", ps.master_port, ps.world, False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", ps.master_port))
    sock.listen(max(128, ps.world))
    return dist.TCPStore("127.0.0.1", ps.master_port, ps.world, True, timeout=timeout,
                         wait_for_workers=False, master_listen_fd=sock.detach())


def _device(ps: ProcessStart, local_rank: int):
    import torch
    if ps.device == "cuda":
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _join(ps: ProcessStart, device) -> None:
    from datetime import timedelta

    import torch.distributed as dist
    if dist.is_initialized():
        return
    kw = {"device_id": device} if ps.backend == "nccl" else {}
    limit = timedelta(seconds=ps.timeout)
    if ps.loopback:
        kw["store"] = _loopback_store(ps, limit)
    dist.init_process_group(ps.backend, rank=ps.rank, world_size=ps.world, timeout=limit, **kw)


def start_process(ps: ProcessStart):
    """Set this process up as ``ps`` says (the steps in the module docstring); its torch device."""
    if ps.spawned:
        die_with_parent()
    if ps.master_port is not None:
        os.environ.setdefault("MASTER_ADDR", ps.master_addr)
        os.environ["MASTER_PORT"] = str(ps.master_port)
    if ps.loopback:
        _loopback_sockets()
    import torch

    from .affinity import pin_worker
    from .allocator import keep_freed_memory
    keep_freed_memory()
    local = ps.rank if ps.local_rank is None else ps.local_rank
    local_world = ps.local_world or int(os.environ.get("LOCAL_WORLD_SIZE", ps.world))
    device = _device(ps, local)
    if ps.group:
        _join(ps, device)
    pin_worker(local, local_world, ps.device, ps.pin_cpus)   # after the join: its threads stay free
    if ps.threads:
        torch.set_num_threads(ps.threads)
    return device
