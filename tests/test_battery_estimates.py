"""The battery's estimates follow what each stage's command runs: its recipe compiled or
eager, with or without each framework's defaults runs beside it, from the runs measured in
that state on a GPU."""

from __future__ import annotations

from conftest import battery_plan


def test_a_compiled_comparison_is_estimated_with_each_framework_at_its_default_beside_it():
    """The recipe says what its command runs: compiled, the defaults runs are PyTorch's eager
    ones (TensorFlow/Keras is at its default already); --no-defaults drops them; eager, they
    are TensorFlow's with XLA."""
    rows = {r["stage"]: r for r in battery_plan("--dataset", "cifar10")["stages"]}
    verdict, own, eager = (rows["resnet9-verdict-cold"], rows["resnet9-own-best"],
                           rows["resnet9-eager"])
    assert "--compile" in verdict["commands"][0] and "--no-defaults" not in verdict["commands"][0]
    assert "at torch's default" in verdict["estimated_how"]
    assert "at tf's default" not in verdict["estimated_how"]
    assert "--compile --no-defaults --best" in own["commands"][0]
    assert "--own-loops" in own["commands"][0]
    assert "default" not in own["estimated_how"].replace("own loop", "")
    # the matched runs, and as long again for each own loop and each best run
    assert own["estimated_how"].endswith("+ each seed's own loop, as long as its run + each "
                                         "seed's best run, as long as its run")
    assert "--compile" not in eager["commands"][0] and "at tf's default" in eager["estimated_how"]
    # the compiled runs' own measurements (the H200 verdict's), not the eager ones'
    assert "6.5 ms" in verdict["estimated_how"] and "24.25 ms" in eager["estimated_how"]


def test_a_compiled_runs_first_epoch_follows_its_compile_caches_state():
    """The H200 verdict's compiled runs were measured with PyTorch's graph from torch.compile's
    cache and XLA's caches cold: a cold PyTorch run adds what a cold compile cost on an H100
    (COMPILE_CACHE_EXTRA_S); TensorFlow's warm first epoch, never measured on a GPU, is
    taken as its cold one and said so; an eager run's first epoch does not move."""
    from dataclasses import replace

    from benchmarks import gpu_battery as battery
    from benchmarks.battery.estimates import COMPILE_CACHE_EXTRA_S, run_seconds
    from benchmarks.battery.stages import VERDICT
    ctx = battery.context(battery.arguments(["--plan"]))
    seconds = {(fw, cache): run_seconds(fw, replace(VERDICT, compile_cache=cache), ctx)
               for fw in ("torch", "tf") for cache in ("warm", "cold")}
    assert seconds["torch", "cold"][0] - seconds["torch", "warm"][0] == \
        COMPILE_CACHE_EXTRA_S["torch", "resnet9"]
    assert "caches cold: warm 3.9 s + 17.0 s" in seconds["torch", "cold"][1]
    assert seconds["tf", "warm"][0] == seconds["tf", "cold"][0]
    assert "measured cold only, taken as the same" in seconds["tf", "warm"][1]
    eager = replace(VERDICT, compiled=False)
    assert run_seconds("torch", replace(eager, compile_cache="cold"), ctx) == \
        run_seconds("torch", replace(eager, compile_cache="warm"), ctx)
