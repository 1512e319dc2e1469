"""Hugging Face causal LMs as pipeline models: ``from_transformers(model_or_config)`` → ``ModelSpec``.

The model is split into embedding / one layer per decoder block / final norm + LM head. What the
blocks need besides the hidden state is made inside each block's stage from the hidden state's
shape, so only the hidden state crosses ranks: position ids ``arange(seq)``, the causal additive
attention mask (sliding-window where the config says so), and for Llama-like models the rotary
``position_embeddings`` (each block stage holds a copy of ``model.model.rotary_emb``, which has no
parameters). GPT-2's learned positions ``wpe`` live in the embedding stage.

Built from a config (random weights, no download): attention is forced to ``eager`` (exact in
float64), dropout to 0 (``dropout=None`` keeps the config's), and ``tie_word_embeddings`` to False
(stages on different ranks cannot share the embedding matrix). transformers is optional (extra
``hf``); it is imported only here.
"""
from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from torch import nn

from .gpt import lm_loss
from .spec import ModelError, ModelSpec, _is_hf_model

__all__ = ["from_transformers", "hf_config", "CausalLMStages", "SUPPORTED", "as_model"]

LLAMA_LIKE = ("llama", "qwen2", "qwen3", "mistral")
SUPPORTED = LLAMA_LIKE + ("gpt2",)
_DROPOUT_FIELDS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                   "summary_first_dropout", "mlp_dropout")


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ModelError("Hugging Face models need transformers: pip install -e '.[hf]'") from None
    return transformers


def hf_config(model_type: str, overrides: dict | None = None, *, dropout: float | None = 0.0):
    """A transformers config of ``model_type`` ("llama", "gpt2", ...) with ``overrides``, ready for
    pipelining (eager attention, untied embeddings, dropout 0 unless ``dropout=None``)."""
    tf = _transformers()
    if model_type not in SUPPORTED:
        raise ModelError(f"hf:{model_type} is not supported (supported: {', '.join(SUPPORTED)}); "
                         "split other models with kernel_runtime.split_module")
    overrides = dict(overrides or {})
    vocab = overrides.get("vocab_size")
    if vocab is not None:                    # special tokens of the full vocabulary would not exist
        base = tf.AutoConfig.for_model(model_type)
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            tok = getattr(base, key, None)
            if key not in overrides and isinstance(tok, int) and tok >= vocab:
                overrides[key] = None
    try:
        cfg = tf.AutoConfig.for_model(model_type, **overrides)
    except (ValueError, TypeError) as e:
        raise ModelError(f"hf:{model_type} config {overrides}: {e}") from None
    return _prepare(cfg, dropout)


def _prepare(cfg, dropout: float | None):
    cfg = copy.deepcopy(cfg)
    cfg.tie_word_embeddings = False
    cfg.use_cache = False
    try:
        cfg._attn_implementation = "eager"
    except Exception:                       # older versions: a plain attribute
        cfg.__dict__["_attn_implementation"] = "eager"
    if dropout is not None:
        for f in _DROPOUT_FIELDS:
            if hasattr(cfg, f):
                setattr(cfg, f, float(dropout))
    return cfg


def _causal_mask(t: int, dtype, device, window: int | None = None) -> torch.Tensor:
    """(1, 1, t, t) additive mask: 0 where query i may see key j (j <= i, and i - j < window)."""
    i = torch.arange(t, device=device)
    ok = i[None, :] <= i[:, None]
    if window:
        ok &= i[:, None] - i[None, :] < window
    m = torch.zeros(t, t, dtype=dtype, device=device).masked_fill(~ok, torch.finfo(dtype).min)
    return m[None, None]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


class TokenEmbedding(nn.Module):
    """Llama-like embedding stage: token ids → hidden states."""

    def __init__(self, embed_tokens: nn.Module):
        super().__init__()
        self.embed_tokens = embed_tokens

    def forward(self, ids):
        return self.embed_tokens(ids)


class GPT2Embedding(nn.Module):
    """GPT-2 embedding stage: token + learned position embeddings, then dropout."""

    def __init__(self, wte: nn.Module, wpe: nn.Module, drop: nn.Module):
        super().__init__()
        self.wte, self.wpe, self.drop = wte, wpe, drop

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        return self.drop(self.wte(ids) + self.wpe(pos))


class DecoderBlock(nn.Module):
    """One decoder block as a stage: makes positions, mask (and rotary embeddings) from ``h``."""

    def __init__(self, layer: nn.Module, rotary: nn.Module | None, window: int | None,
                 positions: bool = False):
        super().__init__()
        self.layer = layer
        self.rotary = rotary
        self.window = window
        self.positions = positions

    def forward(self, h):
        t = h.shape[1]
        pos = torch.arange(t, device=h.device)[None]
        mask = _causal_mask(t, h.dtype, h.device, self.window)
        kw: dict[str, Any] = {"attention_mask": mask}
        if self.positions:
            kw["position_ids"] = pos
        if self.rotary is not None:
            kw["position_embeddings"] = self.rotary(h, pos)
        return _first(self.layer(h, **kw))


