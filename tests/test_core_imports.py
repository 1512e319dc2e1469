"""The core imports without torch or Jupyter (DESIGN.md: widgets and torch sit at the edges)."""
import pkgutil
import subprocess
import sys
from pathlib import Path

import flexpipe_ui

ROOT = Path(__file__).resolve().parent.parent
EDGE = ("flexpipe_ui.widgets", "flexpipe_ui.torch_interop", "flexpipe_ui.gantt", "flexpipe_ui.export")


def core_modules():
    names = []
    for m in pkgutil.walk_packages(flexpipe_ui.__path__, "flexpipe_ui."):
        if not m.name.startswith(EDGE):
            names.append(m.name)
    return names


def test_core_imports_without_torch_or_jupyter():
    mods = core_modules()
    code = ("import sys\n" + "".join(f"import {m}\n" for m in mods) +
            "bad = sorted(k for k in sys.modules if k.split('.')[0] in "
            "('torch', 'ipywidgets', 'plotly', 'anywidget', 'IPython', 'jupyterlab', 'ipykernel'))\n"
            "print(','.join(bad))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"core modules pulled in: {r.stdout.strip()}"
    assert "flexpipe_ui.sim" in mods and "flexpipe_ui.validate" in mods
