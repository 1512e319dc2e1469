"""The Designer's autosave file: read it strictly, set a corrupt one aside, never lose an edit.

``flexpipe-designer-autosave/2`` holds the starting plan (``base``), every edit step (``steps``,
including those undone, so redo survives a restart), the position in them (``pos``) and the current
plan. A file that is not that structure (top-level list or null, bad steps, unknown step types,
missing or extra fields, positions out of range, too deep) raises ``AutosaveError``; the Designer
then renames it to ``<name>.corrupt-<time>.json`` (``set_aside``) and starts fresh with a message.

Two Designers with the same autosave path: the newer one claims the file (it writes a token into
``<path>.owner``); before each write a Designer checks the token and, when another claimed the file
since, moves to a fresh ``<stem>-2.autosave.json`` ... and says so (``Autosave.write`` returns the
message), so neither overwrites the other's edits. ``flexpipe-designer-autosave/1`` files (no
``pos``: nothing to redo) still load.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jsonio import read_json
from ..planfile import PlanFileError, plan_from_dict, plan_to_dict
from . import _edits

__all__ = ["AUTOSAVE_FORMAT", "AutosaveError", "Autosave", "SavedSession", "Restored", "read_autosave",
           "set_aside", "document", "restore", "STEP_TYPES"]

AUTOSAVE_FORMAT = "flexpipe-designer-autosave/2"
_READS = ("flexpipe-designer-autosave/1", AUTOSAVE_FORMAT)
_KEYS = {"format", "name", "saved", "base", "steps", "plan", "valid", "pos"}

STEP_TYPES = {"Move": {"rank", "src", "dst"}, "Swap": {"rank", "i", "j"}, "reset": set(), "load": {"plan"}}
"""Step type → its fields (``flexpipe_ui.edits``' Move/Swap, the Designer's reset and load)."""


class AutosaveError(ValueError):
    """An autosave file that is not a ``flexpipe-designer-autosave`` structure; says where."""


@dataclass
class SavedSession:
    """What an autosave file holds, checked: the starting plan, every step (as dicts) and the position."""

    base: Any
    steps: list = field(default_factory=list)
    pos: int = 0


def _edit_fields(kind: str) -> set | None:
    """Field names of an edit step class of ``flexpipe_ui.edits`` (None if there is no such step)."""
    if kind in ("reset", "load"):
        return STEP_TYPES[kind]
    try:
        from .. import edits
    except ImportError:
        return STEP_TYPES.get(kind)
    import dataclasses
    cls = getattr(edits, kind, None)
    if cls is None or not dataclasses.is_dataclass(cls) or kind.startswith("From"):
        return None
    return {f.name for f in dataclasses.fields(cls)}


def _check_step(i: int, sd: Any, where: str) -> None:
    if not isinstance(sd, dict):
        raise AutosaveError(f"{where}: steps[{i}] must be an object, got {type(sd).__name__}")
    kind = sd.get("type")
    fields = _edit_fields(kind) if isinstance(kind, str) else None
    if fields is None:
        raise AutosaveError(f"{where}: steps[{i}] has unknown type {str(kind)[:40]!r}")
    got = set(sd) - {"type"}
    if got != fields:
        missing, extra = sorted(fields - got), sorted(got - fields)
        raise AutosaveError(f"{where}: steps[{i}] ({kind}) " + "; ".join(
            x for x in (f"missing {missing}" if missing else "", f"unexpected {extra}" if extra else "") if x))
    for k in fields - {"plan"}:
        v = sd[k]
        if isinstance(v, dict) and set(v) == {"action"} and isinstance(v["action"], str):
            continue
        if isinstance(v, str) and len(v) <= 64:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise AutosaveError(f"{where}: steps[{i}].{k} must be an integer >= 0, an action or a short "
                                f"string, got {str(v)[:40]}")


def read_autosave(path: Path) -> SavedSession:
    """Read and check an autosave file; ``AutosaveError`` (naming the file and field) if it is not one."""
    where = str(path)
    doc = read_json(path, AutosaveError, "autosave file")
    if not isinstance(doc, dict):
        raise AutosaveError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") not in _READS:
        raise AutosaveError(f"{where}: format {str(doc.get('format'))[:60]!r}, expected {AUTOSAVE_FORMAT!r}")
    extra = sorted(set(doc) - _KEYS)
    if extra:
        raise AutosaveError(f"{where}: unexpected fields {extra[:5]}")
    for k in ("base", "steps"):
        if k not in doc:
            raise AutosaveError(f"{where}: missing field {k!r}")
    try:
        base = plan_from_dict(doc["base"], f"{where}: base")
    except PlanFileError as e:
        raise AutosaveError(str(e)) from None
    steps = doc["steps"]
    if not isinstance(steps, list):
        raise AutosaveError(f"{where}: 'steps' must be a list, got {type(steps).__name__}")
    for i, sd in enumerate(steps):
        _check_step(i, sd, where)
    pos = doc.get("pos", len(steps))
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= len(steps):
        raise AutosaveError(f"{where}: 'pos' must be an integer in 0..{len(steps)}, got {str(pos)[:40]}")
    return SavedSession(base, list(steps), pos)


def set_aside(path: Path) -> Path:
    """Rename a corrupt autosave to ``<stem>.corrupt-<time>.json`` beside it; return the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    stem = path.name[:-5] if path.name.endswith(".json") else path.name
    dest = path.with_name(f"{stem}.corrupt-{stamp}.json")
    n = 1
    while dest.exists():
        n += 1
        dest = path.with_name(f"{stem}.corrupt-{stamp}-{n}.json")
    path.replace(dest)
    return dest


