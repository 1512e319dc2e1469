"""Keyword-only config dataclasses (``SearchOptions``, the runtime's ``LaunchConfig``): one helper
that applies keyword overrides by field name, refusing unknown names with the list of fields."""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

__all__ = ["config_with_fields"]


def config_with_fields(cls: type, value: Any, overrides: dict, *, arg: str, caller: str, hint: str = "") -> Any:
    """``value`` (default ``cls()``) with ``overrides``, which must be ``cls``'s field names."""
    value = cls() if value is None else value
    if not isinstance(value, cls):
        raise TypeError(f"{arg} must be a {cls.__name__}, not {type(value).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(f"{caller}() got unknown keyword(s) {unknown}; {cls.__name__} fields are "
                        f"{', '.join(sorted(names))}{hint}")
    return replace(value, **overrides) if overrides else value
