"""Split backward (zero-bubble style): input gradients now (I), weight gradients later (W).

The idea is zero-bubble's and torch.distributed.pipelining's ``stage_backward_input/weight``:
during I we run autograd only towards the stage input, and record, with node pre-hooks, the
gradient arriving at every *anchor* -- a node on the output→input path from which a parameter
hangs off. W later resumes autograd from those anchors towards the parameters only, so no
input-gradient work is done twice. Anchors that are ancestors of each other would count a
gradient twice in W; a pre-hook pins each anchor's incoming gradient to the recorded one.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node

__all__ = ["Pending", "backward_input", "backward_weight", "grad_node"]


def grad_node(t: torch.Tensor) -> Node | None:
    """The tensor's grad_fn, or its AccumulateGrad node if it is a leaf requiring grad."""
    if t.grad_fn is not None:
        return t.grad_fn
    if not t.requires_grad:
        return None
    return t.view_as(t).grad_fn.next_functions[0][0]


@dataclass(eq=False)
class Pending:
    """What W needs: anchor nodes, their recorded incoming gradients, their parameters."""

    anchors: list[Node] = field(default_factory=list)
    grads: dict[Node, tuple] = field(default_factory=dict)
    groups: list[tuple[list[Node], list[torch.Tensor]]] = field(default_factory=list)
    orphans: list[torch.Tensor] = field(default_factory=list)     # params not below any anchor
    output: torch.Tensor | None = None
    grad_output: torch.Tensor | None = None


def _consumers(root: Node) -> dict[Node, list[Node]]:
    """Reverse edges of the graph below ``root``: node → nodes that feed gradient into it."""
    rev: dict[Node, list[Node]] = {root: []}
    q = deque([root])
    while q:
        n = q.popleft()
        for nxt, _ in n.next_functions:
            if nxt is None:
                continue
            if nxt not in rev:
                rev[nxt] = []
                q.append(nxt)
            rev[nxt].append(n)
    return rev


def _upward(starts, rev, stop=None) -> tuple[set[Node], set[Node]]:
    """Nodes reachable from ``starts`` along reverse edges; stops (and reports) at ``stop`` nodes."""
    seen, hit = set(), set()
    q = deque(s for s in starts if s is not None)
    seen.update(q)
    while q:
        n = q.popleft()
        for c in rev.get(n, ()):
            if c in seen:
                continue
            if stop is not None and c in stop:
                hit.add(c)
                continue
            seen.add(c)
            q.append(c)
    return seen, hit


def backward_input(output: torch.Tensor, grad_output: torch.Tensor | None, inp: torch.Tensor,
                   params: list[torch.Tensor]) -> tuple[torch.Tensor | None, Pending]:
    """Gradient of ``output`` w.r.t. the leaf ``inp`` only; returns it and what W needs."""
    out_node = grad_node(output)
    in_node = grad_node(inp)
    pend = Pending(output=output, grad_output=grad_output)
    if out_node is None:
        return None, pend
    rev = _consumers(out_node)
    path, _ = _upward([in_node], rev) if in_node in rev else (set(), set())
    groups: dict[Node, int] = {}
    members: list[tuple[set[Node], list[torch.Tensor]]] = []
    for p in params:
        pn = grad_node(p)
        if pn not in rev:
            continue                    # unused by this output
        _, anchors = _upward([pn], rev, stop=path)
        if not anchors:
            pend.orphans.append(p)
            continue
        ids = {groups[a] for a in anchors if a in groups}
        if ids:                          # merge groups that share an anchor
            gid = min(ids)
            for other in sorted(ids - {gid}):
                a_set, ps = members[other]
                members[gid][0].update(a_set)
                members[gid][1].extend(ps)
                for a in a_set:
                    groups[a] = gid
                members[other] = (set(), [])
        else:
            gid = len(members)
            members.append((set(), []))
        members[gid][0].update(anchors)
        members[gid][1].append(p)
        for a in anchors:
            groups[a] = gid
    pend.groups = [(list(a), ps) for a, ps in members if ps]
    pend.anchors = [a for a_list, _ in pend.groups for a in a_list]
    handles = []
    for a in pend.anchors:
        def hook(grad_outputs, a=a):
            pend.grads[a] = tuple(grad_outputs)
        handles.append(a.register_prehook(hook))
    try:
        if in_node is not None and in_node in rev:
            go = None if grad_output is None else (grad_output,)
            (dx,) = torch.autograd.grad((output,), (inp,), go, retain_graph=True)
        else:                            # no input gradient: run the anchors' part in W instead
            dx = None
            pend.groups, pend.anchors, pend.orphans = [], [], list(params)
    finally:
        for h in handles:
            h.remove()
    return dx, pend


def _accumulate(p: torch.Tensor, g: torch.Tensor | None) -> None:
    if g is None:
        return
    if p.grad is None:
        p.grad = g.detach().clone() if g.requires_grad else g
    else:
        p.grad.add_(g)


def backward_weight(pend: Pending) -> None:
    """Weight gradients from the anchors recorded by ``backward_input``, accumulated into ``.grad``."""
    for anchors, params in pend.groups:
        edges, gos = [], []
        for a in anchors:
            for i, g in enumerate(pend.grads.get(a, ())):
                if g is not None:
                    edges.append(GradientEdge(a, i))
                    gos.append(g)
        if not edges:
            continue
        handles = []
        if len(anchors) > 1:             # pin each anchor's gradient to what I recorded
            for a in anchors:
                saved = pend.grads.get(a)
                if saved is not None:
                    handles.append(a.register_prehook(lambda _g, s=saved: s))
        try:
            grads = torch.autograd.grad(edges, params, gos, retain_graph=True, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        for p, g in zip(params, grads):
            _accumulate(p, g)
        # freed before the next group's grads exist: a stage's W then peaks at its largest group's
        # (the profiler's per-layer workspace), not at two groups' (measured on bench_truth's MLP)
        grads = g = None
    if pend.orphans and pend.output is not None and pend.output.grad_fn is not None:
        go = None if pend.grad_output is None else (pend.grad_output,)
        grads = torch.autograd.grad((pend.output,), pend.orphans, go, retain_graph=True,
                                    allow_unused=True)
        for p, g in zip(pend.orphans, grads):
            _accumulate(p, g)
    pend.grads.clear()
    pend.groups.clear()
    pend.anchors.clear()
    pend.orphans.clear()
    pend.output = pend.grad_output = None
