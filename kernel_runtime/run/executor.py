"""The per-rank interpreter: runs one rank's action list of a plan for one training step.

F receives its input (or takes the data / the previous local stage's output), runs the stage and
keeps what the backward needs, then sends its output. I computes input gradients only and sends
them upstream; W computes weight gradients from what I recorded and frees the microbatch; B does
both. Actions run through a handler registry (kind name → ``fn(executor, action, state)``) given
to the executor: ``DEFAULT_HANDLERS``, plus a launch's ``LaunchConfig.handlers``; shipped: recompute ``R`` (F keeps only its input and
the RNG state, R re-runs it with autograd) and offload/reload ``OFF``/``LOAD`` (F's saved tensors
go to pinned host memory on a side CUDA stream and come back before the backward; a no-op on
CPU, where they already are in host memory). Gradients accumulate over
microbatches with the loss scaled by 1/M, so the step's gradient is that of the mean loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

import torch
from torch import nn

from flexpipe_ui.ir import Action, Plan

from flexpipe_ui.passes.comm import CommPlan, Message

from .memory import SavedBytes, activation_bytes, recorded_grad_bytes, without_grad_fn
from .split_backward import Pending, backward_input, backward_weight
from .transport import ChannelGroups, Transport

__all__ = ["RankExecutor", "ActionError", "DEFAULT_HANDLERS", "StepRecord", "stage_forward"]


class ActionError(RuntimeError):
    """An exception raised inside an action; ``rank``, ``action`` and ``step`` say where."""

    def __init__(self, rank: int, action: str, step: int, cause: BaseException):
        self.rank, self.action, self.step, self.cause = rank, action, step, cause
        super().__init__(f"rank {rank}, step {step}, action {action}: {type(cause).__name__}: {cause}")


@dataclass(eq=False)
class MBState:
    """What one (stage, microbatch) holds between its actions."""

    x: torch.Tensor | None = None          # stage input as given (kept for recompute)
    leaf: torch.Tensor | None = None       # the leaf the input gradient is taken for
    head: torch.Tensor | None = None       # output of the leading no-input-grad layers (embedding)
    y: torch.Tensor | None = None          # stage output, or the loss on the last stage
    gy: torch.Tensor | None = None         # gradient of y
    dleaf: torch.Tensor | None = None
    pend: Pending | None = None
    rng: object = None
    saved: list | None = None              # tensors autograd saved, when the activation is offloaded
    copy_done: object = None               # CUDA event of the last offload/reload copy
    fused: bool = False                    # first stage on data: I deferred its work to W
    held: int = 0                          # bytes of activation this microbatch holds (tracked)


@dataclass
class StepRecord:
    """One rank's step: action (text, start ns, end ns), loss (last stage only), clock marks, and
    the peak bytes of activation the rank held (``activation_bytes`` after each action)."""

    records: list[tuple[str, int, int]]
    loss: float | None
    t0: int
    t_end: int
    peak_activation: int = 0


def stage_forward(layers: list[nn.Module], x: torch.Tensor):
    """(leaf, head, y): floating inputs become the leaf; integer inputs go through leading layers
    (an embedding) first, whose output becomes the leaf, so I has an input to differentiate."""
    if x.is_floating_point():
        leaf = x if (x.requires_grad and x.grad_fn is None) else x.detach().requires_grad_()
        h, start, head = leaf, 0, None
    else:
        h, start = x, 0
        while start < len(layers):
            h = layers[start](h)
            start += 1
            if h.requires_grad:
                break
        head = h if h.requires_grad else None
        leaf = h.detach().requires_grad_() if h.is_floating_point() else h
        h = leaf
    for layer in layers[start:]:
        h = layer(h)
    return leaf, head, h


# -- handlers -------------------------------------------------------------------------------------
def _forward(ex: "RankExecutor", a: Action, st: MBState) -> None:
    x = ex.stage_input(a)
    st.x = x
    if (a.stage, a.microbatch) in ex.offload:
        # keep what autograd saves in a list the OFF/LOAD actions can move (parameters stay put)
        st.saved = []
        params = ex.param_ids[a.stage]

        def pack(t, saved=st.saved):
            if id(t) in params:
                return (None, t)
            saved.append(without_grad_fn(t))
            return (len(saved) - 1, None)

        def unpack(ref, saved=st.saved):          # the list, not ``st`` (which holds the output)
            i, t = ref
            return t if i is None else saved[i]

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            st.leaf, st.head, y = stage_forward(ex.layers[a.stage], x)
            y = ex.maybe_loss(a, y)
        st.y = y
    elif (a.stage, a.microbatch) in ex.recompute:
        st.rng = torch.get_rng_state()
        with torch.no_grad():
            _, _, y = stage_forward(ex.layers[a.stage], x)
            y = ex.maybe_loss(a, y)
    else:
        st.leaf, st.head, y = stage_forward(ex.layers[a.stage], x)
        y = ex.maybe_loss(a, y)
        st.y = y
    ex.emit_output(a, y)


def _recompute(ex: "RankExecutor", a: Action, st: MBState) -> None:
    saved = torch.get_rng_state()
    torch.set_rng_state(st.rng)
    try:
        st.leaf, st.head, y = stage_forward(ex.layers[a.stage], st.x)
        st.y = ex.maybe_loss(a, y, record=False)
    finally:
        torch.set_rng_state(saved)


def _backward_input(ex: "RankExecutor", a: Action, st: MBState) -> None:
    _wait_copy(st)
    gy = ex.output_grad(a)
    if a.stage == 0 and st.head is not None:
        # The first stage's input is data (token ids): no input gradient goes anywhere, and
        # splitting would only add work, so, as torch's runtime does, W runs the whole backward.
        st.gy, st.fused = gy, True
        return
    params = ex.body_params(a.stage, st)
    dleaf, st.pend = backward_input(st.y, gy, st.leaf, params)
    st.dleaf = dleaf
    # the anchors' recorded gradients stay until W (the "act_w" of the cost model)
    st.held += recorded_grad_bytes(st.pend)
    st.y = None                            # the graph lives on in st.pend until W
    ex.emit_input_grad(a, dleaf)


def _backward_weight(ex: "RankExecutor", a: Action, st: MBState) -> None:
    if st.fused:
        torch.autograd.backward(st.y, st.gy)
        st.dleaf = st.leaf.grad
    else:
        backward_weight(st.pend)
    if st.head is not None and st.dleaf is not None:
        torch.autograd.backward(st.head, st.dleaf)
    ex.release(a)


def _backward_full(ex: "RankExecutor", a: Action, st: MBState) -> None:
    _wait_copy(st)
    gy = ex.output_grad(a)
    y, leaf = st.y, st.leaf
    if leaf is not None and leaf.requires_grad:
        torch.autograd.backward(y, gy)
        dleaf = leaf.grad
    else:
        torch.autograd.backward(y, gy)
        dleaf = None
    if st.head is not None and dleaf is not None:
        torch.autograd.backward(st.head, dleaf)
    ex.emit_input_grad(a, dleaf)
    ex.release(a)


def _move_saved(ex: "RankExecutor", st: MBState, to_host: bool) -> None:
    """Offload (to_host) or reload the saved activations; on CUDA on a side stream, and the
    backward's stream waits for the copy (``_wait_copy``)."""
    if st.saved is None:
        return
    dev = ex.device
    if dev.type != "cuda":              # host memory already: nothing to move
        return
    stream = ex.copy_stream
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        for i, t in enumerate(st.saved):
            if to_host:
                host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                host.copy_(t, non_blocking=True)
                t.record_stream(stream)
                st.saved[i] = host
            else:
                st.saved[i] = t.to(dev, non_blocking=True)
        st.copy_done = torch.cuda.Event()
        st.copy_done.record(stream)


