#!/usr/bin/env bash
# GPU check for kernel_runtime (one machine, one or more GPUs; < 5 minutes on one GPU):
#   1. kernel_runtime.gpu_check: library schedules on 2 ranks on CUDA in float64 against the
#      single-process CPU reference (>= 2 GPUs: NCCL; one GPU: both processes share it, messages
#      staged through host memory over gloo), a Hugging Face Llama, pipeline x data parallel
#      (2 x 2), offload/reload streams, and a short timed demo-GPT run (CUDA-event timeline vs the
#      simulator on a GPU profile);
#   2. benchmarks/bench_truth.py --quick on CUDA for two families (with one GPU the ranks share it:
#      memory per process, CUDA's max_memory_allocated, is exact; timings are not a pipeline's);
#   3. the CPU/gloo correctness test (2 and 4 processes), as in CI.
# Workers are started by kernel_runtime.launch (torch.multiprocessing), not by this script.
# Last line: gpu_check=ok (exit 0) or gpu_check=fail (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export PYTHONUNBUFFERED=1
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible to torch: nothing to check"; echo "gpu_check=fail"; exit 1
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L || true
status=0
timeout 200 "$PY" -m kernel_runtime.gpu_check --require --steps 4 || status=1
timeout 200 "$PY" benchmarks/bench_truth.py --quick --device cuda --families gpt-heavy-head,llama-hf --seed 7 || status=1
timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/runtime/test_runtime_correctness.py || status=1
if [ "$status" = 0 ]; then echo "gpu_check=ok"; else echo "gpu_check=fail"; fi
exit "$status"
