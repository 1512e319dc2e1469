"""Fixtures for the real-browser tests: Debian's Chromium via Playwright, and a fresh JupyterLab.

No browser download ever happens (no ``playwright install``): the Chromium is found on disk
(``$BROWSER_PATH``, ``chromium``, ``chromium-browser``); without one the tests skip with that
reason, except under ``CI=true`` where a missing browser is a failure.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labserver import LAUNCH_ARGS, find_chromium, running_lab  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output" / "browser"
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


@pytest.fixture(scope="session")
def lab(tmp_path_factory, chromium_path):
    """A JupyterLab server on a free localhost port with its own token and fresh settings,
    serving a scratch copy of ``notebooks/`` (so autosave files land there, not in the repo)."""
    base = tmp_path_factory.mktemp("lab")
    nbdir = base / "notebooks"
    shutil.copytree(ROOT / "notebooks", nbdir, ignore=shutil.ignore_patterns("*.autosave.json", ".ipynb_checkpoints"))
    with running_lab(nbdir, base) as info:
        yield info


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
