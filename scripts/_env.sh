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
    log=.venv/pip-install.log
    echo "setting up .venv (log: $log)..."
    { "$VPY" -c "import torch" 2>/dev/null || "$VPY" -m pip install "torch==${FLEXPIPE_TORCH:-2.13.0}"; } >"$log" 2>&1 \
        || { tail -20 "$log"; echo "error: installing torch failed (see $log)"; exit 1; }
    "$VPY" -m pip install -e ".[$1]" >>"$log" 2>&1 || { tail -20 "$log"; echo "error: pip install failed (see $log)"; exit 1; }
    echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
