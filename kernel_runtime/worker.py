"""``python -m kernel_runtime.worker``: the worker's command-line entry point, for torchrun.

    torchrun --nproc-per-node 4 -m kernel_runtime.worker --plan plan.json --steps 10
    torchrun --nproc-per-node 8 -m kernel_runtime.worker --plan plan.json --dp 2   (4 ranks x 2)

The command is ``kernel_runtime.cli.torchrun``; the worker itself is ``kernel_runtime.run.worker``,
whose names are re-exported here (this module's old contents).
"""
from __future__ import annotations

import sys

from .cli.torchrun import main
from .run.worker import Job, Task, run_worker, worker_main

__all__ = ["Job", "Task", "worker_main", "run_worker", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
