#!/usr/bin/env bash
# Main job: set up .venv (first run only) and open JupyterLab on the quick-start notebook.
# Extra arguments go to jupyter lab, e.g.  bash scripts/lab.sh --no-browser --port 8899
source "$(dirname "$0")/_env.sh" dev
extra=()
[ "$(id -u)" = 0 ] && extra+=(--ServerApp.allow_root=True)
# jupyter/lab-settings/overrides.json: no news toast, the notebooks' python3 kernel starts without a dialog;
# jupyter/labextensions/flexpipe-lab: a Run pressed before the kernel is up waits for it (see jupyter/README.md)
exec jupyter lab --ServerApp.root_dir="$ROOT" --LabApp.default_url=/lab/tree/notebooks/01_quickstart.ipynb \
    --LabApp.app_settings_dir="$ROOT/jupyter/lab-settings" \
    --LabApp.extra_labextensions_path="$ROOT/jupyter/labextensions" \
    "${extra[@]}" "$@"
