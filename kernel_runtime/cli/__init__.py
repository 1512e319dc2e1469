"""The runtime's commands: ``flexpipe train`` (``train``), ``flexpipe profile`` and ``flexpipe
tune`` (``measure``), and the torchrun worker (``torchrun``, run as ``python -m
kernel_runtime.worker``). Each module registers its subcommands; ``args`` holds the model flags
they share. ``flexpipe calibrate`` is torch-free and lives in the core (``flexpipe_ui.cli_calibrate``).
"""
from __future__ import annotations

from . import measure, train
from .train import schedule_plan

__all__ = ["register", "schedule_plan"]


def register(subparsers) -> None:
    """Add ``train``, ``profile`` and ``tune`` to the ``flexpipe`` command."""
    train.register(subparsers)
    measure.register(subparsers)
