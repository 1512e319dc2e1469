"""A watcher for long pure computations: the list scheduler, the simulator's sweeps and the
partitioner call it now and then, so a caller can stop them (a Stop button) or end a candidate
that has proved it cannot win (the auto-scheduler's early abandonment).

``with watching(fn): ...`` installs ``fn`` for the block (per thread and task: a context variable,
reset on exit); the computations call ``tick(bound)`` every few thousand steps, where ``bound`` is
a lower bound on the makespan of what they are building, or None when they have none. ``fn`` ends
the computation by raising (``Abandoned`` carries the bound that proved it). Without a watcher a
tick costs one context-variable read.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator

__all__ = ["Abandoned", "watching", "tick", "active"]

_WATCHER: ContextVar[Callable[[float | None], None] | None] = ContextVar("flexpipe_watcher", default=None)


class Abandoned(Exception):
    """Raised by a watcher: what was being built cannot be faster than ``bound``."""

    def __init__(self, bound: float):
        super().__init__(f"abandoned: makespan >= {bound:.6g}")
        self.bound = bound


@contextlib.contextmanager
def watching(fn: Callable[[float | None], None] | None) -> Iterator[None]:
    """Call ``fn(bound)`` at the computations' ticks inside the block (None: no watcher)."""
    token = _WATCHER.set(fn)
    try:
        yield
    finally:
        _WATCHER.reset(token)


def active() -> Callable[[float | None], None] | None:
    """The installed watcher (fetch it once before a hot loop), or None."""
    return _WATCHER.get()


def tick(bound: float | None = None) -> None:
    """Report progress (and a lower bound, if known) to the watcher, which may raise."""
    fn = _WATCHER.get()
    if fn is not None:
        fn(bound)
