"""Models the runtime executes, and how a model is described to it.

``spec`` (``ModelSpec``: layer count, per-layer builder, loss, batches), ``normalise``
(``as_spec``: what ``launch``/``profile`` accept), the demo ``gpt`` and the sleeping ``timed``
model, ``mlp`` (a chain of dense layers), ``split`` (any ``nn.Module`` cut by module names),
``hf`` (Hugging Face causal LMs), ``data`` (batches, microbatches, the single-process reference)
and ``model_arg`` (what ``--model`` names on the command line).

``kernel_runtime.models`` was one module before 0.2; its names are re-exported here.
"""
from __future__ import annotations

from .gpt import Block, GPTConfig, demo_gpt, demo_gpt_problem, lm_loss
from .normalise import as_spec
from .spec import ModelError, ModelSpec, _is_hf_model
from .timed import SleepLayer, timed_model

__all__ = ["ModelSpec", "GPTConfig", "demo_gpt", "demo_gpt_problem", "timed_model", "SleepLayer",
           "Block", "as_spec", "ModelError", "lm_loss"]
