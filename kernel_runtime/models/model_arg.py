"""What ``--model`` names (``flexpipe train|profile`` and the torchrun worker): demo-gpt,
``hf:<model type>`` with ``--model-config`` JSON, or ``package.module:factory``."""
from __future__ import annotations

import sys

__all__ = ["resolve_model"]


def _warn(msg: str) -> None:
    print(f"flexpipe: warning: {msg}", file=sys.stderr)


def resolve_model(args):
    """(spec, what to send to the workers) for ``--model``; raises ValueError for a bad one."""
    import dataclasses
    import json
    from .gpt import demo_gpt
    from .normalise import as_spec
    name = args.model
    cfg_text = getattr(args, "model_config", None)
    if cfg_text and not name.startswith("hf:"):
        _warn(f"--model-config has no effect with --model {name} (it configures hf: models)")
    if name != "demo-gpt" and getattr(args, "layers_given", False):
        _warn(f"--layers has no effect with --model {name}: the model's own layers are used")
    if name == "demo-gpt":
        spec = demo_gpt(n_blocks=args.layers - 2, dim=args.dim, seq=args.seq, batch_size=args.batch_size)
        return spec, spec
    if name.startswith("hf:"):
        from .hf import from_transformers
        try:
            cfg = json.loads(cfg_text) if cfg_text else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"--model-config is not valid JSON ({e.msg} at character {e.pos})") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"--model-config must be a JSON object of config fields, not {type(cfg).__name__}")
        spec = from_transformers(name[3:], config=cfg, seq=args.seq, batch_size=args.batch_size)
        return spec, spec
    if ":" in name:
        import importlib
        mod_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(mod_name), attr)
        except ImportError as e:
            raise ValueError(f"--model {name}: cannot import {mod_name!r} ({e})") from None
        except AttributeError:
            raise ValueError(f"--model {name}: module {mod_name!r} has no {attr!r}") from None
        if not callable(factory):
            raise ValueError(f"--model {name}: {attr!r} is not a function")
        spec = as_spec(factory)
        import pickle
        try:
            pickle.dumps(spec)
        except Exception:
            return spec, factory              # workers call the factory themselves
        return dataclasses.replace(spec, batch_size=args.batch_size), dataclasses.replace(
            spec, batch_size=args.batch_size)
    raise ValueError(f"--model {name!r}: use demo-gpt, hf:<model type> (llama, qwen2, qwen3, mistral, gpt2) "
                     "with --model-config JSON, or package.module:factory")