def _offload(ex: "RankExecutor", a: Action, st: MBState) -> None:
    _move_saved(ex, st, True)


def _reload(ex: "RankExecutor", a: Action, st: MBState) -> None:
    _move_saved(ex, st, False)


def _wait_copy(st: MBState) -> None:
    if st.copy_done is not None:
        torch.cuda.current_stream().wait_event(st.copy_done)
        st.copy_done = None


DEFAULT_HANDLERS: Mapping[str, Callable] = MappingProxyType({
    "F": _forward, "I": _backward_input, "W": _backward_weight, "B": _backward_full,
    "R": _recompute, "OFF": _offload, "LOAD": _reload})
"""The runtime's own handlers (read-only); a launch adds its ``LaunchConfig.handlers`` on top."""


# -- the executor ---------------------------------------------------------------------------------
class RankExecutor:
    """Executes rank ``rank``'s actions of ``plan``; ``layers[stage]`` are this rank's stage modules."""

    def __init__(self, plan: Plan, rank: int, layers: dict[int, list[nn.Module]], loss_fn,
                 comm: CommPlan, shapes: dict, device: torch.device, groups: ChannelGroups,
                 timeout: float, timer=None, progress: Callable[[int], None] | None = None,
                 handlers: Mapping[str, Callable] = DEFAULT_HANDLERS):
        self.handlers = handlers
        self.plan, self.rank, self.layers, self.loss_fn = plan, rank, layers, loss_fn
        sched = plan.schedule
        self.S, self.M, self.place = sched.num_stages, sched.microbatches, sched.placement
        self.order = sched.order[rank]
        self.comm = comm.ranks[rank]
        self.transport = Transport(rank, self.comm, shapes, device, groups, timeout)
        self.device = device
        self.recompute = {(a.stage, a.microbatch) for row in sched.order for a in row if a.kind.name == "R"}
        self.offload = {(a.stage, a.microbatch) for row in sched.order for a in row if a.kind.name == "OFF"}
        self.param_ids = {s: {id(p) for l in ls for p in l.parameters()} for s, ls in layers.items()}
        self.copy_stream = torch.cuda.Stream(device) if (self.offload and device.type == "cuda") else None
        self.timer = timer
        self.progress = progress
        self.watch: Callable[[bool], None] | None = None
        """Called with True as an action's compute starts and False when it ends (the launcher's
        watchdog reads it to name a rank stuck in compute)."""
        self.params = {s: [p for l in ls for p in l.parameters() if p.requires_grad]
                       for s, ls in layers.items()}
        self.saved = SavedBytes({p.untyped_storage().data_ptr() for ls in layers.values()
                                 for l in ls for p in l.parameters()})
        # position of each stage's last weight-gradient action: its gradients are final after it
        last = {}
        for pos, a in enumerate(self.order):
            if a.kind.computes_weight_grad:
                last[a.stage] = pos
        self.grads_final_at = {pos: s for s, pos in last.items()}
        self.on_stage_done: Callable[[int], None] | None = None
        """Called with a stage index right after the action that finishes its gradients (the
        data-parallel all-reduce starts there)."""

    # -- used by handlers -------------------------------------------------------------------------
    def stage_input(self, a: Action) -> torch.Tensor:
        s, m = a.stage, a.microbatch
        if s == 0:
            return self.inputs[m]
        if self.place[s - 1] == self.rank:
            return self.local.pop(("act", s - 1, m))
        return self.got.pop(("act", s - 1, m))

    def maybe_loss(self, a: Action, y: torch.Tensor, record: bool = True) -> torch.Tensor:
        if a.stage != self.S - 1:
            return y
        loss = self.loss_fn(y, self.targets[a.microbatch])
        if record:
            self.losses.append(float(loss.detach()))
        return loss

    def emit_output(self, a: Action, y: torch.Tensor) -> None:
        s, m = a.stage, a.microbatch
        if s == self.S - 1:
            return
        if self.place[s + 1] == self.rank:
            self.local[("act", s, m)] = y.detach()
        else:
            for msg in self.comm.sends.get(self.pos, ()):
                if msg.what == "act":
                    self.transport.send(msg, y)

    def output_grad(self, a: Action) -> torch.Tensor | None:
        s, m = a.stage, a.microbatch
        if s == self.S - 1:
            return self.loss_scale
        if self.place[s + 1] == self.rank:
            return self.local.pop(("grad", s + 1, m))
        return self.got.pop(("grad", s + 1, m))

    def emit_input_grad(self, a: Action, dx: torch.Tensor | None) -> None:
        s, m = a.stage, a.microbatch
        if s == 0:
            return
        if dx is None:
            raise RuntimeError(f"stage {s} produced no input gradient (its input does not reach its output)")
        if self.place[s - 1] == self.rank:
            self.local[("grad", s, m)] = dx.detach()
        else:
            for msg in self.comm.sends.get(self.pos, ()):
                if msg.what == "grad":
                    self.transport.send(msg, dx)

    def body_params(self, stage: int, st: MBState) -> list[torch.Tensor]:
        return self.params[stage]

    def release(self, a: Action) -> None:
        self.state.pop((a.stage, a.microbatch), None)

    # -- one step ----------------------------------------------------------------------------------
    def run_step(self, inputs: list | None, targets: list | None, step: int = 0) -> StepRecord:
        """Run this rank's actions once; parameters' ``.grad`` hold the step's gradient after."""
        self.inputs, self.targets = inputs, targets
        self.local: dict = {}
        self.got: dict = {}
        self.state: dict[tuple[int, int], MBState] = {}
        self.losses: list[float] = []
        dtype = next((p.dtype for ps in self.params.values() for p in ps), torch.float32)
        self.loss_scale = torch.tensor(1.0 / self.M, dtype=dtype, device=self.device)
        for ps in self.params.values():
            for p in ps:
                p.grad = None
        timer = self.timer
        records = []
        peak = 0
        t0 = timer.start_step()
        self.transport.start_step()
        for pos, a in enumerate(self.order):
            self.pos = pos
            if self.progress is not None:
                self.progress(pos)
            text = str(a)
            try:
                for msg in self.comm.needs.get(pos, ()):
                    self.got[(msg.what, msg.stage, msg.microbatch)] = self.transport.receive(msg, text)
                st = self.state.setdefault((a.stage, a.microbatch), MBState())
                forward = a.kind.is_forward or a.kind.name == "R"    # R re-runs the forward with autograd
                start = timer.mark()
                if self.watch is not None:
                    self.watch(True)
                if forward:
                    with self.saved.hooks():
                        self.handlers[a.kind.name](self, a, st)
                else:
                    self.handlers[a.kind.name](self, a, st)
                if self.watch is not None:
                    self.watch(False)
                end = timer.mark()
                if forward:
                    st.held = activation_bytes(self.saved.storages, st.x, st.y)
                    self.saved.storages = {}
                self.transport.flush()
                if self.on_stage_done is not None and pos in self.grads_final_at:
                    self.on_stage_done(self.grads_final_at[pos])
            except Exception as e:
                raise ActionError(self.rank, text, step, e) from e
            records.append((text, start, end))
            peak = max(peak, sum(m.held for m in self.state.values()))
        self.transport.finish_step()
        loss = sum(self.losses) / self.M if self.S - 1 in self.layers else None
        return StepRecord(timer.resolve(records), loss, t0, timer.now(), peak)
