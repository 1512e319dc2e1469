"""argparse ``type=`` validators shared by every ``flexpipe`` subcommand.

A flag is checked when the command line is parsed, before any file is read or process started, so
``--comm nan`` or ``--ranks 0`` ends at once with exit 2 and one line naming the flag, the value
and the accepted range (argparse prefixes the flag's name).
"""
from __future__ import annotations

import argparse
import math

from .limits import MAX_MICROBATCHES, MAX_RANKS, MAX_TIMEOUT

__all__ = ["number", "integer", "ranks", "microbatches", "seconds", "positive", "nonnegative"]


def number(*, minimum: float | None = None, maximum: float | None = None, strict: bool = False):
    """A finite float in [minimum, maximum] (``strict``: strictly above minimum)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if minimum is not None and (v < minimum or (strict and v <= minimum)):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {minimum:g}, got {text}")
        if maximum is not None and v > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum:g}, got {text}")
        return v
    parse.__name__ = "number"   # argparse names the type in some messages
    return parse


def integer(minimum: int | None = None, maximum: int | None = None, limit: str = ""):
    """An integer in [minimum, maximum]; ``limit`` names the constant behind the maximum."""
    def parse(text: str) -> int:
        t = text.strip()
        if len(t.lstrip("+-")) > 18:
            raise argparse.ArgumentTypeError(f"integer {t[:20]}... is too large")
        try:
            v = int(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if minimum is not None and v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}{limit}, got {v}")
        return v
    parse.__name__ = "integer"
    return parse


ranks = integer(1, MAX_RANKS, " (flexpipe_ui.limits.MAX_RANKS)")
"""Pipeline ranks: 1..MAX_RANKS."""
microbatches = integer(1, MAX_MICROBATCHES, " (flexpipe_ui.limits.MAX_MICROBATCHES)")
"""Microbatches: 1..MAX_MICROBATCHES."""
positive = number(minimum=0.0, strict=True)
"""A finite number > 0."""
nonnegative = number(minimum=0.0)
"""A finite number >= 0."""
seconds = number(minimum=0.0, maximum=MAX_TIMEOUT, strict=True)
"""A finite duration in seconds, > 0 and at most a week."""