def _sibling(path: Path, n: int) -> Path:
    name = path.name
    stem = name[: -len(".autosave.json")] if name.endswith(".autosave.json") else path.stem
    return path.with_name(f"{stem}-{n}.autosave.json")


class Autosave:
    """One Designer's claim on an autosave path (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.enabled = True
        self.token = f"{os.getpid()}:{uuid.uuid4().hex}"
        self.claim()

    @property
    def owner_path(self) -> Path:
        return self.path.with_name(self.path.name + ".owner")

    def claim(self) -> None:
        """Make this Designer the one that writes ``path`` (a newer Designer, or a restarted kernel, takes over)."""
        try:
            self.owner_path.write_text(self.token)
        except OSError:
            pass

    def owned(self) -> bool:
        try:
            return self.owner_path.read_text() == self.token
        except OSError:
            return True    # no owner file (deleted, read-only folder): nobody else claimed it

    def move_to_fresh(self) -> str:
        """Switch to the first ``<stem>-N.autosave.json`` that does not exist; return the message."""
        old = self.path
        n = 2
        while _sibling(old, n).exists() or _sibling(old, n).with_name(_sibling(old, n).name + ".owner").exists():
            n += 1
        self.path = _sibling(old, n)
        self.claim()
        return f"another Designer now autosaves to {old}; this one autosaves to {self.path} from now on"

    def write(self, doc: dict) -> str | None:
        """Write ``doc`` atomically to this Designer's file; a message if the file had to change."""
        if not self.enabled:
            return None
        note = None if self.owned() else self.move_to_fresh()
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, separators=(",", ":"), allow_nan=False))
        tmp.replace(self.path)
        return note


def document(name: str, base, records: list, pos: int, plan, valid: bool) -> dict:
    """The autosave document of a Designer's state. ``records`` are the step records of every
    history entry after the start, undone ones too (so redo survives a restart), ``pos`` the current one."""
    return {"format": AUTOSAVE_FORMAT, "name": name, "saved": time.time(), "base": plan_to_dict(base),
            "steps": list(records), "pos": pos, "plan": plan_to_dict(plan), "valid": valid}


@dataclass
class Restored:
    """What ``restore`` found: the replayed history (start first; empty: start fresh), the position in
    it and a message for the user."""

    history: list = field(default_factory=list)
    pos: int = 0
    note: str | None = None


def _replay(saved: SavedSession, base, where: str) -> list:
    history, plan = [base], base
    try:
        for sd in saved.steps:
            if sd["type"] == "reset":
                plan = base
            elif sd["type"] == "load":
                plan = plan_from_dict(sd["plan"], where)
            else:
                plan = plan.edit(_edits.step_from_dict(sd))
            history.append(plan)
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise AutosaveError(f"step {len(history) - 1} does not replay: {type(e).__name__}: {e}") from None
    return history


def restore(store: Autosave, base) -> Restored:
    """Replay ``store``'s file if it was made from ``base``; never raises: a corrupt file is set aside
    (``set_aside``), another starting plan's file is left alone and ``store`` moves to a fresh path."""
    p = store.path
    if not p.exists():
        return Restored()
    try:
        saved = read_autosave(p)
        if saved.base.schedule.order != base.schedule.order or \
                saved.base.schedule.placement != base.schedule.placement:
            note = store.move_to_fresh()
            return Restored(note=f"autosave {p} was made from another starting plan; not restored and kept "
                                 f"as it is ({note})")
        history = _replay(saved, base, str(p))
    except AutosaveError as e:
        try:
            kept = set_aside(p)
        except OSError as oe:
            store.enabled = False
            return Restored(note=f"autosave {p} is corrupt ({e}) and could not be moved aside ({oe}); "
                                 "autosave is off")
        return Restored(note=f"autosave {p} is corrupt ({e}); kept it as {kept} and started fresh")
    n, redo = saved.pos, len(history) - 1 - saved.pos
    return Restored(history, saved.pos,
                    f"restored {n} edit{'s' if n != 1 else ''} from {p} (undo steps back through them"
                    + (f"; {redo} to redo" if redo else "") + ")")