class LMHead(nn.Module):
    """Final norm + LM head: hidden states → logits."""

    def __init__(self, norm: nn.Module, lm_head: nn.Module):
        super().__init__()
        self.norm, self.lm_head = norm, lm_head

    def forward(self, h):
        return self.lm_head(self.norm(h))


class CausalLMStages(nn.Module):
    """A causal LM rearranged as ``embed``, ``blocks.0..N-1``, ``head`` (same parameters)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        cfg = model.config
        kind = cfg.model_type
        if kind == "gpt2":
            tr = model.transformer
            self.embed = GPT2Embedding(tr.wte, tr.wpe, tr.drop)
            blocks = [DecoderBlock(b, None, None) for b in tr.h]
            norm = tr.ln_f
        elif kind in LLAMA_LIKE:
            inner = model.model
            self.embed = TokenEmbedding(inner.embed_tokens)
            types = getattr(cfg, "layer_types", None) or ["full_attention"] * len(inner.layers)
            win = getattr(cfg, "sliding_window", None)
            rotary = getattr(inner, "rotary_emb", None)    # older versions: inside each attention
            blocks = [DecoderBlock(b, copy.deepcopy(rotary), win if types[i] == "sliding_attention" else None,
                                   positions=True) for i, b in enumerate(inner.layers)]
            norm = inner.norm
        else:
            raise ModelError(f"{type(model).__name__} (model_type {kind!r}) is not supported "
                             f"(supported: {', '.join(SUPPORTED)}); split it with split_module")
        self.blocks = nn.ModuleList(blocks)
        self.head = LMHead(norm, model.lm_head)
        self.model_type = kind

    def forward(self, ids):
        h = self.embed(ids)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def _build(cfg) -> CausalLMStages:
    tf = _transformers()
    return CausalLMStages(tf.AutoModelForCausalLM.from_config(cfg))


def _batch(vocab: int, seq: int, step: int, bs: int, gen: torch.Generator):
    base = torch.randint(0, vocab, (bs, seq + 1), generator=gen)
    return base[:, :-1].contiguous(), base[:, 1:].contiguous()


def _untie_check(model: nn.Module) -> None:
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    if emb is not None and out is not None and emb.weight is out.weight:
        raise ModelError(f"{type(model).__name__} ties its input and output embeddings, which pipeline "
                         "stages on different ranks cannot share: build it with "
                         "tie_word_embeddings=False (from_transformers(config) does that)")


def _no_dropout(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        for attr in ("attention_dropout", "attn_dropout_p"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)


def from_transformers(model_or_config: Any, *, config: dict | None = None, seq: int = 16,
                      batch_size: int = 8, dropout: float | None = 0.0) -> ModelSpec:
    """A ``ModelSpec`` for a Hugging Face causal LM (Llama, Qwen2/3, Mistral, GPT-2).

    ``model_or_config``: a ``PreTrainedModel`` (its weights are used; workers keep their own
    layers), a ``PretrainedConfig``, or a model type such as ``"llama"`` with ``config`` overrides
    (random weights from the spec's seed, nothing downloaded). Layers: embedding, each decoder
    block, final norm + LM head. ``seq``/``batch_size``: the synthetic next-token batches.
    """
    from .split import split_module
    tf = _transformers()
    if isinstance(model_or_config, str):
        cfg = hf_config(model_or_config, config, dropout=dropout)
        source: Any = functools.partial(_build, cfg)
    elif isinstance(model_or_config, tf.PretrainedConfig):
        if config:
            model_or_config = copy.deepcopy(model_or_config)
            for k, v in config.items():
                setattr(model_or_config, k, v)
        cfg = _prepare(model_or_config, dropout)
        source = functools.partial(_build, cfg)
    elif isinstance(model_or_config, tf.PreTrainedModel):
        _untie_check(model_or_config)
        model = copy.deepcopy(model_or_config)
        if dropout is not None:
            _no_dropout(model)
        model.config._attn_implementation = "eager"
        cfg = model.config
        source = CausalLMStages(model)
    else:
        raise ModelError(f"from_transformers takes a transformers model, config or model type, "
                         f"not {type(model_or_config).__name__}")
    n = cfg.num_hidden_layers if hasattr(cfg, "num_hidden_layers") else cfg.n_layer
    vocab = cfg.vocab_size
    max_pos = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if max_pos is not None and seq > max_pos:
        raise ModelError(f"seq={seq} is longer than the model's {max_pos} positions")
    layers = ["embed"] + [f"blocks.{i}" for i in range(n)] + ["head"]
    return split_module(source, layers, lm_loss, batch=functools.partial(_batch, vocab, seq),
                        batch_size=batch_size, name=f"hf:{cfg.model_type}",
                        meta={"hf_config": cfg.to_dict(), "seq": seq, "model_type": cfg.model_type})


def as_model(model: Any) -> Any:
    """``model`` with a Hugging Face ``PreTrainedModel`` turned into its ``ModelSpec`` (what
    ``launch``, ``profile`` and the LaunchPanel accept besides the forms ``models.as_spec`` reads)."""
    return from_transformers(model) if _is_hf_model(model) else model
