# Sourced by lab.sh and test.sh: create/update .venv and install the project into it.
# torch is installed first as the CPU build pinned here (2.13.0 lies on local disk on our machines;
# a bare "torch" requirement can pull a multi-GB CUDA build). The package itself declares torch>=2.4.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
VPY="$ROOT/.venv/bin/python"
stamp=".venv/.flexpipe-installed"
want="$(cat pyproject.toml | sha1sum | cut -c1-12)-$1"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    "$VPY" -c "import torch" 2>/dev/null || "$VPY" -m pip install -q "torch==${FLEXPIPE_TORCH:-2.13.0}"
    "$VPY" -m pip install -q -e ".[$1]"
    echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
