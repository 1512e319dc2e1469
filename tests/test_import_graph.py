"""No import circle among the package's own modules, counting imports inside functions too.

Every module of ``flexpipe_ui`` and ``kernel_runtime`` is parsed with ``ast``; an import of one of
them (module level or inside a function) is an edge, ``from pkg import sub`` an edge to the
submodule. A cycle means two modules need each other, so neither can be understood (or changed)
alone; the test prints the cycle it finds.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("flexpipe_ui", "kernel_runtime")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict) -> dict[str, int]:
    """Own modules ``name`` imports anywhere in its file → line of the first such import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.setdefault(t, node.lineno)
    return found


def _graph() -> dict[str, dict[str, int]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None; iterative depth-first search."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_sees_function_level_imports():
    g = _graph()
    assert "flexpipe_ui.ir" in g["flexpipe_ui.edits"]
    assert "flexpipe_ui.planfile" in g["kernel_runtime.run.worker"]  # imported inside a function
    assert _find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    g = _graph()
    cycle = _find_cycle(g)
    if cycle:
        steps = [f"{a} (line {g[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle:\n  " + "\n  ".join(steps))


def test_every_own_import_names_a_module_that_exists():
    """An import of one of our modules (relative or absolute, at module level or inside a function)
    names a file or package that exists: a module moved without its importers fixed fails here,
    not in a worker process at run time. In-repo code imports no old flat path (``_moved``)."""
    known = _modules()
    missing = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    mods = [f"{base}.{node.module}" if node.module else base]
                else:
                    mods = [node.module or ""]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            for mod in mods:
                if mod.split(".")[0] in PACKAGES and mod not in known:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {mod}")
    assert not missing, "imports of modules that do not exist:\n  " + "\n  ".join(missing)
