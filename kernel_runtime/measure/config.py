"""``ProfileConfig`` and ``TuneConfig``: the settings of ``profile`` and ``tune`` as one value each.

As with ``LaunchConfig``, the model (and the data, the progress callback, a starting problem) are
the functions' own arguments; everything else is a field here:
``profile(model, config=ProfileConfig(ranks=2, microbatches=8))`` or, equally,
``profile(model, ranks=2, microbatches=8)`` (keywords are field names; unknown ones are refused
with the list of fields). Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Mapping, Sequence

__all__ = ["ProfileConfig", "TuneConfig", "profile_config", "tune_config"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileConfig:
    """Settings of one ``profile`` (all optional; the defaults profile one rank on CPU)."""

    ranks: int = 1
    """Pipeline ranks of the runs to predict: profiling worker processes (see ``processes``), the
    problem's ``ranks``, and each worker's CPU share."""
    microbatches: int = 1
    """Microbatches per step: a profiled microbatch is the batch divided by this."""
    loss_fn: Callable | None = None
    """Loss of the last layer's output and the target, for a model given as layers (picklable)."""
    device: str = "cpu"
    """"cpu" (gloo between workers) or "cuda" (NCCL)."""
    dtype: Any = "float32"
    """"float32", "float64", "bfloat16", "float16" (or a torch dtype)."""
    repeats: int = 21
    """Timed repetitions per layer after the warm-up (the statistic is their median)."""
    warmup: int = 2
    """Untimed repetitions first."""
    max_repeats: int | None = None
    """While the machine's speed moved by more than ``tolerance`` over the repetitions timed so
    far, more are timed, up to this many (default 2 x ``repeats``); ``meta["noise"]`` says how many
    ran and how far the machine moved."""
    tolerance: float = 0.03
    """Relative drift of the machine's speed (between the halves of the repetitions) accepted."""
    optimizer: str = "sgd"
    """"sgd" or "adamw": the optimizer state counted in each layer's static memory ``mem``."""
    seed: int = 0
    """Seed of the layers' initialisation and the synthetic batch."""
    comm: float | None = None
    """Cross-rank latency to write instead of the measured one (ms)."""
    memory_limit: float | None = None
    """Per-rank memory cap to write into the problem (MiB)."""
    threads: int | None = None
    """CPU threads per worker (default, as ``launch``: the machine's cores divided by ``ranks``)."""
    processes: int | None = None
    """Profiling workers started at once (default ``ranks``); 0 times in this process (no
    communication measured, no executor probe)."""
    stages: Sequence[Sequence[int]] = ()
    """Extra layer groups timed whole (``meta["stages"]``, to check that layers add up)."""
    timeout: float = 900.0
    """Seconds the profiling workers may take before the profile fails naming the rank."""
    dp: int = 1
    """Data-parallel replicas to record (``dp``; each layer's gradient size is always measured)."""
    dp_bandwidth: float | None = None
    """All-reduce bandwidth (MiB/ms) to record with ``dp`` > 1 (default: the measured one)."""
    executor_probe: bool = True
    """With 2+ worker processes and synthetic batches, also run ``PROBE_PLAN`` for 2 steps and
    take the executor's time between actions and its message waits from it (a measurement of
    the executor itself, not a fit of the layers)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TuneConfig:
    """Settings of one ``tune``; ``ranks`` and ``microbatches`` are required."""

    ranks: int
    """Pipeline ranks of the plan."""
    microbatches: int
    """Microbatches per step."""
    rounds: int = 3
    """At most this many measured rounds."""
    steps: int = 4
    """Measured steps per plan and pass (after ``warmup``)."""
    warmup: int = 1
    """Steps of each plan run first and not measured."""
    passes: int = 2
    """Interleaved passes per round when several plans run."""
    devices: str = "cpu"
    """"cpu" (gloo) or "cuda" (NCCL), for the profile and every run."""
    dtype: Any = "float32"
    """dtype of the profile and every run ("float32", "float64", "bfloat16", "float16")."""
    time_limit: float = 10.0
    """Seconds of ``auto`` search per round."""
    repeats: int = 21
    """The profile's timed repetitions per layer."""
    threads: int | None = None
    """CPU threads per worker (default: the machine's cores divided by ``ranks``)."""
    memory_limit: float | None = None
    """Per-rank memory cap (MiB) for the profile and the search."""
    seed: int = 0
    """Seed of the search, the layers' initialisation and the synthetic data."""
    timeout: float = 120.0
    """``launch``'s timeout for every run (seconds)."""
    search: Mapping[str, Any] | None = None
    """More keywords for ``auto_search``."""
    shortlist_size: int = 3
    """Plans run per round (1: only the model's best)."""
    neighbours: int = 2
    """When more than one plan runs, that many of the best plan's ``partition_neighbours`` too."""


def profile_config(config: ProfileConfig | None, overrides: dict) -> ProfileConfig:
    """``config`` (default ``ProfileConfig()``) with keyword ``overrides`` (field names)."""
    from flexpipe_ui.configs import config_with_fields
    return config_with_fields(ProfileConfig, config, overrides, arg="config", caller="profile")


def tune_config(config: TuneConfig | None, overrides: dict) -> TuneConfig:
    """``config`` with keyword ``overrides``; without a config, the keywords make one (``ranks``
    and ``microbatches`` then required)."""
    names = {f.name for f in fields(TuneConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(f"tune() got unknown keyword(s) {unknown}; TuneConfig fields are "
                        f"{', '.join(sorted(names))}")
    if config is None:
        missing = [k for k in ("ranks", "microbatches") if k not in overrides]
        if missing:
            raise TypeError(f"tune() needs {' and '.join(missing)} (or config=TuneConfig(...))")
        return TuneConfig(**overrides)
    if not isinstance(config, TuneConfig):
        raise TypeError(f"config must be a TuneConfig, not {type(config).__name__}")
    return replace(config, **overrides) if overrides else config
