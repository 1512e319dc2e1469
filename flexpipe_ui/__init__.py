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


_LAZY = {
    # name -> submodule; loaded on first use so `import flexpipe_ui` stays cheap and torch-free
    "auto": "search", "auto_search": "search",
    "build_named": "library", "list_named": "library", "NAMED": "library",
    "Program": "dsl", "Rules": "dsl", "looped": "dsl", "vshape": "dsl", "wave": "dsl",
    "explicit": "dsl", "hand": "dsl", "hand_plan": "dsl",
    "Move": "edits", "Swap": "edits", "Insert": "edits", "Remove": "edits", "PinBefore": "edits",
    "apply_edit": "edits", "replay": "edits", "undo": "edits",
    "balanced_partition": "partition",
    "gantt_figure": "gantt",
    "save_html": "export", "save_image": "export", "chrome_trace": "export", "save_chrome_trace": "export",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'flexpipe_ui' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{mod}", __name__), name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
