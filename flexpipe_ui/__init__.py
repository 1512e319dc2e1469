"""FlexPipe UI: design, simulate and auto-schedule pipeline-parallel training schedules.

The core (IR, validator, simulator, DSL, search) is pure Python + numpy; torch and Jupyter are only
imported by the parts that need them (``torch_interop``, ``widgets``, ``kernel_runtime``).
"""
from .ir import Action, Plan, Schedule, parse_action, ParseError
from .kinds import B, F, I, W, Dep, Kind, StageCost, get_kind, kinds, register_kind, unregister_kind
from .planfile import PlanFileError, load_plan, save_plan, plan_from_dict, plan_to_dict
from .problem import (Layer, Problem, ProblemError, StageCosts, even_partition, load_problem,
                      save_problem, uniform_costs)
from .sim import SimResult, costs_for, simulate
from .timeline import Metrics, Timeline, compute_metrics
from .validate import ScheduleError, render_grid, validate

__version__ = "0.1.0"


def __getattr__(name: str):
    # Heavier parts load on first use, so `import flexpipe_ui` stays cheap and torch/Jupyter-free.
    if name in ("auto", "auto_search"):
        from . import search
        return getattr(search, name)
    if name in ("build_named", "list_named"):
        from . import library
        return getattr(library, name)
    if name in ("gantt_figure",):
        from . import gantt
        return getattr(gantt, name)
    raise AttributeError(f"module 'flexpipe_ui' has no attribute {name!r}")
