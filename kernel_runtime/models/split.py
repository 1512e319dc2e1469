"""``split_module``: any ``nn.Module`` cut into pipeline layers by module names.

The layers are given as names of submodules in model order (torchtitan's
``module_fqns_per_model_part`` idea): ``["embed", "blocks.0", "blocks.1", ["norm", "head"]]``; a
list groups several modules into one layer, applied in the order given. Each layer is called as
``layer(x)`` with the previous layer's output.

How a rank gets only its own layers: the spec carries a picklable *source* (the module itself, or
a zero-argument factory) and the layer names. A rank builds the whole module on the host (a
factory under the spec's seed, so every rank and the single-process reference build the same
weights; a given module is copied) and keeps only the submodules of its own layers; the rest is
dropped before anything moves to the device. We chose this over ``torch.device("meta")``
construction plus materialising one's own part because meta tensors lose what ``__init__``
computed (rotary ``inv_freq`` buffers, custom initialisations): re-initialising a part would need
each module's own init code and would not reproduce the reference weights. The cost is that each
process holds the whole model in host memory for a moment while it builds; a factory that loads
one's part from a checkpoint avoids even that.
"""
from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .spec import ModelError, ModelSpec

__all__ = ["split_module", "SplitError", "ModuleChain", "SplitBuilder"]


class SplitError(ModelError):
    """The layer names do not cut the module cleanly: unknown name, used twice, parameters left out
    or shared between layers."""


class ModuleChain(nn.Module):
    """Several named submodules applied in order: one pipeline layer made of a name group."""

    def __init__(self, names: Sequence[str], modules: Sequence[nn.Module]):
        super().__init__()
        self.names = tuple(names)
        for n, m in zip(names, modules):
            self.add_module(n.replace(".", "_"), m)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


@dataclass
class SplitBuilder:
    """Picklable: ``source`` (a module, or a zero-argument factory) and each layer's module names."""

    source: Any
    names: tuple[tuple[str, ...], ...]

    def root(self) -> nn.Module:
        if isinstance(self.source, nn.Module):
            return copy.deepcopy(self.source)
        return self.source()

    def __call__(self, indices: Sequence[int]) -> list[nn.Module]:
        """The modules of layers ``indices``; the rest of the whole model is dropped."""
        root = self.root()
        out = [_layer(root, self.names[i]) for i in indices]
        del root
        return out

    def one(self, i: int) -> nn.Module:
        return self([i])[0]


def _layer(root: nn.Module, names: tuple[str, ...]) -> nn.Module:
    mods = [root.get_submodule(n) for n in names]
    return mods[0] if len(mods) == 1 else ModuleChain(names, mods)


def _normalise(layers: Sequence) -> tuple[tuple[str, ...], ...]:
    if isinstance(layers, str) or not isinstance(layers, (list, tuple)) or not layers:
        raise SplitError("layers must be a non-empty list of module names (a name, or a list of names "
                         "for one layer), e.g. ['embed', 'blocks.0', 'blocks.1', ['norm', 'head']]")
    out = []
    for i, item in enumerate(layers):
        names = (item,) if isinstance(item, str) else tuple(item) if isinstance(item, (list, tuple)) else None
        if not names or not all(isinstance(n, str) and n for n in names):
            raise SplitError(f"layer {i}: expected a module name or a non-empty list of names, got {item!r}")
        out.append(names)
    return tuple(out)


def _probe(source: Any) -> nn.Module:
    """The module to check names against: the given one, or the factory's built on the meta
    device (no memory, no init work), else on the host."""
    if isinstance(source, nn.Module):
        return source
    if not callable(source):
        raise SplitError(f"split_module needs an nn.Module or a zero-argument factory returning one, "
                         f"not {type(source).__name__}")
    try:
        with torch.device("meta"):
            root = source()
    except Exception:
        root = source()
    if not isinstance(root, nn.Module):
        raise SplitError(f"the factory returned {type(root).__name__}, not an nn.Module")
    return root


def check_split(root: nn.Module, names: tuple[tuple[str, ...], ...]) -> None:
    """Raise ``SplitError`` for a name that does not exist, a module used twice (also inside another
    used module), parameters that belong to no layer, or a parameter shared by two layers."""
    known = dict(root.named_modules())
    owner: dict[str, int] = {}
    for i, group in enumerate(names):
        for n in group:
            if n not in known or n == "":
                near = difflib.get_close_matches(n, [k for k in known if k], n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(repr(x) for x in near)}?" if near else ""
                top = ", ".join(repr(k) for k, _ in root.named_children())
                raise SplitError(f"layer {i}: {type(root).__name__} has no submodule {n!r}{hint} "
                                 f"(its top-level modules: {top})")
            if n in owner:
                raise SplitError(f"module {n!r} is used twice: in layer {owner[n]} and layer {i}")
            for other, j in owner.items():
                if n.startswith(other + ".") or other.startswith(n + "."):
                    inner, outer = (n, other) if n.startswith(other + ".") else (other, n)
                    raise SplitError(f"module {inner!r} is used twice: it is inside {outer!r} "
                                     f"(layers {j} and {i})")
            owner[n] = i
    param_layer: dict[int, tuple[int, str]] = {}
    for i, group in enumerate(names):
        for n in group:
            for pn, p in known[n].named_parameters(remove_duplicate=False):
                seen = param_layer.get(id(p))
                if seen is not None and seen[0] != i:
                    raise SplitError(f"parameter {n}.{pn} is shared by layers {seen[0]} ({seen[1]}) and {i}: "
                                     "stages on different ranks cannot share a parameter (tied weights); "
                                     "untie it (e.g. tie_word_embeddings=False) or put both in one layer")
                param_layer[id(p)] = (i, f"{n}.{pn}")
    left = [pn for pn, p in root.named_parameters(remove_duplicate=False) if id(p) not in param_layer]
    if left:
        mods = sorted({pn.rsplit(".", 1)[0] if "." in pn else pn for pn in left})
        raise SplitError(f"parameters left out of every layer: {', '.join(left[:5])}"
                         f"{' ...' if len(left) > 5 else ''} (modules {', '.join(repr(m) for m in mods[:5])}): "
                         "add those modules to a layer")


def split_module(module: Any, layers: Sequence, loss_fn: Callable | None = None, *,
                 batch: Callable | None = None, batch_size: int = 8, name: str | None = None,
                 meta: dict | None = None) -> ModelSpec:
    """A ``ModelSpec`` whose layers are submodules of ``module`` named in ``layers``.

    ``module``: an ``nn.Module`` (sent to each worker, which keeps its own layers) or a picklable
    zero-argument factory returning one (built on each worker under the spec's seed). ``layers``:
    module names in model order; a list of names makes one layer of several modules. ``loss_fn``:
    (last layer's output, target) → scalar. ``batch``: optional synthetic data maker
    ``(step, batch size, generator) → (inputs, targets)``. Raises ``SplitError`` (a ValueError).
    """
    if loss_fn is None:
        raise SplitError("split_module needs loss_fn=(last layer's output, target) -> scalar loss")
    names = _normalise(layers)
    check_split(_probe(module), names)
    builder = SplitBuilder(module, names)
    label = name or (type(module).__name__ if isinstance(module, nn.Module)
                     else getattr(module, "__name__", "split"))
    info = {"layer_names": [list(g) for g in names]}
    info.update(meta or {})
    return ModelSpec(num_layers=len(names), build=builder.one, build_many=builder, loss_fn=loss_fn,
                     batch=batch, batch_size=batch_size, name=label, meta=info)
