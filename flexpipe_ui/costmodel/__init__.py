"""The cost model: how long an action takes, what a cross-rank dependency costs, what memory an
action allocates and frees, the data-parallel all-reduce, and whether a peak fits a memory cap.

This is the one place these rules live (DESIGN.md, contract 4). The simulator (``sim``), the DSL's
list scheduler (``dsl.scheduler``), the exact CP-SAT polish (``search.exact``) and the search's
bounds (``search.bounds``) all take their timing and memory rules from here.

Default model (every optional field absent): an action lasts its kind's cost on its stage
(F: f, I: b, W: w, B: b + w); a dependency between two ranks adds ``comm``; a stage's activation
``act`` is held from its F's start to its W's (or B's) end. The optional problem fields switch on
extra terms, each neutral when absent:

- ``overhead`` (number or kind → time): added to every compute action's duration;
- layer ``bw``: a fused B lasts ``bw`` instead of b + w (so splitting costs b + w − bw more);
- ``bandwidth`` with layer ``out``: a cross-rank dependency costs ``comm + out / bandwidth``, where
  the message is the output of the producing stage's last layer (F→F), and the gradient of that
  same activation going back (I/B→I/B): ``out`` of the lower of the two stages;
- ``comm_cpu``: that fraction of each cross-rank message's transfer time (``out / bandwidth``)
  also lengthens the action that sends it and the action that receives it (CPU/gloo copies run
  on the ranks' own cores);
- layer ``act_w``: after I, ``act_w`` stays until W: ``act − act_w`` is freed at I's end (a
  negative amount, i.e. an allocation, when I leaves more behind than F did, e.g. the gradients
  a deferred W needs);
- ``data_input``: the model's first layer is fed data (token ids), so the first stage has no input
  gradient to send and, as torch's pipelining runtime and ours do, its I does nothing and its W
  runs the whole fused backward: stage 0's I costs 0 (no overhead), its W the fused ``bw``
  (+ B's overhead), and its activation is held whole until W (``fold_data_input``);
- ``dp``, ``dp_bandwidth``, layer ``grad``: with dp > 1 replicas each stage's gradient all-reduce
  costs ``2 (dp − 1) / dp · grad / dp_bandwidth``; it starts after the stage's last W/B, runs on its
  rank's own all-reduce lane (one at a time, in the order they become ready) and the step ends when
  the last one ends.

- layer ``temp`` (kind → MiB): while an action runs it holds that much more than its start and end
  levels (temporaries, intermediate gradients, a weight gradient before accumulation, the loss's
  softmax); a stage's is the largest over its layers, less what later layers' activations add
  where the action frees them as it goes (``problem._stage_temp``);
- ``recv_ahead`` (with ``out``): received messages are fresh buffers: a stage fed by another rank
  holds its input with its activation, and each rank holds ``recv_ahead`` posted receive buffers
  per inbound channel (``place_memory``, applied where the placement is known);
- ``sends_held`` (with ``out``): a sender keeps what it sent until its step ends (gloo's sends
  complete only when waited for): a gradient sent upstream from its I/B's end, an activation sent
  onward from where its stage's backward frees it (``send_events``);
- ``runtime_mem``: MiB each rank's process holds for the runtime's libraries (cuBLAS workspaces),
  static (``rank_static``);
- layer ``grad`` also times the gradients' memory: a stage's gradients (part of ``mem``) exist
  from the start of its first weight-gradient action of the step (``rank_static``, ``grad_events``);
  in that action a layer's fresh weight gradient *becomes* ``.grad``, so it rises by the larger of
  its workspace and its gradient, not by both (``first_grad_rise``, ``StageCosts.grad_first``).

- ``f_nograd``, ``act_sel``/``f_sel``, ``copy_bandwidth``, ``torch_liveness``: what recompute,
  selective recompute and offload cost and free, and torch's liveness (``spend``).

"Fits the cap" is ``fits``: one function, one tolerance (``FIT_TOL``).

One package, one concern per module: ``stage`` (the table, ``fits``), ``durations`` (time),
``memory``, ``spend`` (recompute, offload, liveness), ``bounds`` (the search's lower bounds' building blocks), ``dp`` (the all-reduce).
Everything is re-exported here; callers import from ``flexpipe_ui.costmodel``.
"""
from __future__ import annotations

from .bounds import (backward_time, first_backward, hold_area, hops_latency, layer_chain, layer_work,
                     least_hold, least_message, plain_times, return_latency, stage_work)
from .dp import allreduce_lane, allreduce_time
from .durations import (action_durations, duration_table, edge_latency, fold_data_input, hop_latency,
                        message_size, overhead_of, stage_switch, switch_charge, switch_time, transfer_time)
from .memory import (action_memory, first_grad_rise, grad_events, kind_memory_units, kind_temp, memory_effects,
                     place_memory, rank_static, send_events, stage_memory)
from .spend import copy_time, fold_liveness, nograd_forwards, selective_recompute
from .stage import FIT_TOL, StageCosts, fits, fits_mask, fused_backward

__all__ = ["StageCosts", "FIT_TOL", "fits", "fits_mask", "overhead_of", "duration_table", "edge_latency", "transfer_time",
           "action_durations", "switch_time", "switch_charge", "stage_switch", "message_size", "kind_memory_units", "memory_effects",
           "action_memory", "stage_memory", "backward_time", "fused_backward", "allreduce_time",
           "allreduce_lane", "stage_work", "first_backward", "hop_latency", "hops_latency",
           "layer_work", "layer_chain", "hold_area", "return_latency", "least_message",
           "least_hold", "plain_times", "fold_data_input", "kind_temp", "place_memory", "rank_static",
           "grad_events", "send_events", "first_grad_rise", "fold_liveness", "selective_recompute", "nograd_forwards", "copy_time"]
