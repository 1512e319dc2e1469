"""1F1B (PipeDream-flush / Megatron-LM's default) in the DSL.

Phases, as emergent from the rules: (1) warm-up: rank r runs p-r-1 forwards; (2) steady state:
one forward, one backward (backward first whenever one is ready); (3) cool-down: the remaining
backwards. The rule that makes it so is the in-flight limit ``p - r``: rank r holds at most p-r
activations. Same makespan as GPipe, peak activations min(p-r, m) on rank r.
"""
from ..dsl import Program, Rules, looped
from .base import Family

PROGRAM = Program(placement=looped(1), rules=Rules(priority=("B", "F"), in_flight="p - r"))

FAMILY = Family(name="1f1b", description="1F1B: warm-up p-r-1 forwards, then one forward / one backward",
                placement=lambda v: looped(1), allowed_chunks=(1,), program=lambda v: PROGRAM)
