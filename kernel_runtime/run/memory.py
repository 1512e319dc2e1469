"""Memory accounting of the runtime on CPU: the bytes a rank holds, counted as the profiler counts.

``SavedBytes`` records the storages autograd saves during a forward; ``activation_bytes`` is what
one (stage, microbatch) holds after F (saved storages ∪ output, less the input: the input is its
producer's output, so per-layer figures add up over a stage); ``static_bytes`` is parameters +
gradients + optimizer state as they exist. The executor sums ``activation_bytes`` (plus the anchor
gradients I records for W) over live microbatches after every action; its peak plus
``static_bytes`` is a worker's measured peak memory on CPU (on CUDA: ``max_memory_allocated``).
"""
from __future__ import annotations

import torch

__all__ = ["SavedBytes", "activation_bytes", "static_bytes", "without_grad_fn", "tracked_memory_mib"]


def without_grad_fn(t):
    """What a saved-tensor pack hook keeps of ``t``: an alias without ``grad_fn`` (same storage and
    version counter; autograd restores the grad_fn on unpack). Kept as is, an op's own output would
    hold its grad_fn, which holds the saved output: a cycle through C++ that Python's gc cannot see,
    broken only when backward frees the graph. A split backward retains the graph (I, then W), so
    every microbatch's activations leaked (~11 MiB each on bench_truth's GPT head stage; the VM's
    page faults then doubled I and W)."""
    return t.detach() if t.grad_fn is not None else t


class SavedBytes:
    """``saved_tensors_hooks`` that record the storages autograd saves during a forward (parameters
    excluded): a stage's activation is these storages plus its output, less its input."""

    def __init__(self, param_ptrs: set[int]):
        self.param_ptrs = param_ptrs
        self.storages: dict[int, int] = {}

    def pack(self, t):
        try:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr not in self.param_ptrs:
                self.storages[ptr] = st.nbytes()
        except (RuntimeError, NotImplementedError):      # tensors without storage (sparse, meta)
            pass
        return without_grad_fn(t)

    def hooks(self):
        self.storages = {}
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


def _storage(t) -> tuple[int, int] | None:
    if not isinstance(t, torch.Tensor):
        return None
    try:
        st = t.untyped_storage()
        return st.data_ptr(), st.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def recorded_grad_bytes(pend) -> int:
    """Bytes the anchors' gradients that a split backward's I recorded hold until W, each storage
    once: one gradient reaches several anchors (a residual's two branches), recorded as one tensor
    twice (a pre-norm transformer layer: 7 recorded tensors, 6 storages, 4.7 MiB not 6.1)."""
    if pend is None:
        return 0
    held = dict(s for gs in pend.grads.values() for g in gs if (s := _storage(g)) is not None)
    return int(sum(held.values()))


def activation_bytes(saved: dict[int, int], x, y) -> int:
    """Bytes one (stage, microbatch) holds after F: saved storages ∪ output, minus the input's
    storage (counted as the producer's output; per-layer figures then add up over a stage)."""
    held = dict(saved)
    out = _storage(y)
    if out is not None and y.dim() > 0:
        held[out[0]] = out[1]
    inp = _storage(x)
    if inp is not None:
        held.pop(inp[0], None)
    return int(sum(held.values()))


def static_bytes(params, optimizer=None) -> int:
    """Parameters + their gradients + the optimizer's state tensors, as they are now."""
    seen: set[int] = set()
    total = 0
    tensors = list(params) + [p.grad for p in params if p.grad is not None]
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        s = _storage(t)
        if s is not None and s[0] not in seen:
            seen.add(s[0])
            total += s[1]
    return total


def tracked_memory_mib(rec, params, opt) -> float:
    """This step's peak by the executor's own count, MiB: the activation bytes it tracked
    (``rec.peak_activation``) + parameters, gradients and optimizer state (the cost model's rule,
    kept for diagnosis only; a run reports the allocator's figure, ``procmem``)."""
    return (rec.peak_activation + static_bytes(params, opt)) / 2 ** 20
