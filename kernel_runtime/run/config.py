"""``LaunchConfig``: how ``launch`` runs a plan (steps, devices, optimizer, timing, handlers).

The model and the data are ``launch``'s own arguments; everything else is a field here, so a run's
settings are one documented value: ``launch(plan, model=m, config=LaunchConfig(steps=5))`` or,
equally, ``launch(plan, model=m, steps=5)`` (keywords are field names). Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["LaunchConfig", "config_with"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchConfig:
    """Settings of one ``launch`` (all optional; the defaults train one step on CPU/gloo)."""

    steps: int = 1
    """Training steps to run for each plan (>= 1)."""
    devices: Any = "cpu"
    """"cpu" (gloo), "cuda" (NCCL, one GPU per process; with fewer GPUs than processes they share
    GPUs over gloo, exact but not timing-representative) or an int (that many CUDA devices)."""
    loss_fn: Callable | None = None
    """Loss of the last stage's output and the target, for a model given as layers (picklable)."""
    lr: float = 0.01
    """Learning rate of the optimizer."""
    optimizer: str = "sgd"
    """"sgd" or "adamw"."""
    seed: int = 0
    """Seed of the layers' initialisation (per layer) and of the synthetic data."""
    timed: Any = False
    """True / milliseconds / a Problem: run the sleeping model instead (durations in ms)."""
    timeout: float = 60.0
    """Seconds a receive may wait for its peer, and one action may compute, before the run fails
    naming the stuck rank and action (the launcher's watchdog sees compute hangs, also on one rank)."""
    dtype: Any = "float32"
    """"float32" or "float64" (or a torch dtype)."""
    capture_grads: bool = False
    """Report every parameter's gradient with each step (for checks against a reference run)."""
    threads: int | None = None
    """torch threads per worker on CPU (default: the machine's cores divided by the ranks)."""
    pin_cpus: bool = True
    """On CPU, pin each worker to its own share of the cores (``kernel_runtime.run.affinity``), as the
    profiler does, when there are at least as many cores as workers; ``FLEXPIPE_PIN_CPUS=0`` turns
    it off everywhere."""
    dp: int = 1
    """Data-parallel replicas of the pipeline: plan ranks x dp processes; global rank d * ranks + r
    is pipeline rank r of replica d; stage gradients are all-reduced across replicas."""
    handlers: Mapping[str, Callable] = field(default_factory=dict)
    """Kind name → ``fn(executor, action, state)`` for user kinds, on top of (or replacing) the
    runtime's ``executor.DEFAULT_HANDLERS``; module-level functions or picklable callables."""


def config_with(config: LaunchConfig | None, **overrides) -> LaunchConfig:
    """``config`` (default ``LaunchConfig()``) with ``overrides``, which must be field names."""
    from flexpipe_ui.configs import config_with_fields
    return config_with_fields(LaunchConfig, config, overrides, arg="config", caller="launch")
