"""``as_spec``: what ``launch`` and ``profile`` accept as a model, normalised to a ``ModelSpec``."""
from __future__ import annotations

from typing import Any, Sequence

from torch import nn

from .gpt import demo_gpt
from .spec import ModelError, ModelSpec, _is_hf_model
from .timed import timed_model

__all__ = ["as_spec"]


def _whole_model_spec(layers: Sequence[nn.Module], loss_fn, name: str) -> ModelSpec:
    import copy
    layers = list(layers)
    return ModelSpec(num_layers=len(layers), build=lambda i: copy.deepcopy(layers[i]),
                     loss_fn=loss_fn, name=name)


def as_spec(model: Any, loss_fn=None, *, num_layers: int | None = None, timed=None) -> ModelSpec:
    """Normalise launch's ``model`` argument (None/"demo-gpt"/spec/Sequential/list/factory)."""
    if timed is not None and timed is not False:
        return timed_model(timed, num_layers=num_layers)
    if model is None or model == "demo-gpt":
        spec = demo_gpt(n_blocks=max(1, (num_layers or 6) - 2))
    elif isinstance(model, ModelSpec):
        spec = model
    elif isinstance(model, str):
        raise ModelError(f"unknown model {model!r}: use 'demo-gpt', a ModelSpec, an nn.Sequential, "
                         "a list of modules or a factory returning one")
    elif _is_hf_model(model):          # launch() and profile() convert these first (hf.as_model)
        raise ModelError(f"{type(model).__name__} is a Hugging Face model: pass "
                         "kernel_runtime.from_transformers(model)")
    elif isinstance(model, (nn.Sequential, list, tuple, nn.ModuleList)):
        spec = _whole_model_spec(model, loss_fn, "custom")
    elif callable(model):
        built = model()
        if isinstance(built, ModelSpec):
            spec = built
        elif (isinstance(built, tuple) and len(built) == 2 and callable(built[1])
              and not isinstance(built[1], nn.Module)):
            spec = _whole_model_spec(built[0], loss_fn or built[1], getattr(model, "__name__", "custom"))
        else:
            spec = _whole_model_spec(built, loss_fn, getattr(model, "__name__", "custom"))
    else:
        raise ModelError(f"model must be 'demo-gpt', a ModelSpec, layers or a factory, "
                         f"not {type(model).__name__}")
    if loss_fn is not None:
        import dataclasses
        spec = dataclasses.replace(spec, loss_fn=loss_fn)
    if spec.loss_fn is None:
        raise ModelError("a model given as layers needs loss_fn=(output, target) -> scalar loss")
    return spec
