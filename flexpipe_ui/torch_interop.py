"""Interop with torch.distributed.pipelining: import its built-in schedules' orders, export CSV.

torch is imported lazily, inside the functions. ``OVERLAP_F_B`` pairs become their two
sub-actions (in torch's order, forward first); ``REDUCE_GRAD``, ``UNSHARD``/``RESHARD`` and
send/recv actions are dropped, since our communication is derived from the compute order.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

from .ir import Action, Schedule, parse_action

__all__ = ["TORCH_SCHEDULES", "torch_order", "import_torch_schedule", "export_torch_csv",
           "torch_action_text", "TorchInteropError"]

# CLI name → torch schedule class name, with whether it needs several stages per rank
TORCH_SCHEDULES = {
    "gpipe": ("ScheduleGPipe", 1),
    "1f1b": ("Schedule1F1B", 1),
    "interleaved-1f1b": ("ScheduleInterleaved1F1B", 2),
    "looped-bfs": ("ScheduleLoopedBFS", 2),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", 2),
    "zb-v": ("ScheduleZBVZeroBubble", 2),
    "dualpipe-v": ("ScheduleDualPipeV", 2),
}
_ALIASES = {cls.lower(): name for name, (cls, _) in TORCH_SCHEDULES.items()}
_ALIASES.update({cls.lower().removeprefix("schedule"): name for name, (cls, _) in TORCH_SCHEDULES.items()})
_ALIASES.update({"zbvzerobubble": "zb-v", "interleavedzerobubble": "interleaved-zb"})

_SKIP = {"REDUCE_GRAD", "UNSHARD", "RESHARD", "SEND_F", "RECV_F", "SEND_B", "RECV_B"}


class TorchInteropError(ValueError):
    """A torch schedule name, shape or CSV we cannot use."""


def _resolve(name: str) -> tuple[str, str, int]:
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in TORCH_SCHEDULES:
        raise TorchInteropError(f"unknown torch schedule {name!r}; known: {', '.join(TORCH_SCHEDULES)}")
    cls, v = TORCH_SCHEDULES[key]
    return key, cls, v


def torch_action_text(a) -> list[str]:
    """Our action texts for one torch ``_Action`` (two for OVERLAP_F_B, none for comm/reduce)."""
    if a is None:
        return []
    ctype = a.computation_type.value
    if ctype == "OVERLAP_F_B":
        return [t for sub in a.sub_actions for t in torch_action_text(sub)]
    if ctype in _SKIP:
        return []
    return [f"{a.stage_index}{ctype}{a.microbatch_index}"]


def torch_order(name: str, ranks: int, microbatches: int, chunks: int | None = None) -> list[list[str]]:
    """The per-rank compute order torch's schedule produces, as our action text (unvalidated)."""
    try:
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    except ImportError as e:  # pragma: no cover - torch is a dependency
        raise TorchInteropError(f"torch.distributed.pipelining is not available: {e}") from None
    key, cls, v_default = _resolve(name)
    v = chunks if chunks is not None else v_default
    if key in ("zb-v", "dualpipe-v") and v != 2:
        raise TorchInteropError(f"{key} needs exactly 2 stages per rank (got --chunks {v})")
    if key in ("gpipe", "1f1b") and v != 1:
        raise TorchInteropError(f"{key} runs one stage per rank (got --chunks {v})")
    try:
        ops = get_schedule_ops(cls.removeprefix("Schedule"), ranks, microbatches, num_stages_per_rank=v)
    except Exception as e:  # torch raises assorted errors for unsupported shapes
        raise TorchInteropError(f"torch's {cls} refused ranks={ranks}, microbatches={microbatches}, "
                                f"stages per rank={v}: {type(e).__name__}: {e}") from None
    return [[t for a in row for t in torch_action_text(a)] for row in ops]


def torch_placement(name: str, ranks: int, chunks: int | None = None) -> tuple[int, ...]:
    key, _, v_default = _resolve(name)
    v = chunks if chunks is not None else v_default
    if key in ("zb-v", "dualpipe-v"):
        return tuple(range(ranks)) + tuple(reversed(range(ranks)))
    return tuple(s % ranks for s in range(ranks * v))


def import_torch_schedule(name: str, ranks: int, microbatches: int,
                          chunks: int | None = None) -> Schedule:
    """torch's built-in schedule as a ``Schedule`` (not validated: call ``validate`` on it)."""
    rows = torch_order(name, ranks, microbatches, chunks)
    return Schedule.from_rows(rows, microbatches, torch_placement(name, ranks, chunks))


def export_torch_csv(schedule: Schedule, path: str | Path) -> None:
    """Write the CSV that torch's ``_PipelineScheduleRuntime._load_csv`` reads: one row per rank."""
    custom = sorted({a.kind.name for _, _, a in schedule.actions() if not a.kind.builtin})
    if custom:
        raise TorchInteropError(f"torch's runtime has no kinds {custom}; export only F/I/W/B schedules")
    with open(path, "w", newline="") as fh:
        wr = csv.writer(fh)
        for row in schedule.order:
            wr.writerow([str(a) for a in row])


def read_torch_csv(path: str | Path, microbatches: int | None = None,
                   placement: Sequence[int] | None = None) -> Schedule:
    rows = []
    with open(path, newline="") as fh:
        for r, line in enumerate(csv.reader(fh)):
            rows.append([parse_action(t, f"{path}, row {r}") for t in line if t.strip()])
    return Schedule.from_rows(rows, microbatches, placement)
