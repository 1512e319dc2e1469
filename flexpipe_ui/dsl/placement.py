"""Placements: how S virtual stages (model order 0..S-1) map onto p ranks.

A placement is a tiny immutable value that turns ``ranks`` into the stage → rank tuple; its
``repr`` is its DSL source (``looped(2)``, ``vshape()``, ``wave(3)``, ``explicit([0, 1, 1, 0])``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Placement", "PlacementError", "looped", "vshape", "wave", "explicit", "as_placement"]


class PlacementError(ValueError):
    """A placement that cannot be used with the given ranks."""


def _check_ranks(ranks: int) -> int:
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise PlacementError(f"ranks must be an integer >= 1, got {ranks!r}")
    return ranks


@dataclass(frozen=True, slots=True)
class Placement:
    """Base class: ``placement(ranks)`` returns the stage → rank tuple."""

    def __call__(self, ranks: int) -> tuple[int, ...]:
        raise NotImplementedError

    def stages(self, ranks: int) -> int:
        """Number of virtual stages for ``ranks``."""
        return len(self(ranks))


@dataclass(frozen=True, slots=True, repr=False)
class _Looped(Placement):
    v: int

    def __call__(self, ranks: int) -> tuple[int, ...]:
        _check_ranks(ranks)
        return tuple(s % ranks for s in range(ranks * self.v))

    def __repr__(self) -> str:
        return f"looped({self.v})"


@dataclass(frozen=True, slots=True, repr=False)
class _Wave(Placement):
    k: int

    def __call__(self, ranks: int) -> tuple[int, ...]:
        _check_ranks(ranks)
        return tuple((s % ranks) if (s // ranks) % 2 == 0 else ranks - 1 - s % ranks
                     for s in range(ranks * self.k))

    def __repr__(self) -> str:
        return "vshape()" if self.k == 2 else f"wave({self.k})"


@dataclass(frozen=True, slots=True, repr=False)
class _Explicit(Placement):
    ranks_of: tuple[int, ...]

    def __call__(self, ranks: int) -> tuple[int, ...]:
        _check_ranks(ranks)
        for s, r in enumerate(self.ranks_of):
            if not 0 <= r < ranks:
                raise PlacementError(f"explicit placement puts stage {s} on rank {r}, but there are "
                                     f"{ranks} ranks (0..{ranks - 1})")
        empty = sorted(set(range(ranks)) - set(self.ranks_of))
        if empty:
            raise PlacementError(f"explicit placement {list(self.ranks_of)} leaves ranks {empty} without "
                                 f"a stage; give every one of the {ranks} ranks at least one stage")
        return self.ranks_of

    def __repr__(self) -> str:
        return f"explicit({list(self.ranks_of)})"


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlacementError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def looped(v: int = 1) -> Placement:
    """Interleaved: ``v`` stages per rank, stage s on rank s mod p (v=1 is the plain pipeline)."""
    return _Looped(_positive("looped(v): v", v))


def vshape() -> Placement:
    """Two stages per rank: stages 0..p-1 go down the ranks, p..2p-1 come back up (ZB-V, DualPipe-V)."""
    return _Wave(2)


def wave(k: int) -> Placement:
    """Hanayo-style zig-zag with ``k`` stages per rank: down, up, down, ... (``wave(2)`` is ``vshape()``)."""
    return _Wave(_positive("wave(k): k", k))


def explicit(ranks_of: list[int] | tuple[int, ...]) -> Placement:
    """Stage s on rank ``ranks_of[s]``."""
    try:
        t = tuple(int(r) for r in ranks_of)
    except (TypeError, ValueError):
        raise PlacementError(f"explicit placement needs a list of rank numbers, got {ranks_of!r}") from None
    if not t:
        raise PlacementError("explicit placement needs at least one stage")
    for s, r in enumerate(t):
        if r < 0:
            raise PlacementError(f"explicit placement puts stage {s} on rank {r}; ranks are >= 0")
    return _Explicit(t)


def as_placement(p) -> Placement:
    """Accept a Placement or a plain list/tuple of ranks."""
    if isinstance(p, Placement):
        return p
    if isinstance(p, (list, tuple)):
        return explicit(p)
    raise PlacementError(f"expected a placement (looped(v), vshape(), wave(k), explicit([...])), got {p!r}")
