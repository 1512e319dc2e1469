"""Workers pinned to their own share of the CPUs (``kernel_runtime.run.affinity``), the same rule in
the profiler and the launcher."""
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
