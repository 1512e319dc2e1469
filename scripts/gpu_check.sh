#!/usr/bin/env bash
# GPU check for kernel_runtime (one machine, one or more GPUs; < 12 minutes on one GPU):
#   1. correctness: every library schedule on CUDA in float64 against the single-process CPU
#      reference (one GPU: one rank with several virtual stages; two or more: two NCCL ranks);
#   2. a short timed demo-GPT run on CUDA (CUDA-event timeline vs the simulator on a GPU profile);
#   3. the CPU/gloo correctness test (2 and 4 processes), as in CI;
#   4. benchmarks/bench_truth.py --quick (2 ranks: NCCL with two or more GPUs, else CPU gloo).
# Workers are started by kernel_runtime.launch (torch.multiprocessing), not by this script.
# Last line: gpu_check=ok (exit 0) or gpu_check=fail (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible to torch: nothing to check"; echo "gpu_check=fail"; exit 1
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L || true
status=0
timeout 240 "$PY" -m kernel_runtime.gpu_check --require --steps 5 || status=1
timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/runtime/test_runtime_correctness.py || status=1
# 4. truth: predicted vs measured step time and peak memory on real layers (NCCL when >= 2 GPUs)
timeout 420 "$PY" benchmarks/bench_truth.py --quick || status=1
if [ "$status" = 0 ]; then echo "gpu_check=ok"; else echo "gpu_check=fail"; fi
exit "$status"
