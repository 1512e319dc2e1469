"""``LaunchConfig`` (torch-free): keyword-only, slotted, a docstring per field, and ``launch``'s
keywords are its field names (an unknown one is refused, naming the fields)."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from kernel_runtime.run.config import LaunchConfig, config_with


def test_keyword_only_slotted_and_documented():
    with pytest.raises(TypeError):
        LaunchConfig(3)  # noqa - positional arguments are refused
    cfg = LaunchConfig(steps=3)
    assert not hasattr(cfg, "__dict__") and dataclasses.is_dataclass(cfg)
    tree = ast.parse(Path(inspect.getsourcefile(LaunchConfig)).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LaunchConfig")
    body = cls.body
    documented = {a.target.id for a, d in zip(body, body[1:]) if isinstance(a, ast.AnnAssign)
                  and isinstance(d, ast.Expr) and isinstance(d.value, ast.Constant) and isinstance(d.value.value, str)}
    assert documented == {f.name for f in dataclasses.fields(LaunchConfig)}


def test_keywords_override_fields_and_unknown_ones_are_refused():
    base = LaunchConfig(steps=3, lr=0.5)
    cfg = config_with(base, steps=5, dtype="float64")
    assert (cfg.steps, cfg.lr, cfg.dtype) == (5, 0.5, "float64") and base.steps == 3
    assert config_with(None) == LaunchConfig()
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['stepz'\].*steps"):
        config_with(None, stepz=2)


def test_launch_takes_model_data_config_and_field_keywords():
    from kernel_runtime import LaunchConfig as exported
    from kernel_runtime.run.launcher import launch
    assert exported is LaunchConfig
    params = inspect.signature(launch).parameters
    assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == ["model", "data", "config"]
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())
