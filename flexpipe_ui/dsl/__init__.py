"""The schedule DSL: placements, rules, the actor-aware list scheduler, and hand orders.

A schedule is a ``Program(placement=..., rules=Rules(...))``; ``program.schedule(ranks=, microbatches=,
costs=)`` turns it into the IR's ``Schedule``; ``hand("r0: 0F0 ...")`` writes one by hand.
"""
from .hand import hand, hand_plan
from .phases import RankOrder, phased
from .placement import Placement, PlacementError, as_placement, explicit, looped, vshape, wave
from .program import Program, program_from_source, resolve_partition
from .rules import Rules, RulesError, eval_formula
from .scheduler import RulesDeadlock, RulesMemoryError, list_schedule

__all__ = ["Placement", "PlacementError", "looped", "vshape", "wave", "explicit", "as_placement",
           "Rules", "RulesError", "RulesDeadlock", "RulesMemoryError", "eval_formula", "Program", "program_from_source",
           "resolve_partition", "list_schedule", "hand", "hand_plan", "RankOrder", "phased"]
