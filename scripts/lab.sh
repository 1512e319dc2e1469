#!/usr/bin/env bash
# Main job: set up .venv (first run only) and open JupyterLab on the quick-start notebook.
# Extra arguments go to jupyter lab, e.g.  bash scripts/lab.sh --no-browser --port 8899
source "$(dirname "$0")/_env.sh" dev
extra=()
[ "$(id -u)" = 0 ] && extra+=(--ServerApp.allow_root=True)
exec jupyter lab --ServerApp.root_dir="$ROOT" --LabApp.default_url=/lab/tree/notebooks/01_quickstart.ipynb \
    "${extra[@]}" "$@"
