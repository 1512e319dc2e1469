"""House rule (DESIGN.md): modules under 500 lines, functions under 120, in the core and the runtime;
in ``kernel_runtime/`` (issue 23) modules of at most 400 lines and functions of at most 80."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("flexpipe_ui", "kernel_runtime")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 120
RUNTIME_LIMITS = {"kernel_runtime": (400, 80)}
"""Package → (most lines in a module, most lines in a function): tighter than the house rule."""


def _files():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_modules_are_short():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in _files()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_functions_are_short():
    long = []
    for p in _files():
        rel = p.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(p.read_text(), filename=rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{rel}::{node.name} ({n} lines, line {node.lineno})")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _limits(rel: str) -> tuple[int, int]:
    return RUNTIME_LIMITS.get(rel.split("/")[0], (MAX_MODULE_LINES, MAX_FUNCTION_LINES))


def test_runtime_modules_and_functions_are_shorter_still():
    long = []
    for p in _files():
        rel = p.relative_to(ROOT).as_posix()
        max_module, max_function = _limits(rel)
        text = p.read_text()
        if (n := len(text.splitlines())) > max_module:
            long.append(f"{rel}: {n} lines (at most {max_module})")
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > max_function:
                    long.append(f"{rel}::{node.name} ({n} lines, at most {max_function})")
    assert not long, f"too long: {long}"
    assert any(p.relative_to(ROOT).as_posix().startswith("kernel_runtime/run/") for p in _files())

