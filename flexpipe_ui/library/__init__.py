"""The named-schedule library, each schedule written in the DSL (one file per family).

``NAMED`` maps CLI names to ``Family`` objects; ``build_named(name, problem, ...)`` returns a
``Plan`` whose ``meta`` carries the name and the DSL source and whose trace replays it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dsl.program import _shape, resolve_partition
from ..ir import Plan
from ..pysource import problem_source
from .base import Family, LibraryError
from . import (dualpipe_v, gpipe, interleaved, looped_bfs, one_f_one_b, v_1f1b, zb_h1, zb_h2,
               zb_v)

__all__ = ["NAMED", "Family", "LibraryError", "build_named", "list_named", "FromNamed"]

NAMED: dict[str, Family] = {f.name: f for f in (
    gpipe.FAMILY, one_f_one_b.FAMILY, interleaved.FAMILY, looped_bfs.FAMILY, zb_h1.FAMILY,
    zb_h2.FAMILY, zb_v.FAMILY, dualpipe_v.FAMILY, v_1f1b.FAMILY)}


def list_named() -> list[tuple[str, str]]:
    """(name, one-line description) of every library schedule."""
    return [(f.name, f.description) for f in NAMED.values()]


def build_named(name: str, problem=None, *, ranks: int | None = None, microbatches: int | None = None,
                chunks: int | None = None, partition="even") -> Plan:
    """The named schedule as a ``Plan``.

    Shape from the problem unless ``ranks``/``microbatches`` are given; ``chunks`` = stages per rank
    (each family's default if None); ``partition``: ``"even"`` (by layer count, earlier stages take
    the extra), ``"balanced"`` (``flexpipe_ui.partition.balanced_partition``) or explicit layer
    tuples. Without a problem the plan has no partition and uniform costs drive rule families.
    """
    fam = NAMED.get(name)
    if fam is None:
        raise LibraryError(f"unknown schedule {name!r}; known: {', '.join(NAMED)} (flexpipe plan --list)")
    v = fam.chunks_for(chunks)
    p, m = _shape(problem, ranks, microbatches)
    place = fam.placement(v)(p)
    if problem is not None and len(place) > problem.num_layers:
        raise LibraryError(f"{name} with {p} ranks and {v} chunk(s) needs {len(place)} stages but the "
                           f"problem has only {problem.num_layers} layers; use fewer ranks or chunks")
    part = resolve_partition(problem, place, partition)
    costs = problem.stage_costs(part) if problem is not None else None
    sched, source = fam.generate(p, m, v, costs)
    meta = {"name": name, "program": source, "chunks": v, "description": fam.description}
    if problem is not None:
        meta["partition"] = partition if isinstance(partition, str) else "explicit"
    if problem is not None and not isinstance(partition, str):
        partition = tuple(tuple(int(x) for x in q) for q in partition)
    return Plan(sched, part, meta, (FromNamed(name, problem, ranks, microbatches, chunks, partition),))


@dataclass(frozen=True)
class FromNamed:
    """Trace source step ``build_named(name, problem, ...)`` (see ``ir.replay``)."""

    name: str
    problem: Any = None
    ranks: int | None = None
    microbatches: int | None = None
    chunks: int | None = None
    partition: Any = "even"

    def build(self) -> Plan:
        return build_named(self.name, self.problem, ranks=self.ranks, microbatches=self.microbatches,
                           chunks=self.chunks, partition=self.partition)

    def python(self) -> tuple[list[str], str]:
        imps = ["from flexpipe_ui.library import build_named"]
        if self.problem is not None:
            imps.append("from flexpipe_ui.problem import Problem")
        return imps, (f"build_named({self.name!r}, {problem_source(self.problem)}, ranks={self.ranks!r}, "
                      f"microbatches={self.microbatches!r}, chunks={self.chunks!r}, "
                      f"partition={self.partition!r})")
