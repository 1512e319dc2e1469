"""Python source text for plain data, used when a plan's trace prints itself as a script."""
from __future__ import annotations

import ast
import json
from typing import Any

__all__ = ["literal", "problem_source"]


def literal(x: Any) -> str:
    """A Python literal for plain data (JSON-like); anything else goes through JSON first."""
    text = repr(x)
    try:
        if ast.literal_eval(text) == x:
            return text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    return repr(json.loads(json.dumps(x, default=str)))


def problem_source(problem) -> str:
    """``Problem.from_dict({...})`` for a problem, ``None`` for none."""
    return "None" if problem is None else f"Problem.from_dict({literal(problem.to_dict())})"
