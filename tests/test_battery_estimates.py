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
    verdict, own, eager = (rows["resnet9-verdict"], rows["resnet9-own-best"],
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
    # the compiled runs' own measurements (an H100), not the eager ones'
    assert "9.69 ms" in verdict["estimated_how"] and "24.25 ms" in eager["estimated_how"]
