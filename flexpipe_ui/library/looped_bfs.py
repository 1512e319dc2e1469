"""Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2022) in the DSL.

Phases: (1) forwards breadth-first: chunk 0 for every microbatch, then chunk 1, ...; (2) flush;
(3) backwards breadth-first from the last chunk back. ``looped(v)`` placement (default v=2), fused
backward; memory like GPipe (all microbatches in flight), bubble divided by v.
"""
from ..dsl import Program, Rules, looped
from .base import Family


def program(v: int) -> Program:
    return Program(placement=looped(v),
                   rules=Rules(priority=("F", "B"), traversal="breadth", forwards_first=True))


FAMILY = Family(name="looped-bfs", description="Looped BFS: each chunk for all microbatches, then the next",
                placement=looped, default_chunks=2, program=program)
