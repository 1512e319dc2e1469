"""Profile → auto: the runtime profiler's problem file (measured ms / MiB, with meta) goes through
``flexpipe auto`` unchanged and the plan fits and simulates on it."""
import pytest

torch = pytest.importorskip("torch")  # the runtime's profiler needs torch (a project dependency)


@pytest.mark.timeout(120)
def test_profiled_problem_through_the_cli(tmp_path, capsys):
    from kernel_runtime.models import demo_gpt
    from kernel_runtime.measure.profiler import profile

    from flexpipe_ui.cli import main
    from flexpipe_ui.planfile import load_plan
    from flexpipe_ui.problem import load_problem
    from flexpipe_ui.sim import simulate
    from flexpipe_ui.validate import validate

    spec = demo_gpt(vocab=64, seq=16, dim=32, heads=2, n_blocks=6, batch_size=16)
    src = tmp_path / "problem.json"
    measured = profile(spec, ranks=4, microbatches=8, repeats=2, path=src)
    assert measured.meta.get("profiled") and src.exists()
    # cap memory at 90% of what 1F1B-like in-flight would need, so the cap is live
    from flexpipe_ui.partition import default_inflight, rank_memory
    from flexpipe_ui.problem import even_partition
    est = rank_memory(measured, even_partition(measured.num_layers, 4), (0, 1, 2, 3),
                      default_inflight(4, 4, 8))
    problem = load_problem(src).with_(memory_limit=0.9 * max(est))
    capped = tmp_path / "capped.json"
    from flexpipe_ui.problem import save_problem
    save_problem(problem, capped)
    out = tmp_path / "plan.json"
    assert main(["auto", str(capped), "-o", str(out), "-q"]) == 0
    plan = load_plan(out)
    validate(plan.schedule)
    res = simulate(plan, problem)
    assert res.metrics.max_peak_memory <= problem.memory_limit * (1 + 1e-9)
    assert plan.meta["name"] == "auto" and plan.num_layers == problem.num_layers
    assert "wrote" in capsys.readouterr().out
