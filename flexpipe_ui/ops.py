"""Two example new operations, each a registered kind of a few lines: recompute and offload/reload.

A kind states its dependencies (``after``/``before``), its cost and its memory effect; the
validator, the simulator, the DSL's list scheduler and the Gantt read the same spec, so nothing
else changes. Kinds with ``before`` run just in time: the scheduler starts them only when the
action they precede waits for nothing else. Nothing is registered on import: call
``register_recompute()`` / ``register_offload()`` (re-running either replaces the kind); loading a
plan file that names them registers them (``register_missing``, called by ``planfile``).

- ``R`` recompute: F keeps no activation (``adjust`` makes F free it at its end); ``R`` re-runs the
  forward (cost F) right before the stage's backward and holds the activation until W/B frees it.
- ``OFF`` offload / ``LOAD`` reload, on a copy stream (no compute time): ``OFF`` moves the
  activation to the host after F and frees it at its end; ``LOAD`` brings it back, issued where
  it stands in the rank's list (as the runtime issues it), and the backward waits for it: the
  transfer cost is the stage's activation over the problem's ``copy_bandwidth``, else
  ``seconds_per_unit`` × its size (``costmodel.copy_time``).
"""
from __future__ import annotations

from .costmodel.spend import copy_time
from .kinds import Dep, Kind, kinds, register_kind

__all__ = ["register_recompute", "register_offload", "register_all", "register_known",
           "register_missing", "RECOMPUTE", "OFFLOAD", "RELOAD"]

RECOMPUTE, OFFLOAD, RELOAD = "R", "OFF", "LOAD"


def register_recompute() -> Kind:
    """Register ``R``: use it with ``Program(..., extra={"R": "all"})`` or per stage."""
    return register_kind(Kind(
        "R", "other", lambda c: c.f,                      # costs one more forward
        after=(Dep(frozenset({"F"}), 0),),                # after its forward...
        before=frozenset({"I", "B"}),                     # ...and before its backward
        mem_start=1.0,                                    # re-creates the activation (W/B frees it)
        adjust={"F": (0.0, -1.0)},                        # F frees its activation at its end
        color="#ff7f0e", description="recompute the forward before the backward"))


def register_offload(seconds_per_unit: float = 0.25) -> tuple[Kind, Kind]:
    """Register ``OFF``/``LOAD``: transfers take ``act / copy_bandwidth`` (the problem's), else
    ``seconds_per_unit`` per unit of activation. Both run on the rank's copy lane in list order,
    each issued where it stands in the rank's list (after the compute action before it ends, as
    the runtime's side stream waits for the compute stream): ``LOAD`` placed just before its
    backward starts when the rank's previous action ends; placed a few actions earlier it hides
    the copy under them (``memory_fit`` places it so), holding the activation that much longer."""
    if not seconds_per_unit >= 0:
        raise ValueError(f"seconds_per_unit must be >= 0, got {seconds_per_unit!r}")
    off = register_kind(Kind(
        "OFF", "other", lambda c: copy_time(c.act, c.copy_bandwidth, seconds_per_unit), stream="copy",
        after=(Dep(frozenset({"F"}), 0),), mem_end=-1.0,  # frees device memory when the copy ends
        color="#8c564b", description="offload the activation to host memory"))
    load = register_kind(Kind(
        "LOAD", "other", lambda c: copy_time(c.act, c.copy_bandwidth, seconds_per_unit), stream="copy",
        after=(Dep(frozenset({"OFF"}), 0),),
        before=frozenset({"I", "B"}),                     # the backward waits for the copy
        mem_start=1.0,                                    # back on the device from its start
        color="#e377c2", description="reload the offloaded activation before the backward"))
    return off, load


def register_all() -> None:
    register_recompute()
    register_offload()


def register_known(names) -> list[str]:
    """Register the example kinds among ``names`` (e.g. a plan file's kinds before loading it);
    returns the ones registered. Unknown names are left for the caller to report."""
    names = set(names)
    done = []
    if RECOMPUTE in names:
        register_recompute()
        done.append(RECOMPUTE)
    if names & {OFFLOAD, RELOAD}:
        register_offload()
        done += [OFFLOAD, RELOAD]
    return done


def register_missing(names) -> list[str]:
    """Register the example kinds among ``names`` that are not registered yet (a user's own ``R``
    stays); called where plans are loaded, so a plan file naming them loads in a fresh process."""
    return register_known(set(names) - set(kinds()))
