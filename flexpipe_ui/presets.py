"""Realistic problem presets: transformer layer costs from FLOP and byte counts.

Times are milliseconds, memory MiB, on a device described by ``Device`` (default: an H100-class GPU
at a realistic 40% of its 989 bf16 TFLOP/s). A decoder block costs, for a microbatch of ``b``
sequences of ``s`` tokens with ``P`` linear parameters: forward ``2bsP`` + causal attention
``2bs²h``; input-gradient (I) ``2bsP`` + ``4bs²h`` (attention backward has no weights, so it all
lands in I); weight-gradient (W) ``2bsP``. Static memory is 16 bytes per trainable parameter
(bf16 weight and grad, fp32 master and two Adam moments), 2 per frozen one. Activations are the
bf16 tensors the backward reads (flash attention: no s² term), ``2(6h + 2·kv + 3·ffn)`` bytes per
token per block. Cross-rank latency is one activation (``bsh`` bf16) over the link.

Every preset caps memory at the device's 80 GiB unless told otherwise (``memory_limit=None``): a
schedule that needs more would not run. Presets are functions (torchtitan style); ``PRESETS`` maps
the benchmark's scenario names to them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .problem import Layer, Problem

__all__ = ["Device", "Transformer", "decoder_block", "embedding", "lm_head", "vision_block",
           "uniform_gpt", "gpt", "gpt_heavy_head", "vision_llm", "tight_memory", "few_microbatches",
           "high_comm", "lora_finetune", "PRESETS", "preset", "list_presets", "PresetError"]

_MIB = 1024.0 ** 2


class PresetError(ValueError):
    """Unknown preset or impossible preset arguments."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """The accelerator and link that turn FLOPs and bytes into milliseconds."""

    tflops: float = 989.0 * 0.4
    """Achieved dense bf16 TFLOP/s (peak × MFU)."""
    link_gbps: float = 50.0
    """Point-to-point bandwidth between pipeline ranks, GB/s (400 Gb/s InfiniBand)."""
    link_latency_ms: float = 0.01
    """Fixed per-message latency."""
    memory_mib: float = 80.0 * 1024
    """Device memory, MiB (the presets' default ``memory_limit``)."""
    host_gbps: float | None = 50.0
    """Device-host copy bandwidth for offload, GB/s, each way (pinned memory over PCIe 5.0 x16,
    64 GB/s nominal); None: no offload. Becomes the problem's ``copy_bandwidth``."""

    def ms(self, flops: float) -> float:
        return flops / (self.tflops * 1e12) * 1e3

    def comm_ms(self, nbytes: float) -> float:
        return self.link_latency_ms + nbytes / (self.link_gbps * 1e9) * 1e3

    @property
    def copy_bandwidth(self) -> float | None:
        """``host_gbps`` in MiB per ms (the problem's unit)."""
        return None if self.host_gbps is None else self.host_gbps * 1e9 / _MIB / 1e3


@dataclass(frozen=True, slots=True, kw_only=True)
class Transformer:
    """A decoder-only transformer (defaults: Llama-3-8B, 4k context, one sequence per microbatch)."""

    blocks: int = 32
    """Number of decoder blocks."""
    hidden: int = 4096
    """Model width h."""
    ffn: int = 14336
    """SwiGLU inner width."""
    kv_dim: int = 1024
    """Width of K and V (grouped-query attention)."""
    vocab: int = 128256
    """Vocabulary size (embedding and LM head)."""
    seq: int = 4096
    """Tokens per sequence."""
    micro_batch: int = 1
    """Sequences per microbatch."""

    @property
    def block_params(self) -> float:
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_dim + 3 * h * self.ffn

    @property
    def tokens(self) -> float:
        return float(self.seq * self.micro_batch)


def decoder_block(t: Transformer, dev: Device, *, trainable: bool = True, lora_rank: int = 0,
                  name: str = "block") -> Layer:
    """One decoder block's Layer (see the module docstring for the formulas)."""
    n, P = t.tokens, t.block_params
    attn = 2.0 * t.micro_batch * t.seq * t.seq * t.hidden  # causal QK^T and PV, forward
    lin = 2.0 * n * P
    f = lin + attn
    i = lin + 2 * attn
    if lora_rank:
        # adapters on the 7 projections: W is the adapters' gradients only
        adapters = lora_rank * (2 * (t.hidden + t.hidden) + 2 * (t.hidden + t.kv_dim) + 3 * (t.hidden + t.ffn))
        w = 2.0 * n * adapters
        mem = (2 * P + 16 * adapters) / _MIB
    else:
        w = lin if trainable else 0.0
        mem = (16 if trainable else 2) * P / _MIB
    act = 2.0 * n * (6 * t.hidden + 2 * t.kv_dim + 3 * t.ffn) / _MIB
    return Layer(f=dev.ms(f), b=dev.ms(i), w=dev.ms(w), act=act, mem=mem, name=name)


def embedding(t: Transformer, dev: Device, *, trainable: bool = True) -> Layer:
    """Token embedding: a memory-bound gather (≈ its bytes at 2 TB/s), no input gradient."""
    nbytes = 2.0 * t.tokens * t.hidden
    gather_ms = nbytes / 2e12 * 1e3
    params = t.vocab * t.hidden
    return Layer(f=gather_ms, b=0.0, w=gather_ms * 2 if trainable else 0.0,
                 act=0.0, mem=(16 if trainable else 2) * params / _MIB, name="embedding")


def lm_head(t: Transformer, dev: Device, *, trainable: bool = True) -> Layer:
    """Final norm + vocabulary projection + cross-entropy; holds fp32 logits for the backward."""
    n = t.tokens
    mm = 2.0 * n * t.hidden * t.vocab
    act = (2.0 * n * t.hidden + 4.0 * n * t.vocab) / _MIB
    return Layer(f=dev.ms(mm), b=dev.ms(mm), w=dev.ms(mm) if trainable else 0.0, act=act,
                 mem=(16 if trainable else 2) * t.hidden * t.vocab / _MIB, name="lm_head")


def vision_block(*, hidden: int, ffn: int, tokens: int, images: int, dev: Device,
                 trainable: bool = True) -> Layer:
    """A ViT encoder block (full, non-causal attention) over ``images`` images of ``tokens`` patches."""
    n = float(tokens * images)
    P = 4 * hidden * hidden + 2 * hidden * ffn
    attn = 4.0 * images * tokens * tokens * hidden
    lin = 2.0 * n * P
    act = 2.0 * n * (6 * hidden + 2 * ffn) / _MIB
    return Layer(f=dev.ms(lin + attn), b=dev.ms(lin + 2 * attn), w=dev.ms(lin) if trainable else 0.0,
                 act=act, mem=(16 if trainable else 2) * P / _MIB, name="vit_block")


def _comm(t: Transformer, dev: Device) -> float:
    return dev.comm_ms(2.0 * t.tokens * t.hidden)


def _problem(ranks: int, microbatches: int, layers, comm: float, memory_limit, name: str,
             dev: Device | None = None, **meta) -> Problem:
    if memory_limit == "device":
        memory_limit = (dev or Device()).memory_mib
    if ranks < 1 or microbatches < 1:
        raise PresetError(f"ranks and microbatches must be >= 1, got {ranks}, {microbatches}")
    return Problem(ranks=ranks, microbatches=microbatches, layers=tuple(layers), comm=comm,
                   memory_limit=memory_limit, copy_bandwidth=(dev or Device()).copy_bandwidth,
                   meta={"preset": name, "units": {"time": "ms", "memory": "MiB"}, **meta})


def uniform_gpt(ranks: int = 8, microbatches: int = 32, *, layers: int = 32,
                model: Transformer | None = None, device: Device | None = None,
                memory_limit: float | None | str = "device") -> Problem:
    """``layers`` identical decoder blocks (no embedding or head): the textbook case."""
    t, dev = model or Transformer(), device or Device()
    blk = decoder_block(t, dev)
    return _problem(ranks, microbatches, [blk] * layers, _comm(t, dev), memory_limit, "uniform_gpt", dev)


def gpt(ranks: int = 8, microbatches: int = 32, *, model: Transformer | None = None,
        device: Device | None = None, memory_limit: float | None | str = "device", name: str = "gpt") -> Problem:
    """Embedding + ``blocks`` decoder blocks + LM head (``blocks + 2`` layers)."""
    t, dev = model or Transformer(), device or Device()
    layers = [embedding(t, dev)] + [decoder_block(t, dev, name=f"block{k}") for k in range(t.blocks)]
    layers.append(lm_head(t, dev))
    return _problem(ranks, microbatches, layers, _comm(t, dev), memory_limit, name, dev,
                    model={"blocks": t.blocks, "hidden": t.hidden, "vocab": t.vocab, "seq": t.seq})


def gpt_heavy_head(ranks: int = 8, microbatches: int = 32, *, blocks: int = 32, vocab: int = 256000,
                   device: Device | None = None, memory_limit: float | None | str = "device") -> Problem:
    """A GPT whose LM head (256k vocabulary, Gemma-like) costs about five decoder blocks."""
    return gpt(ranks, microbatches, model=Transformer(blocks=blocks, vocab=vocab), device=device,
               memory_limit=memory_limit, name="gpt_heavy_head")


def vision_llm(ranks: int = 8, microbatches: int = 32, *, vit_blocks: int = 40, images: int = 8,
               llm: Transformer | None = None, device: Device | None = None,
               memory_limit: float | None | str = "device") -> Problem:
    """A ViT-g-like encoder (40 blocks, width 1408, 1025 patches, 8 images) + projector + Llama LLM."""
    dev = device or Device()
    t = llm or Transformer(blocks=32, vocab=128256)
    vit = [vision_block(hidden=1408, ffn=6144, tokens=1025, images=images, dev=dev) for _ in range(vit_blocks)]
    n_img = float(images * 1025)
    proj_flops = 2.0 * n_img * (1408 * t.hidden + t.hidden * t.hidden)
    proj = Layer(f=dev.ms(proj_flops), b=dev.ms(proj_flops), w=dev.ms(proj_flops),
                 act=2.0 * n_img * (1408 + t.hidden) / _MIB,
                 mem=16.0 * (1408 * t.hidden + t.hidden * t.hidden) / _MIB, name="projector")
    layers = vit + [proj, embedding(t, dev)] + [decoder_block(t, dev, name=f"block{k}") for k in range(t.blocks)]
    layers.append(lm_head(t, dev))
    return _problem(ranks, microbatches, layers, _comm(t, dev), memory_limit, "vision_llm", dev)


def tight_memory(ranks: int = 8, microbatches: int = 32, *, fraction: float = 0.7,
                 base: Problem | None = None) -> Problem:
    """``base`` (default ``gpt``) with a cap at ``fraction`` of 1F1B's estimated peak on an even split.

    The estimate is static memory + ``min(p - r, m)`` microbatches of activations on rank r, so
    1F1B on an even split does not fit; recompute, fewer in-flight microbatches or a memory-aware
    split must.
    """
    from .partition import default_inflight, rank_memory
    from .problem import even_partition
    p = base or gpt(ranks, microbatches)
    part = even_partition(p.num_layers, p.ranks)
    est = rank_memory(p, part, tuple(range(p.ranks)), default_inflight(p.ranks, p.ranks, p.microbatches))
    limit = fraction * max(est)
    static = max(rank_memory(p, part, tuple(range(p.ranks)), 0.0))
    limit = max(limit, static * 1.05)
    return replace(p, memory_limit=round(limit, 1), meta={**p.meta, "preset": "tight_memory",
                                                          "memory_fraction": fraction})


def few_microbatches(ranks: int = 8, microbatches: int | None = None) -> Problem:
    """``gpt`` with as many microbatches as ranks (a small global batch: bubbles dominate)."""
    p = gpt(ranks, microbatches or ranks)
    return replace(p, meta={**p.meta, "preset": "few_microbatches"})


def high_comm(ranks: int = 8, microbatches: int = 32, *, link_gbps: float = 12.5) -> Problem:
    """``gpt`` over a slow link (default 12.5 GB/s, 100 GbE): latency ≈ half a block's forward."""
    p = gpt(ranks, microbatches, device=Device(link_gbps=link_gbps))
    return replace(p, meta={**p.meta, "preset": "high_comm", "link_gbps": link_gbps})


def lora_finetune(ranks: int = 8, microbatches: int = 32, *, lora_rank: int = 16) -> Problem:
    """LoRA fine-tuning of a frozen Llama: W (adapter gradients) is ~1% of I."""
    t, dev = Transformer(), Device()
    layers = [embedding(t, dev, trainable=False)]
    layers += [decoder_block(t, dev, lora_rank=lora_rank, name=f"block{k}") for k in range(t.blocks)]
    layers.append(lm_head(t, dev, trainable=False))
    return _problem(ranks, microbatches, layers, _comm(t, dev), "device", "lora_finetune", dev,
                    lora_rank=lora_rank)


PRESETS: dict[str, Callable[..., Problem]] = {
    "uniform_gpt": uniform_gpt,
    "gpt": gpt,
    "gpt_heavy_head": gpt_heavy_head,
    "vision_llm": vision_llm,
    "tight_memory": tight_memory,
    "few_microbatches": few_microbatches,
    "high_comm": high_comm,
    "lora_finetune": lora_finetune,
}


def preset(name: str, **kwargs) -> Problem:
    """The named preset's problem; keyword arguments go to its function."""
    try:
        fn = PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None
    return fn(**kwargs)


def list_presets() -> list[tuple[str, str]]:
    """(name, first docstring line) of every preset."""
    return [(n, (fn.__doc__ or "").strip().splitlines()[0]) for n, fn in PRESETS.items()]
