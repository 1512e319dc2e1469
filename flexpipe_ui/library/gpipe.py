"""GPipe (Huang et al., 2019) in the DSL.

Phases: (1) every rank runs all its forwards (microbatches in order); (2) flush: then all its
backwards. One stage per rank, fused backward. Makespan (m+p-1)(F+B) with uniform costs; every
rank holds all m activations at its peak.
"""
from ..dsl import Program, Rules, looped
from .base import Family

PROGRAM = Program(placement=looped(1), rules=Rules(priority=("F", "B"), forwards_first=True))

FAMILY = Family(name="gpipe", description="GPipe: all forwards, then all backwards (flush)",
                placement=lambda v: looped(1), allowed_chunks=(1,), program=lambda v: PROGRAM)
