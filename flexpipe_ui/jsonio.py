"""Reading and writing the project's JSON files with clear errors and atomic writes.

``read_json`` is the one place for file-level checks: size (``limits.MAX_FILE_BYTES``, checked before
reading), UTF-8, JSON syntax, no NaN/Infinity, nesting depth (``MAX_JSON_DEPTH``) and integer
magnitude (``MAX_JSON_INT``). Every error names the file and, where it applies, the field.
``write_json`` refuses non-finite numbers, so no file we write holds ``NaN`` or ``Infinity``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .limits import MAX_FILE_BYTES, MAX_JSON_DEPTH, MAX_JSON_INT

__all__ = ["read_json", "write_json", "parse_json_text", "field_path"]


def field_path(parts) -> str:
    """``('order', '0', 3)`` → ``order.0[3]`` (how messages name a field)."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


_LEAVES = (str, float, bool, type(None))


def _check_tree(data: Any, where: str, error: type[ValueError]) -> None:
    """Depth and integer magnitude, iteratively (a recursive walk would itself overflow)."""
    stack = [(data, 0, ())]
    while stack:
        v, depth, path = stack.pop()
        if isinstance(v, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                raise error(f"{where}: field {field_path(path[:MAX_JSON_DEPTH])}...: nested deeper than "
                            f"{MAX_JSON_DEPTH} levels (the limit)")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            # strings and floats need no visit (a plan is a million action strings): skip them in C
            stack.extend((vv, depth + 1, path + (k,)) for k, vv in items if type(vv) not in _LEAVES)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_JSON_INT:
            raise error(f"{where}: field {field_path(path)}: integer with {len(str(abs(v)))} digits is "
                        f"beyond the limit of 2**53 = {MAX_JSON_INT}")


def parse_json_text(text: str, error: type[ValueError], where: str) -> Any:
    """Parse JSON text with the file-level checks (no NaN/Infinity, depth, integer size)."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise error(f"{where}: corrupt JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels (the limit)") from None
    except ValueError as e:   # NaN/Infinity, or an integer of more than 4300 digits
        msg = str(e)
        if "integer string conversion" in msg or "digits" in msg:
            msg = f"an integer beyond the limit of 2**53 = {MAX_JSON_INT}"
        raise error(f"{where}: {msg}") from None
    _check_tree(data, where, error)
    return data


def read_json(path: str | Path, error: type[ValueError], what: str) -> Any:
    """Parse ``path``; unreadable, oversized or corrupt files raise ``error`` naming the file and the place."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise error(f"{path}: {what} of {size / 2**20:.1f} MiB is larger than the limit of "
                        f"{MAX_FILE_BYTES / 2**20:.0f} MiB")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:   # grew, or a pipe/device
        raise error(f"{path}: {what} is larger than the limit of {MAX_FILE_BYTES / 2**20:.0f} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise error(f"{path}: not UTF-8 text (byte {e.start}, line {line}: {raw[e.start:e.start + 1]!r})") from None
    return parse_json_text(text, error, str(path))


def write_json(data: Any, path: str | Path) -> None:
    """Write atomically (temp file + rename), so a crash never leaves half a file; refuse NaN/Infinity."""
    path = Path(path)
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except ValueError:
        from .limits import check_finite_tree
        check_finite_tree(data, str(path))
        raise
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
