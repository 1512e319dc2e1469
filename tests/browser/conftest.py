"""Fixtures for the real-browser tests: Debian's Chromium via Playwright, and a fresh JupyterLab.

No browser download ever happens (no ``playwright install``): the Chromium is found on disk
(``$BROWSER_PATH``, ``chromium``, ``chromium-browser``); without one the tests skip with that
reason, except under ``CI=true`` where a missing browser is a failure.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output" / "browser"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage"]


def find_chromium() -> str | None:
    for cand in (os.environ.get("BROWSER_PATH"), shutil.which("chromium"), shutil.which("chromium-browser"),
                 "/usr/bin/chromium"):
        if cand and Path(cand).exists():
            return cand
    return None


def _missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser_output() -> Path:
    """``test-output/browser/`` (gitignored): screenshots and the measured latency."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return OUTPUT


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        _missing("no Chromium found (apt-get install chromium, or set BROWSER_PATH)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("playwright is not installed (pip install playwright; no browser download needed)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory, chromium_path):
    """A JupyterLab server on a free localhost port with its own token and fresh settings,
    serving a scratch copy of ``notebooks/`` (so autosave files land there, not in the repo)."""
    base = tmp_path_factory.mktemp("lab")
    nbdir = base / "notebooks"
    shutil.copytree(ROOT / "notebooks", nbdir, ignore=shutil.ignore_patterns("*.autosave.json", ".ipynb_checkpoints"))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
               PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
               JUPYTER_CONFIG_DIR=str(base / "config"), JUPYTER_RUNTIME_DIR=str(base / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(base / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(base / "ws"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={token}", "--ServerApp.allow_root=True", f"--ServerApp.root_dir={nbdir}",
           f"--LabApp.user_settings_dir={base / 'settings'}", f"--LabApp.workspaces_dir={base / 'ws'}",
           "--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False",
           "--LabServerApp.announcements_url=", "--ServerApp.disable_check_xsrf=False"]
    # no news/update pop-ups (the machine is offline; they would cover the page)
    note = base / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    log = open(base / "jupyter.log", "w")
    proc = subprocess.Popen(cmd, cwd=nbdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"jupyter lab did not start; log:\n{(base / 'jupyter.log').read_text()[-3000:]}")
        time.sleep(0.5)
    yield {"url": url, "token": token, "dir": nbdir, "log": base / "jupyter.log"}
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture()
def page(chromium_path):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        # Playwright gives each launch a fresh temporary profile (its own --user-data-dir)
        browser = p.chromium.launch(executable_path=chromium_path, args=LAUNCH_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(60_000)
        yield pg
        browser.close()
