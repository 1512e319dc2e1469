"""``ProfileConfig`` and ``TuneConfig`` (torch-free): keyword-only, slotted, a docstring per field,
and ``profile``/``tune`` take one or the same fields as keywords (unknown ones refused)."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from kernel_runtime.measure.config import ProfileConfig, TuneConfig, profile_config, tune_config


@pytest.mark.parametrize("cls", [ProfileConfig, TuneConfig])
def test_keyword_only_slotted_and_documented(cls):
    with pytest.raises(TypeError):
        cls(3)  # noqa - positional arguments are refused
    cfg = cls(ranks=2, microbatches=4)
    assert not hasattr(cfg, "__dict__") and dataclasses.is_dataclass(cfg)
    tree = ast.parse(Path(inspect.getsourcefile(cls)).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    body = node.body
    documented = {a.target.id for a, d in zip(body, body[1:]) if isinstance(a, ast.AnnAssign)
                  and isinstance(d, ast.Expr) and isinstance(d.value, ast.Constant) and isinstance(d.value.value, str)}
    assert documented == {f.name for f in dataclasses.fields(cls)}


def test_profile_keywords_are_config_fields():
    assert profile_config(None, {"ranks": 2, "microbatches": 8}) == ProfileConfig(ranks=2, microbatches=8)
    base = ProfileConfig(ranks=4, repeats=5)
    cfg = profile_config(base, {"repeats": 7})
    assert (cfg.ranks, cfg.repeats) == (4, 7) and base.repeats == 5
    with pytest.raises(TypeError, match=r"profile\(\) got unknown keyword\(s\) \['rank'\].*ranks"):
        profile_config(None, {"rank": 2})


def test_tune_needs_ranks_and_microbatches():
    assert tune_config(None, {"ranks": 2, "microbatches": 8}) == TuneConfig(ranks=2, microbatches=8)
    assert tune_config(TuneConfig(ranks=2, microbatches=8), {"dtype": "float64"}).dtype == "float64"
    with pytest.raises(TypeError, match="needs microbatches"):
        tune_config(None, {"ranks": 2})
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['devicez'\]"):
        tune_config(None, {"ranks": 2, "microbatches": 8, "devicez": "cpu"})
    with pytest.raises(TypeError):
        TuneConfig()          # required fields have no default


def test_profile_and_tune_take_a_config_and_field_keywords():
    import kernel_runtime as kr
    from kernel_runtime.measure.profiler import profile
    from kernel_runtime.measure.tuning import tune
    assert kr.ProfileConfig is ProfileConfig and kr.TuneConfig is TuneConfig
    for fn, kw in ((profile, ["targets", "path", "config"]), (tune, ["problem", "progress", "config"])):
        params = inspect.signature(fn).parameters
        assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == kw
        assert any(p.kind is p.VAR_KEYWORD for p in params.values())
