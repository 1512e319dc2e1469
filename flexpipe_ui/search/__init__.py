"""The auto-scheduler: search partitions × DSL programs × library schedules with the simulator.

``auto(problem)`` returns the best ``Plan``; ``auto_search(problem)`` the ``SearchResult`` with the
top-K candidates and statistics; ``SearchOptions`` documents every option. See ``driver`` for the
phases, ``space`` for the candidates, ``bounds`` for the pruning bounds.
"""
from .driver import auto, auto_search
from .options import SearchOptions, default_budget
from .result import NoFeasiblePlan, Progress, SearchCancelled, SearchResult
from .bounds import (Bounds, fill_packing_makespan, ideal_makespan, packing_makespan, plan_bound,
                     time_bounds)

__all__ = ["auto", "auto_search", "SearchOptions", "SearchResult", "Progress", "NoFeasiblePlan", "SearchCancelled",
           "default_budget", "Bounds", "ideal_makespan", "packing_makespan", "fill_packing_makespan",
           "plan_bound", "time_bounds"]
