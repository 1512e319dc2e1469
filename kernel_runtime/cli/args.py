"""What ``flexpipe train``, ``profile`` and ``tune`` share: the model flags and their checks.

``--model``: ``demo-gpt``; ``hf:<model type>`` (llama, qwen2, qwen3, mistral, gpt2; random weights
from ``--model-config`` JSON, nothing downloaded); or ``package.module:factory``, a zero-argument
function returning a ``ModelSpec`` (e.g. from ``kernel_runtime.split_module``) or ``(layers, loss)``.
"""
from __future__ import annotations

from flexpipe_ui import cli_types as T

__all__ = ["DTYPES", "DEVICES", "DEMO_HEADS", "add_model_flags", "check_model_flags", "model"]

DTYPES = ("float32", "float64", "bfloat16", "float16")
"""What ``--dtype`` accepts (the workers' ``_dtype`` table)."""

DEVICES = ("cpu", "cuda")
"""What ``--devices`` accepts: gloo on CPU, NCCL on GPUs."""


def model(args):
    """(spec, what to send to the workers) for the ``--model`` flags (``models.model_arg``)."""
    from ..models.model_arg import resolve_model
    return resolve_model(args)


DEMO_HEADS = 4
"""demo-gpt's attention heads (``models.GPTConfig.heads``' default): ``--dim`` must be a multiple."""


def check_model_flags(args) -> None:
    """Refuse model flags the workers would refuse, before torch is even imported."""
    if args.model == "demo-gpt" and args.dim % DEMO_HEADS:
        raise ValueError(f"--dim {args.dim}: demo_gpt dim {args.dim} is not a multiple of heads {DEMO_HEADS} "
                         f"(attention splits the width evenly); use e.g. --dim "
                         f"{DEMO_HEADS * max(1, args.dim // DEMO_HEADS)}")


def add_model_flags(p) -> None:
    """The flags every runtime command takes: the model, its size, the data-parallel replicas,
    the devices and the dtype."""
    p.add_argument("--model", default="demo-gpt",
                   help="demo-gpt, hf:<model type> (llama, qwen2, qwen3, mistral, gpt2) or package.module:factory")
    p.add_argument("--model-config", metavar="JSON",
                   help="hf: models: config fields as JSON, e.g. '{\"hidden_size\": 64, \"num_hidden_layers\": 4}'")
    p.add_argument("--dp", type=T.integer(1, 1024), default=1,
                   help="data-parallel replicas of the pipeline (processes = ranks x dp)")
    p.add_argument("--layers", type=T.integer(3, 4096), default=None, help="demo-gpt layers (embedding + blocks + head)")
    p.add_argument("--dim", type=T.integer(1, 65536), default=64, help="demo-gpt width")
    p.add_argument("--seq", type=T.integer(1, 1 << 20), default=32, help="sequence length (demo-gpt, hf: models)")
    p.add_argument("--batch-size", type=T.integer(1, 1 << 20), default=16,
                   help="sequences per step (all replicas together)")
    p.add_argument("--devices", default="cpu", choices=DEVICES, help="cpu (gloo) or cuda (NCCL)")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
