"""A split backward (I, then W, both retaining the graph) must free a microbatch's graph and
activations once its state is dropped -- also under the executor's saved-tensor hooks, whose pack
used to return the tensor itself: an op's saved output then held its own grad_fn, a cycle through
C++ that Python's gc cannot collect (every microbatch's activations leaked, ~11 MiB on
bench_truth's GPT head stage, and the page faults doubled I and W within a minute)."""
from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")


def _graph_freed(hooks) -> bool:
    from kernel_runtime.run.split_backward import backward_input, backward_weight
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    params = list(net.parameters())
    seen = []
    handle = net[1].register_forward_hook(lambda m, i, o: seen.append(weakref.ref(o)))
    leaf = torch.randn(3, 8).requires_grad_()
    with hooks():
        y = net(leaf).square().sum()
    handle.remove()
    dx, pend = backward_input(y, None, leaf, params)
    backward_weight(pend)
    assert dx is not None and all(p.grad is not None for p in params)
    del y, pend, dx
    gc.collect()
    return seen[0]() is None          # tanh's output: saved by tanh's backward for itself


def test_split_backward_frees_the_graph_under_the_executors_hooks():
    from kernel_runtime.run.memory import SavedBytes
    saved = SavedBytes(set())
    assert _graph_freed(saved.hooks)
    assert saved.storages                  # the hooks still record what autograd saved


def test_split_backward_frees_the_graph_without_hooks():
    import contextlib
    assert _graph_freed(contextlib.nullcontext)
