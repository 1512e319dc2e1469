"""Fault injection for the runtime tests: a handler registry whose handlers fail at one rank and
action (raise, die, run out of memory or hang) and otherwise run the runtime's own handler.

``launch(plan, handlers=failing_handlers(rank=1, action="1B2", how="kill"))``: the handlers are
picklable (``FailAt`` is a module-level class), so spawned workers receive them with the job.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

HOW = ("raise", "kill", "oom", "hang")


@dataclass(frozen=True)
class FailAt:
    """Runs ``inner`` except for ``action`` (text, e.g. "1B2") on ``rank``, where it fails ``how``."""

    rank: int
    action: str
    how: str
    inner: Callable

    def __call__(self, ex, a, st):
        if ex.rank == self.rank and str(a) == self.action:
            if self.how == "raise":
                raise RuntimeError(f"injected failure in {a}")
            if self.how == "kill":
                os.kill(os.getpid(), 9)
            if self.how == "oom":
                import torch
                torch.empty(1 << 50, dtype=torch.uint8)    # 1 PiB: the allocator refuses
            if self.how == "hang":
                time.sleep(3600)
        return self.inner(ex, a, st)


def failing_handlers(rank: int, action: str, how: str = "raise") -> dict[str, Callable]:
    """F, I, W and B handlers that fail at (``rank``, ``action``)."""
    if how not in HOW:
        raise ValueError(f"how must be one of {HOW}, got {how!r}")
    from kernel_runtime.run.executor import DEFAULT_HANDLERS
    return {k: FailAt(rank, action, how, DEFAULT_HANDLERS[k]) for k in ("F", "I", "W", "B")}
