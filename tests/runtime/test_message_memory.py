"""What the runtime holds that the cost model counts: a split backward's recorded gradients, each
storage once (``recorded_grad_bytes``); a W over several layers freeing each layer's fresh weight
gradients before the next layer's exist; and gloo's sends, kept until waited for (the premise of
the cost model's ``sends_held``, which the profiler writes from ``transport.holds_sends``)."""
from __future__ import annotations

import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")


def test_recorded_gradients_count_each_storage_once():
    from kernel_runtime.run.memory import recorded_grad_bytes
    from kernel_runtime.run.split_backward import backward_input
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True, norm_first=True)
    x = torch.randn(4, 8, 32, requires_grad=True)
    y = layer(x)
    _, pend = backward_input(y, torch.randn_like(y), x, list(layer.parameters()))
    grads = [g for gs in pend.grads.values() for g in gs if isinstance(g, torch.Tensor)]
    storages = {g.untyped_storage().data_ptr(): g.untyped_storage().nbytes() for g in grads}
    assert len(storages) < len(grads)                 # the residual's gradient, recorded twice
    assert recorded_grad_bytes(pend) == sum(storages.values())
    assert recorded_grad_bytes(pend) < sum(g.numel() * g.element_size() for g in grads)
    assert recorded_grad_bytes(None) == 0


def test_w_over_two_layers_peaks_at_one_layers_weight_gradient():
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile
    from kernel_runtime.measure.profile_memory import _cpu_ranges
    from kernel_runtime.run.split_backward import backward_input, backward_weight
    net = torch.nn.Sequential(torch.nn.Linear(512, 512, bias=False), torch.nn.Linear(512, 512, bias=False))
    params = list(net.parameters())
    for p in params:                                  # steady state: .grad exists, W adds into it
        p.grad = torch.zeros_like(p)
    x = torch.randn(8, 512, requires_grad=True)
    y = net(x)
    _, pend = backward_input(y, torch.ones_like(y), x, params)
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with prof:
        with record_function("w"):
            backward_weight(pend)
    (start, peak, end), = _cpu_ranges(prof, ["w"])
    one = 512 * 512 * 4
    assert peak - max(start, end) < 1.5 * one         # one layer's fresh gradient, not both layers'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_send(rank: int, port: int, q) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.ones(1000)
    if rank == 0:
        work = dist.isend(t, 1)
        dist.recv(torch.empty(1), 1)                  # the peer has received our message by now
        time.sleep(0.2)
        before = work.is_completed()
        work.wait()
        q.put((before, work.is_completed()))
    else:
        dist.recv(t, 0)
        dist.send(torch.ones(1), 0)
    dist.barrier()
    dist.destroy_process_group()


def test_gloo_sends_complete_only_when_waited_for():
    import multiprocessing as mp
    from kernel_runtime.run.transport import holds_sends
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_gloo_send, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    before, after = q.get(timeout=60)
    for p in procs:
        p.join(timeout=30)
    assert (before, after) == (False, True)
    assert holds_sends("cpu") and not holds_sends("cuda")
