"""Megatron-Core pipeline layout strings (``--pipeline-model-parallel-layout``) ↔ partitions.

Grammar, as Megatron-Core's ``PipelineParallelLayerLayout.parse_str_to_list`` reads it: a string
of layer letters, ``E`` embedding, ``t`` transformer (decoder) layer, ``m`` MTP layer, ``L`` loss
(the final norm + output layer + loss); ``|`` separates stages (virtual stages in model order,
stage s on rank s mod ranks in Megatron); ``X*n`` repeats one letter (or ``|``) n times;
``(...)*n`` repeats a group n times (``(tt|)*3`` is ``tt|tt|tt|``); commas are cosmetic.
Example: ``"Et*3|(tt|)*29,m|L"``. We also accept nested groups; we write only what Megatron reads.

A flexpipe layer is one letter: for a model whose layers are embedding, N blocks and head, the
layer kinds are ``"E" + "t" * N + "L"``. Pure Python, no torch.
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["parse_layout", "format_layout", "layout_stages", "default_kinds", "LayoutError", "LETTERS"]

LETTERS = {"E": "embedding", "t": "transformer layer", "m": "MTP layer", "L": "loss (norm + head)"}


class LayoutError(ValueError):
    """A layout string that cannot be read, or a partition that cannot be written; names the position."""


def _err(text: str, pos: int, why: str) -> LayoutError:
    return LayoutError(f"layout {text!r}, position {pos}: {why}\n  {text}\n  {' ' * pos}^")


class _Reader:
    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def number(self) -> int:
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise _err(self.text, start, "expected a repeat count after '*'")
        n = int(self.text[start:self.pos])
        if n < 1:
            raise _err(self.text, start, f"repeat count must be >= 1, got {n}")
        return n

    def sequence(self, depth: int) -> list[tuple[str, int]]:
        """Letters and '|' (each with its position in the text) until ')' or the end."""
        out: list[tuple[str, int]] = []
        while True:
            c = self.peek()
            if c == "" or c == ")":
                if c == ")" and depth == 0:
                    raise _err(self.text, self.pos, "')' without a matching '('")
                return out
            if c in " ,":
                self.pos += 1
                continue
            start = self.pos
            if c == "(":
                self.pos += 1
                inner = self.sequence(depth + 1)
                if self.peek() != ")":
                    raise _err(self.text, start, "'(' is never closed")
                self.pos += 1
                if self.peek() != "*":
                    raise _err(self.text, self.pos, "a group '(...)' must be followed by '*n'")
                self.pos += 1
                if not inner:
                    raise _err(self.text, start, "empty group '()'")
                out += inner * self.number()
                continue
            if c == "*":
                raise _err(self.text, self.pos, "'*' must follow a letter, '|' or a group")
            if c not in LETTERS and c != "|":
                known = ", ".join(f"{k} ({v})" for k, v in LETTERS.items())
                raise _err(self.text, self.pos, f"unknown layer letter {c!r}; known: {known}, '|' between stages")
            self.pos += 1
            item = [(c, start)]
            if self.peek() == "*":
                self.pos += 1
                item = item * self.number()
            out += item


def layout_stages(text: str) -> list[str]:
    """The stages of a layout string, each as its expanded layer letters (a stage may be empty)."""
    if not isinstance(text, str) or not text.strip():
        raise LayoutError("a layout string needs at least one layer letter, e.g. 'Et*3|t*4|t*3L'")
    r = _Reader(text)
    seq = r.sequence(0)
    stages = [""]
    for c, _ in seq:
        if c == "|":
            stages.append("")
        else:
            stages[-1] += c
    return stages


def default_kinds(num_layers: int) -> str:
    """Layer letters of an embedding + blocks + head model: ``"E" + "t" * (n - 2) + "L"``."""
    if num_layers < 2:
        raise LayoutError(f"a Megatron layout needs an embedding and a loss layer: {num_layers} layer(s)")
    return "E" + "t" * (num_layers - 2) + "L"


def parse_layout(text: str, num_layers: int | None = None, *, ranks: int | None = None
                 ) -> tuple[tuple[int, ...], ...]:
    """The partition (layer indices per stage, model order) a layout string describes.

    ``num_layers``: check the string has that many layers. ``ranks``: check the stage count is a
    multiple of it (Megatron's rule). Raises ``LayoutError`` naming the position in the string.
    """
    stages = layout_stages(text)
    flat = "".join(stages)
    pos = _stage_positions(text)
    for s, st in enumerate(stages):
        if not st:
            raise _err(text, pos[s], f"stage {s} is empty: flexpipe stages hold at least one layer")
    if flat[0] != "E":
        raise _err(text, _first_letter(text), f"the first layer must be the embedding 'E', not {flat[0]!r}")
    if flat[-1] != "L":
        raise _err(text, len(text) - 1, f"the last layer must be the loss 'L', not {flat[-1]!r}")
    for c, what in (("E", "embedding"), ("L", "loss")):
        if flat.count(c) != 1:
            raise _err(text, _first_letter(text), f"the {what} {c!r} must appear exactly once, "
                       f"found {flat.count(c)}")
    if num_layers is not None and len(flat) != num_layers:
        raise LayoutError(f"layout {text!r} has {len(flat)} layers ({flat.count('t')} 't') but the model "
                          f"has {num_layers}: write E, {num_layers - 2} t and L, split by '|' (e.g. "
                          f"{format_layout([tuple(range(num_layers))])!r} as one stage)")
    if ranks is not None and len(stages) % ranks:
        raise LayoutError(f"layout {text!r} has {len(stages)} stages, not a multiple of {ranks} ranks")
    out, i = [], 0
    for st in stages:
        out.append(tuple(range(i, i + len(st))))
        i += len(st)
    return tuple(out)


def _stage_positions(text: str) -> list[int]:
    """Text position where each top-level stage starts (for error arrows): after each '|'."""
    out, depth = [0], 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == "|" and depth == 0:
            out.append(i + 1 if i + 1 < len(text) else i)
    return out + [len(text) - 1] * 1024       # stages made inside groups: point at the end


def _first_letter(text: str) -> int:
    return next((i for i, c in enumerate(text) if c in LETTERS), 0)


def _run(c: str, k: int) -> str:
    return c * k if k <= 2 else f"{c}*{k}"


def _stage_text(letters: str) -> str:
    out, i = [], 0
    while i < len(letters):
        j = i
        while j < len(letters) and letters[j] == letters[i]:
            j += 1
        out.append(_run(letters[i], j - i))
        i = j
    return "".join(out)


def format_layout(partition: Sequence[Sequence[int]], layer_kinds: str | Sequence[str] | None = None) -> str:
    """A Megatron layout string for ``partition`` (stages in model order, contiguous layers).

    ``layer_kinds``: one letter per layer (E, t, m, L); default embedding + blocks + loss.
    Repeated identical stages are written as ``(tt|)*k``; ``parse_layout`` reads the result back.
    """
    stages = [list(s) for s in partition]
    n = sum(len(s) for s in stages)
    kinds = "".join(layer_kinds) if layer_kinds is not None else default_kinds(n)
    if len(kinds) != n:
        raise LayoutError(f"{len(kinds)} layer kinds for a partition of {n} layers")
    bad = [c for c in kinds if c not in LETTERS]
    if bad:
        raise LayoutError(f"unknown layer kind {bad[0]!r}; known: {', '.join(LETTERS)}")
    flat = [i for s in stages for i in s]
    if flat != list(range(n)) or any(not s for s in stages):
        raise LayoutError("the partition's stages must be non-empty and cover layers 0..n-1 in order")
    tokens = [_stage_text("".join(kinds[i] for i in s)) + ("|" if k < len(stages) - 1 else "")
              for k, s in enumerate(stages)]
    out, k = [], 0
    while k < len(tokens):
        j = k
        while j < len(tokens) and tokens[j] == tokens[k]:
            j += 1
        reps = j - k
        if reps >= 2 and tokens[k].endswith("|"):
            out.append(f"({tokens[k]})*{reps}")
            if j < len(tokens):
                out.append(",")
        else:
            out.append(tokens[k] * reps)
        k = j
    return "".join(out)
