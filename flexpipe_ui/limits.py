"""Limits on what the product accepts: file sizes, nesting, magnitudes and shapes.

Every loader and CLI flag checks against these constants, so bad or hostile input is refused in
milliseconds with a message that names the limit, instead of exhausting memory or time later.
They are generous for real pipelines (a few hundred ranks and layers, thousands of microbatches)
and small enough that the largest accepted input is simulated in seconds.
"""
from __future__ import annotations

import math

__all__ = ["MAX_FILE_BYTES", "MAX_JSON_DEPTH", "MAX_JSON_INT", "MAX_RANKS", "MAX_MICROBATCHES",
           "MAX_STAGES", "MAX_LAYERS", "MAX_ACTIONS", "MAX_INDEX_DIGITS", "MAX_NUMBER",
           "MAX_AUTO_LAYERS", "MAX_AUTO_MICROBATCHES",
           "MAX_DSL_CHARS", "MAX_DSL_DEPTH", "MAX_TIMEOUT", "LimitError", "check_finite_tree",
           "check_plan_size"]

MAX_FILE_BYTES = 16 * 1024 * 1024
"""Largest plan, problem or autosave file read (16 MiB; a 1M-action plan as we write it is ~12 MB).
A plan of a million duplicate actions is refused in ~3 s on a busy 2-core machine."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays/objects in a JSON file (our formats need 4; ``meta`` gets the rest)."""
MAX_JSON_INT = 2 ** 53
"""Largest integer magnitude in a JSON file (beyond it floats lose integers; 400-digit numbers are refused)."""
MAX_RANKS = 1024
"""Pipeline ranks in a plan, problem or flag."""
MAX_MICROBATCHES = 65536
"""Microbatches per step in a plan, problem or flag."""
MAX_STAGES = 16384
"""Virtual stages in a plan (ranks x stages per rank)."""
MAX_LAYERS = 16384
"""Layers in a problem."""
MAX_ACTIONS = 1_000_000
"""Actions in a plan (all ranks together); also bounds what a named schedule or program may generate."""
MAX_INDEX_DIGITS = 9
"""Digits of a stage or microbatch number in action text (``0F123456789``), so they fit int64."""
MAX_NUMBER = 1e12
"""Largest cost, memory or latency in a problem (sums of millions of them stay finite)."""
MAX_AUTO_LAYERS = 512
"""Layers the auto-scheduler takes on: its balanced-partition DP grows as layers² x stages (1,024
layers took ~50 s before the first candidate); real models profile into a few hundred blocks.
Beyond it, the search's own count budgets (``search.driver.default_budget``) bound the rest."""
MAX_AUTO_MICROBATCHES = 1024
"""Microbatches the auto-scheduler takes on (every candidate simulates ~3 x stages x microbatches;
4,096 took ~45 s on a busy 2-core machine)."""
MAX_DSL_CHARS = 10_000
"""Characters of a DSL program text (``--program``)."""
MAX_DSL_DEPTH = 16
"""Nesting of calls and literals in a DSL program text."""
MAX_TIMEOUT = 7 * 24 * 3600.0
"""Largest runtime timeout in seconds (a week)."""


class LimitError(ValueError):
    """A value or file beyond one of the limits above; the message names the limit."""


def check_plan_size(stages: int, microbatches: int, what: str = "the plan") -> None:
    """Refuse, before generating it, a schedule of more than ``MAX_ACTIONS`` actions
    (up to 3 per stage and microbatch: F, I, W)."""
    n = 3 * stages * microbatches
    if n > MAX_ACTIONS:
        raise LimitError(f"{what} would have up to {n} actions ({stages} stages x {microbatches} microbatches "
                         f"x 3), beyond the limit of {MAX_ACTIONS} (flexpipe_ui.limits.MAX_ACTIONS); "
                         "use fewer microbatches or ranks")


def check_finite_tree(x, where: str = "output") -> None:
    """Raise ``LimitError`` if a JSON-ready tree holds a NaN or infinite float (say where)."""
    stack = [(x, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                raise LimitError(f"{at}: {v} is not a finite number")
        elif isinstance(v, dict):
            stack.extend((vv, f"{at}.{k}") for k, vv in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((vv, f"{at}[{i}]") for i, vv in enumerate(v))
