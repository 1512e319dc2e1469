"""Reading and writing the project's JSON files with clear errors and atomic writes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_json", "write_json"]


def read_json(path: str | Path, error: type[ValueError], what: str) -> Any:
    """Parse ``path``; unreadable or corrupt files raise ``error`` naming the file and the place."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: corrupt JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None


def write_json(data: Any, path: str | Path) -> None:
    """Write atomically (temp file + rename), so a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
