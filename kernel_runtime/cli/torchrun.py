"""``python -m kernel_runtime.worker``: one worker of a run under torchrun's rendezvous.

    torchrun --nproc-per-node 4 -m kernel_runtime.worker --plan plan.json --steps 10
    torchrun --nproc-per-node 8 -m kernel_runtime.worker --plan plan.json --dp 2   (4 ranks x 2)

RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous come from torchrun; the worker is
``kernel_runtime.run.worker`` (started as ``startup.start_process`` starts every worker).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..run.worker import Job, Task, run_worker

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``torchrun ... -m kernel_runtime.worker --plan P [--dp D]``: RANK/WORLD_SIZE come from torchrun.

    With ``--dp D`` torchrun starts plan ranks x D processes; global rank ``d * ranks + r`` is
    pipeline rank r of replica d (``kernel_runtime.run.dp``). ``--model`` takes what ``flexpipe train``
    takes (demo-gpt, hf:<type> with --model-config, package.module:factory).
    """
    p = argparse.ArgumentParser(prog="kernel_runtime.worker")
    p.add_argument("--plan", required=True)
    p.add_argument("--model", default="demo-gpt")
    p.add_argument("--model-config", default=None, help="hf: models: config fields as JSON")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas (world = plan ranks x dp)")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--out", default=None, help="directory for per-rank JSON step reports")
    args = p.parse_args(argv)
    import types

    import torch
    from flexpipe_ui.planfile import load_plan, plan_to_dict

    from ..models.model_arg import resolve_model
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    plan = load_plan(args.plan)
    if args.dp < 1 or plan.ranks * args.dp != world:
        print(f"plan has {plan.ranks} ranks x --dp {args.dp} replicas = {plan.ranks * max(args.dp, 1)} "
              f"processes but torchrun started {world}", file=sys.stderr)
        return 2
    ns = types.SimpleNamespace(model=args.model, model_config=args.model_config, dim=64, seq=args.seq,
                               batch_size=args.batch_size, layers_given=False,
                               layers=plan.num_layers or max(6, plan.schedule.num_stages))
    try:
        _, model = resolve_model(ns)
    except ValueError as e:
        print(f"kernel_runtime.worker: {e}", file=sys.stderr)
        return 2
    n_gpu = torch.cuda.device_count() if device == "cuda" else 0
    # one GPU per process on this machine: NCCL; fewer: processes share GPUs, gloo through host memory
    backend = "nccl" if device == "cuda" and int(os.environ.get("LOCAL_WORLD_SIZE", world)) <= n_gpu else "gloo"
    job = Job(tasks=[Task(plan_to_dict(plan), args.steps)], world=world, model=model,
              device=device, backend=backend, dtype=args.dtype,
              lr=args.lr, seed=args.seed, timeout=args.timeout, dp=args.dp, loopback=False,
              spawned=False)
    out = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        out = open(os.path.join(args.out, f"rank{rank}.jsonl"), "w")

    def report(msg):
        if msg["type"] == "step":
            if msg["loss"] is not None:
                loss = msg["loss"] if math.isfinite(msg["loss"]) else None   # JSON has no NaN
                print(json.dumps({"step": msg["step"], "loss": loss, "replica": msg.get("replica", 0),
                                  "step_time": (msg["t_end"] - msg["t0"]) / 1e9}), flush=True)
            if out is not None:
                out.write(json.dumps({k: v for k, v in msg.items() if k != "grads"}) + "\n")
                out.flush()

    run_worker(rank, job, report, local_rank=local)
    import torch.distributed as dist
    dist.destroy_process_group()
    return 0


