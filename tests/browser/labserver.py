"""Start a throw-away JupyterLab for a real-browser check (used by the browser tests and
``benchmarks/bench_ui.py``): free localhost port, its own token, fresh config/settings/workspace
dirs (no old tabs reopen), the shipped ``jupyter/lab-settings``, the repository on the kernel's PYTHONPATH."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "jupyter" / "lab-settings"
EXTENSIONS = ROOT / "jupyter" / "labextensions"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage"]


def find_chromium() -> str | None:
    """Debian's Chromium (or ``$BROWSER_PATH``); never a downloaded one."""
    for cand in (os.environ.get("BROWSER_PATH"), shutil.which("chromium"), shutil.which("chromium-browser"),
                 "/usr/bin/chromium"):
        if cand and Path(cand).exists():
            return cand
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_lab(nbdir: Path, base: Path, timeout: float = 90.0):
    """Yield ``{"url", "token", "dir", "log"}`` of a JupyterLab serving ``nbdir``; stop it after."""
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
               PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
               JUPYTER_CONFIG_DIR=str(base / "config"), JUPYTER_RUNTIME_DIR=str(base / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(base / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(base / "ws"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={token}", "--ServerApp.allow_root=True", f"--ServerApp.root_dir={nbdir}",
           f"--LabApp.user_settings_dir={base / 'settings'}", f"--LabApp.workspaces_dir={base / 'ws'}",
           "--LabApp.expose_app_in_browser=True",
           # the product's shipped settings and lab extension (scripts/lab.sh uses the same)
           f"--LabApp.app_settings_dir={SETTINGS}", f"--LabApp.extra_labextensions_path={EXTENSIONS}"]
    logpath = base / "jupyter.log"
    with open(logpath, "w") as log:
        proc = subprocess.Popen(cmd, cwd=nbdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + timeout
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"jupyter lab did not start; log:\n{logpath.read_text()[-3000:]}")
                time.sleep(0.5)
            yield {"url": url, "token": token, "dir": nbdir, "log": logpath}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


_KERNEL_STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const dialog = document.querySelector('.jp-Dialog');
  return {kernel: k ? k.status : null, connection: k ? k.connectionStatus : null,
          dialog: dialog ? dialog.innerText.slice(0, 200) : null};
}"""


def wait_kernel_idle(page, timeout_s: float = 180.0) -> dict:
    """Wait until the current notebook's kernel is connected and idle; fail at once on a dialog.

    Why: JupyterLab's Run All on a notebook whose session has no kernel yet starts one itself, racing
    the notebook's own start (the older kernel is shut down mid-import, the cells are dropped) or asks
    with a "Select Kernel" dialog. On a cold machine the notebook shows seconds before its kernel.
    """
    deadline = time.time() + timeout_s
    state: dict = {}
    while time.time() < deadline:
        state = page.evaluate(_KERNEL_STATE)
        if state["dialog"]:
            raise AssertionError(f"a dialog opened while the notebook's kernel started: {state['dialog']!r}")
        if state["kernel"] == "idle" and state["connection"] == "connected":
            return state
        time.sleep(0.25)
    raise AssertionError(f"the notebook's kernel was not idle after {timeout_s:.0f} s: {state}")


def open_notebook(page, lab: dict, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab (fresh workspace) and wait for its kernel to be idle."""
    page.goto(f"{lab['url']}/lab/tree/{notebook}?token={lab['token']}&reset")
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
    page.locator(".jp-Notebook").first.wait_for(state="visible", timeout=120_000)
    wait_kernel_idle(page)


def open_and_run(page, lab: dict, notebook: str, wait_selector: str, timeout_ms: int = 240_000) -> None:
    """Open ``notebook``, wait for its kernel, run all cells, wait for ``wait_selector`` to be attached."""
    open_notebook(page, lab, notebook)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.locator(wait_selector).first.wait_for(state="attached", timeout=timeout_ms)


def drag_bar(page, name: str, to_x: float, steps: int = 10) -> None:
    """Press on the editor bar ``name`` and release at page x ``to_x`` (same row), in steps."""
    loc = page.locator(f".fp-editor rect.fp-bar[data-name='{name}']").first
    loc.wait_for(state="attached")
    box = loc.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    for k in range(1, steps + 1):
        page.mouse.move(x + (to_x - x) * k / steps, y)
        time.sleep(0.02)
    page.mouse.up()


_PAGE = """<!doctype html><html><body style="margin:0;width:1300px">
<style>{css}</style><div id="host" style="width:1280px"></div>
<script type="module">
{js}
const listeners = {{}};
const state = {{data: {{}}, highlight: [], selected: "", drop: {{}}, command: {{}}, rendered: -1,
               frontend_latency_ms: -1}};
window.__fp_sets = [];
const model = {{
  get: (k) => state[k],
  set: (k, v) => {{ state[k] = v; window.__fp_sets.push([k, v]);
                    (listeners["change:" + k] || []).forEach((f) => f()); }},
  on: (ev, f) => {{ (listeners[ev] = listeners[ev] || []).push(f); }},
  save_changes: () => {{}},
}};
window.__fp_model = model;
window.__fp_render({{model, el: document.getElementById("host")}});
window.__fp_draw = async (data) => {{
  const t0 = performance.now();
  model.set("data", data);
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}};
// as the kernel's message arrives: JSON text parsed, set, drawn, painted (ms of main thread)
window.__fp_reply = async (text) => {{
  const t0 = performance.now();
  model.set("data", JSON.parse(text));
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}};
// as the widget's comm delivers it: the JSON state with binary buffers put back at their paths
// (ipywidgets' _put_buffers), buffers given in base64 (decoded before the clock starts)
window.__fp_reply_wire = async (text, paths, b64) => {{
  const bufs = b64.map((s) => {{ const bin = atob(s); const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i); return new DataView(u.buffer); }});
  const t0 = performance.now();
  const state = JSON.parse(text);
  paths.forEach((p, k) => {{ let o = state; for (const key of p.slice(0, -1)) o = o[key]; o[p[p.length - 1]] = bufs[k]; }});
  model.set("data", state.data);
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}};
window.__fp_ready = true;
</script></body></html>"""


def editor_test_page(path: Path) -> Path:
    """A plain page running the editor's ES module on a fake anywidget model (no Jupyter):
    ``window.__fp_draw(data)`` draws and returns ms, ``window.__fp_reply(json_text)`` too after
    parsing it, ``window.__fp_reply_wire(json_text, paths, base64_buffers)`` after putting the
    binary buffers back as the widget's comm does (``wire_message``); ``window.__fp_sets``
    records ``model.set``."""
    from flexpipe_ui.widgets.gantt_editor import _CSS
    js = (ROOT / "flexpipe_ui" / "widgets" / "gantt_editor.js").read_text()
    js = js.replace("export default { render };", "window.__fp_render = render;")
    path.write_text(_PAGE.format(css=_CSS, js=js))
    return path


def wire_message(widget, names=("data",)) -> tuple[str, list, list]:
    """(JSON text, buffer paths, base64 buffers) of a widget's state as its comm would send it."""
    import base64
    import json

    from ipywidgets.widgets.widget import _remove_buffers
    state, paths, buffers = _remove_buffers(widget.get_state(list(names)))
    return json.dumps(state), paths, [base64.b64encode(bytes(b)).decode() for b in buffers]
