"""Your own model in: split_module (names → layers, clear errors), Hugging Face causal LMs
(stages equal the HF model's own forward and backward), and the CLI's --model forms.

The multi-process checks against the single-process reference are in test_runtime_hf_dp.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
from toy_models import TOY_LAYERS, ToyNet, toy_batch, toy_loss  # noqa: E402

from kernel_runtime import split_module  # noqa: E402
from kernel_runtime.models.split import SplitError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LLAMA = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=64)
GPT2 = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=32)
QWEN2 = dict(LLAMA)


# -- split_module -----------------------------------------------------------------------------------
def test_split_layers_compose_to_the_module():
    net = ToyNet().double()
    spec = split_module(net, TOY_LAYERS, toy_loss, batch=toy_batch)
    assert spec.num_layers == 6 and spec.meta["layer_names"][0] == ["inp", "act"]
    layers = spec.layers(range(6), seed=0, dtype=torch.float64)
    x, _ = toy_batch(0, 5, torch.Generator().manual_seed(1))
    h = x.double()
    for l in layers:
        h = l(h)
    assert torch.equal(h, net(x.double()))
    # a rank's layers are copies holding only their own parameters
    (mine,) = spec.layers([2], seed=0, dtype=torch.float64)
    assert mine is not net.body[1] and torch.equal(mine[0].weight, net.body[1][0].weight)
    assert sum(p.numel() for p in mine.parameters()) == sum(p.numel() for p in net.body[1].parameters())


def test_split_factory_builds_same_weights_per_seed():
    spec = split_module(ToyNet, TOY_LAYERS, toy_loss)
    a = spec.layers([0, 5], seed=3)
    b = spec.layers([5], seed=3)
    c = spec.layers([5], seed=4)
    assert torch.equal(a[1].out.weight, b[0].out.weight)
    assert not torch.equal(a[1].out.weight, c[0].out.weight)
    import pickle
    pickle.loads(pickle.dumps(spec))               # travels to spawned workers


@pytest.mark.parametrize("layers,words", [
    (["inp", "body.0", "body.1", "body.2", "body.3", "nrom", "out"], "no submodule 'nrom'; did you mean 'norm'"),
    (["inp", "body.0", "body.0", "body.1", "body.2", "body.3", ["norm", "out"]], "'body.0' is used twice"),
    (["inp", "body", "body.1", "norm", "out"], "'body.1' is used twice: it is inside 'body'"),
    (["inp", "body.0", "body.1", "body.2", ["norm", "out"]], "left out of every layer: body.3.0.weight"),
    ([], "non-empty list"),
    (["inp", 3], "layer 1: expected a module name"),
])
def test_split_errors(layers, words):
    with pytest.raises(SplitError) as e:
        split_module(ToyNet(), layers, toy_loss)
    assert isinstance(e.value, ValueError)
    assert words in str(e.value)


def test_split_refuses_shared_parameters_and_missing_loss():
    net = ToyNet()
    net.out = torch.nn.Linear(8, 8)
    net.out.weight = net.body[0][0].weight                    # tied across two layers
    with pytest.raises(SplitError, match="shared by layers"):
        split_module(net, TOY_LAYERS, toy_loss)
    with pytest.raises(SplitError, match="needs loss_fn"):
        split_module(ToyNet(), TOY_LAYERS)


# -- Hugging Face ------------------------------------------------------------------------------------
def _hf():
    return pytest.importorskip("transformers", reason="the hf extra (transformers) is not installed")


@pytest.mark.parametrize("kind,cfg", [("llama", LLAMA), ("gpt2", GPT2), ("qwen2", QWEN2)])
def test_hf_stages_equal_the_hf_model(kind, cfg):
    tf = _hf()
    from kernel_runtime.models.data import reference_run
    from kernel_runtime.models.hf import CausalLMStages, from_transformers, hf_config
    from kernel_runtime.models import lm_loss
    spec = from_transformers(kind, config=cfg, seq=8)
    assert spec.num_layers == 4 and spec.name == f"hf:{kind}"
    ref = reference_run(spec, steps=1, seed=3)                    # the stages chained, float64
    torch.manual_seed(3 * 100003)                                  # the seed spec.layers uses
    model = tf.AutoModelForCausalLM.from_config(hf_config(kind, cfg)).double()
    x, y = spec.batch(0, spec.batch_size, torch.Generator().manual_seed(3 * 7919))
    loss = lm_loss(model(x).logits, y)                             # HF's own forward
    loss.backward()
    st = CausalLMStages(model)
    hf_grads = {f"{i}.{n}": p.grad.numpy() for i, l in enumerate([st.embed, *st.blocks, st.head])
                for n, p in l.named_parameters()}
    assert set(hf_grads) == set(ref.grads[0])
    assert abs(float(loss.detach()) - ref.losses[0]) <= 1e-12
    assert max(float(np.abs(hf_grads[k] - ref.grads[0][k]).max()) for k in hf_grads) <= 1e-12


def test_hf_model_instance_and_refusals():
    tf = _hf()
    from kernel_runtime.models.hf import from_transformers
    from kernel_runtime.models.hf import as_model
    from kernel_runtime.models import ModelError, as_spec
    cfg = tf.AutoConfig.for_model("llama", **LLAMA)
    model = tf.AutoModelForCausalLM.from_config(cfg)
    spec = as_spec(as_model(model))                                # what launch(model=hf_model) does
    with pytest.raises(ModelError, match="from_transformers"):
        as_spec(model)
    (emb,) = spec.layers([0], seed=0)
    assert torch.equal(emb.embed_tokens.weight, model.model.embed_tokens.weight)
    tied = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.for_model("gpt2", **GPT2))
    with pytest.raises(ModelError, match="tie_word_embeddings=False"):
        from_transformers(tied)
    with pytest.raises(ModelError, match="not supported"):
        from_transformers("bert", config={})


def test_hf_profile_and_auto():
    _hf()
    from flexpipe_ui.search import auto
    from kernel_runtime import from_transformers, profile
    spec = from_transformers("llama", config=dict(LLAMA, num_hidden_layers=4), seq=8)
    prob = profile(spec, ranks=2, microbatches=4, repeats=1, warmup=0, dp=2)
    assert prob.num_layers == 6 and all(l.f > 0 for l in prob.layers)
    grads = [l.grad for l in prob.layers]
    n_head = 32 * 64 + 32                                          # lm_head + final norm (untied)
    assert grads[-1] == pytest.approx(n_head * 4 / 2 ** 20)
    plan = auto(prob, time_limit=1.0)
    assert plan.num_layers == 6


# -- CLI --model forms ----------------------------------------------------------------------------------
def _cli(*args, timeout=120):
    import os
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'runtime'}")
    return subprocess.run([sys.executable, "-m", "flexpipe_ui.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args,words", [
    (["--model", "nope"], "use demo-gpt, hf:<model type>"),
    (["--model", "hf:llama", "--model-config", "{bad"], "not valid JSON"),
    (["--model", "hf:llama", "--model-config", "[1]"], "must be a JSON object"),
    (["--model", "hf:bert"], "not supported"),
    (["--model", "no_such_module_x:f"], "cannot import 'no_such_module_x'"),
    (["--model", "toy_models:nothing"], "has no 'nothing'"),
    (["--model", "toy_models:TOY_LAYERS"], "is not a function"),
])
def test_cli_model_refusals(args, words, capsys):
    from flexpipe_ui.cli import main
    assert main(["train", "--schedule", "1f1b", "--ranks", "2", *args]) == 2     # in-process: fast
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_cli_factory_model_and_hf_profile(tmp_path):
    out = _cli("train", "--model", "toy_models:toy_spec", "--schedule", "zb-h1", "--ranks", "2",
               "--microbatches", "4", "--steps", "1", "--check-reference", timeout=150)
    assert out.returncode == 0, out.stderr
    assert "toy_spec" in out.stdout.splitlines()[0] or "ToyNet" in out.stdout.splitlines()[0]
    assert float(out.stdout.strip().splitlines()[-1].split("=")[1]) <= 1e-10
    out = _cli("profile", "--model", "hf:gpt2", "--model-config", '{"n_embd": 32, "n_layer": 2, "n_head": 4, '
               '"vocab_size": 64}', "--seq", "8", "--ranks", "2", "--microbatches", "2", "--repeats", "1",
               "-o", str(tmp_path / "p.json"))
    if "transformers" in out.stderr and out.returncode == 2:
        pytest.skip("transformers is not installed")
    assert out.returncode == 0, out.stderr
    from flexpipe_ui.problem import load_problem
    assert load_problem(tmp_path / "p.json").num_layers == 4


def test_launch_panel_takes_a_model_object():
    pytest.importorskip("ipywidgets")
    from flexpipe_ui.library import build_named
    from flexpipe_ui.widgets import LaunchPanel
    spec = split_module(ToyNet, TOY_LAYERS, toy_loss, batch=toy_batch)
    plan = build_named("1f1b", None, ranks=2, microbatches=2)
    panel = LaunchPanel(plan, model=spec, steps=1)
    assert panel.model is spec and panel.w_model.disabled
    assert panel.w_model.value == "ToyNet (6 layers)"
    typed = LaunchPanel(plan, steps=1)
    assert typed.model is None and typed.w_model.value == "demo-gpt" and not typed.w_model.disabled


def test_launch_refuses_bad_dp_before_starting():
    from flexpipe_ui.library import build_named
    from kernel_runtime import PlanRefused, launch
    from kernel_runtime.models import demo_gpt
    plan = build_named("1f1b", None, ranks=2, microbatches=4)
    spec = demo_gpt(vocab=16, seq=4, dim=8, heads=2, n_blocks=2, batch_size=4)
    with pytest.raises(PlanRefused, match="divisible by 8"):
        launch(plan, model=spec, dp=2)
    with pytest.raises(PlanRefused, match="dp must be an integer >= 1"):
        launch(plan, model=spec, dp=0)
