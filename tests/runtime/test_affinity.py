"""Workers pinned to their own share of the CPUs (``kernel_runtime.run.affinity``), the same rule in
the profiler and the launcher."""
import ast
import os
import subprocess
import sys

import pytest

from kernel_runtime.run.affinity import cpu_share


def test_cpu_share_splits_the_allowed_cpus_evenly():
    assert cpu_share(0, 2, [0, 1]) == [0] and cpu_share(1, 2, [1, 0]) == [1]
    assert cpu_share(1, 2, [0, 1, 2, 3, 4]) == [2, 3]          # 5 // 2: one CPU left free
    assert cpu_share(3, 4, list(range(16))) == [12, 13, 14, 15]
    assert cpu_share(0, 4, [0, 1]) is None                      # more workers than CPUs: no pinning
    assert cpu_share(2, 2, [0, 1]) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and 2 CPUs")
@pytest.mark.parametrize("env,expect_pinned", [("1", True), ("0", False)])
def test_pin_worker_in_a_process(env, expect_pinned):
    code = ("import os; from kernel_runtime.run.affinity import pin_worker; "
            "print(pin_worker(1, 2), sorted(os.sched_getaffinity(0)))")
    allowed = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "FLEXPIPE_PIN_CPUS": env}).stdout.split(maxsplit=1)
    if expect_pinned:
        mine = cpu_share(1, 2, allowed)
        assert out[0] != "None" and out[1].strip() == str(mine)
    else:
        assert out[0] == "None" and out[1].strip() == str(allowed)


_THREADS = """
import os, socket, threading
import torch
from kernel_runtime.run.startup import ProcessStart, start_process
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
start_process(ProcessStart(rank=0, world=1, local_rank=1, local_world=2, master_port=port,
                           spawned=False, threads=1))
torch.ones(256, 256) @ torch.ones(256, 256)
def cpus(task):
    with open(f"/proc/self/task/{task}/status") as f:
        return [l.split()[1] for l in f if l.startswith("Cpus_allowed_list")][0]
main = str(threading.get_native_id())
print(cpus(main), sorted({cpus(t) for t in os.listdir("/proc/self/task") if t != main}))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or not hasattr(os, "sched_setaffinity")
                    or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and 2 CPUs")
def test_start_process_pins_the_compute_thread_and_leaves_gloo_threads_free():
    allowed = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, check=True,
                         env={**os.environ, "FLEXPIPE_PIN_CPUS": "1"}, timeout=120).stdout.split(maxsplit=1)
    mine = cpu_share(1, 2, allowed)
    def as_list(cpus):                  # "1" or "2-3" or "0,2" → [..]
        out = []
        for part in cpus.split(","):
            a, _, b = part.partition("-")
            out += list(range(int(a), int(b or a) + 1))
        return out
    assert as_list(out[0]) == mine                                   # the compute: its share
    others = [as_list(c) for c in ast.literal_eval(out[1])]  # gloo's threads (started by the join)
    assert others and sorted(allowed) in others, (out, allowed)
