"""Each framework's compile state and whether it is that framework's own default: the rule
(compare.experiment.compile_state) against Keras' own resolution of jit_compile="auto" on a
device, a strategy, op determinism and a layer XLA cannot compile; and the GPU path of
`compare` (the defaults runs, their report and the verdict's words) on injected GPU facts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import tiny_config, trainer_for
from report_runs import H100, PASSED, fake_result

from compare import files
from compare.experiment import compile_state
from compare.experiment.config import ComparisonConfig
from compare.process import comparison, runner
from compare.run import fairness


@pytest.fixture
def visible_gpu(monkeypatch):
    """Keras sees a GPU on this host, as on a GPU machine: TensorFlow's physical devices
    with one GPU added (what Keras' rule reads; nothing here trains on it)."""
    import tensorflow as tf
    listed = tf.config.list_physical_devices

    def with_gpu(device_type=None):
        gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
        return listed(device_type) + ([gpu] if device_type in (None, "GPU") else [])
    monkeypatch.setattr(tf.config, "list_physical_devices", with_gpu)


def _keras_says(model) -> bool:
    """Keras' own answer, by its public API: Model.compile(jit_compile="auto")."""
    import keras
    model.compile(optimizer=keras.optimizers.SGD(), loss="mse", jit_compile="auto")
    return bool(model.jit_compile)


@pytest.mark.parametrize("device_kind, devices, deterministic, expected", [
    ("cpu", 1, False, False),  # no GPU visible
    ("gpu", 1, False, True),  # a GPU and no strategy: XLA
    ("gpu", 2, False, False),  # under MirroredStrategy (two logical CPUs)
    ("gpu", 1, True, False),  # op determinism
])
def test_keras_default_is_resolved_as_keras_resolves_it(request, tmp_path, tf_two_cpus,
                                                        device_kind, devices, deterministic,
                                                        expected):
    """The rule, the trainer's recorded compile state and Keras' own compile agree on each
    case, and the rule is not constant (XLA on a GPU without a strategy)."""
    from tensorflow.python.framework import config as tf_framework_config
    if device_kind == "gpu":
        request.getfixturevalue("visible_gpu")
    config = tiny_config(tmp_path, framework="tf", devices=devices,
                         deterministic=deterministic)
    try:
        trainer = trainer_for(tf_two_cpus, config)
        recorded = fairness.manifest(config, trainer.choice, trainer.replicas,
                                     trainer.manifest(), trainer.spec)["compile_state"]
        with trainer.strategy.scope():
            keras_says = _keras_says(trainer.model)
    finally:
        if deterministic:
            tf_framework_config.disable_op_determinism()
    rule = compile_state.framework_default("tf", device_kind, wrapped=devices > 1,
                                           deterministic=deterministic)
    assert keras_says == rule.compiled == recorded["default"] == expected
    assert recorded["compiled"] is False and recorded["is_default"] == (not expected)
    if device_kind == "cpu":  # the run's device is the rule's: its words are recorded
        assert recorded["rule"] == rule.rule


def test_a_layer_xla_cannot_compile_keeps_keras_eager_on_a_gpu(tf_two_cpus, visible_gpu):
    """A model with a layer that does not support XLA: Keras leaves XLA off, the rule says
    so, and the TensorFlow side's answer (asked of Keras) agrees; without the layer, XLA."""
    import keras
    from tf_impl import manifest

    class NoJit(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.supports_jit = False

        def call(self, x):
            return x

    def model(layer):
        inputs = keras.Input((4,))
        return keras.Model(inputs, keras.layers.Dense(2)(layer(inputs)))

    for layer, supported in ((NoJit(), False), (keras.layers.Identity(), True)):
        asked = manifest.framework_default_compile(SimpleNamespace(model=model(layer)))
        rule = compile_state.framework_default("tf", "gpu", False, False,
                                               layers_support_jit=supported)
        assert asked == rule.compiled == _keras_says(model(layer)) == supported


def test_pytorch_is_eager_by_default_everywhere(tmp_path):
    """PyTorch's default is eager on every device; --compile and --cuda-graphs are above it."""
    from torch_impl import manifest
    for kind in ("cpu", "gpu"):
        assert compile_state.framework_default("torch", kind, False, False).compiled is False
    assert manifest.framework_default_compile(None) is False
    eager = compile_state.resolve(tiny_config(tmp_path, framework="torch"), "gpu")
    assert eager.is_default and eager.phrase() == "PyTorch eager, its default"
    graphs = compile_state.resolve(tiny_config(tmp_path, framework="torch", cuda_graphs=True),
                                   "gpu")
    assert graphs.compiled and not graphs.is_default and not graphs.below_default


def test_the_words_say_the_state_and_the_default(tmp_path):
    """The verdict's phrases for each state on each device."""
    tf_config = tiny_config(tmp_path, framework="tf")
    assert compile_state.resolve(tf_config, "cpu").phrase() == (
        "TensorFlow/Keras without XLA, Keras' default on this CPU")
    below = compile_state.resolve(tf_config, "gpu")
    assert below.below_default and below.phrase() == (
        "TensorFlow/Keras without XLA, which Keras uses by default on this GPU")
    assert compile_state.resolve(tf_config.replace(compile=True), "gpu").phrase() == (
        "TensorFlow/Keras with XLA, Keras' default on this GPU")
    assert compile_state.resolve(tf_config.replace(compile=True), "cpu").phrase() == (
        "TensorFlow/Keras with XLA, which Keras does not use by default on this CPU")
    wrapped = compile_state.resolve(tf_config.replace(devices=2), "gpu")
    assert wrapped.is_default and "tf.distribute" in wrapped.rule


def test_on_a_gpu_the_plan_trains_each_framework_below_its_default_at_it(tmp_path):
    """On a GPU: TensorFlow's matched (eager) runs get a twin with XLA in DIR/defaults and
    PyTorch's none; with --compile the other way round; on a CPU, with --no-defaults or
    under --parallel model (its stages run uncompiled), none."""
    directory = files.ComparisonDir(tmp_path / "cmp")
    config = tiny_config(tmp_path)
    plan = comparison.planned_runs(config, ComparisonConfig(seeds=2, own_loops=False),
                                   directory, False, device_kind="gpu")
    twins = [q.config for q in plan if q.config.variant == "defaults"]
    assert [(c.framework, c.seed, c.compile) for c in twins] == [("tf", 0, True), ("tf", 1, True)]
    assert all(c.out.startswith(str(directory.defaults)) for c in twins)
    compiled = comparison.planned_runs(config.replace(compile=True),
                                       ComparisonConfig(seeds=1, own_loops=False), directory,
                                       False, device_kind="gpu")
    assert [(q.config.framework, q.config.compile) for q in compiled
            if q.config.variant == "defaults"] == [("torch", False)]
    for kind, settings, run in (("cpu", ComparisonConfig(seeds=2), config),
                                ("gpu", ComparisonConfig(seeds=2, defaults=False), config),
                                ("gpu", ComparisonConfig(seeds=2),  # stages run uncompiled
                                 config.replace(parallel="model", devices=2))):
        assert not [q for q in comparison.planned_runs(run, settings, directory, False, kind)
                    if q.config.variant == "defaults"]


def test_the_gpu_path_of_compare_reports_the_defaults_row_and_its_words(tmp_path):
    """compare's plan and reports on injected GPU facts (an H100's results, as each run would
    record them there): the matched ratio says TensorFlow/Keras ran below its default, the
    defaults ratio stands beside it, and the report's compile-state table gives both."""
    directory = files.ComparisonDir(tmp_path / "cmp")
    plan = comparison.planned_runs(tiny_config(tmp_path),
                                   ComparisonConfig(seeds=3, own_loops=False), directory, False,
                                   device_kind="gpu")
    outcomes = _ran_on_an_h100(plan)
    comparison.write_reports(directory, outcomes, [], [], PASSED, "cnncompare compare", None)
    summary = files.read_json(directory.summary)
    assert summary["ratios"]["train_time_s"]["ratio"] == pytest.approx(1.2)
    defaults = summary["defaults"]
    assert defaults["time_ratio"]["ratio"] == pytest.approx(0.8)
    assert defaults["completed"] == {"tf": 3, "torch": 3}
    assert {fw: s["compiled"] for fw, s in defaults["compile_states"].items()} == {
        "tf": True, "torch": False}
    assert summary["compile_states"]["tf"]["is_default"] is False
    verdict = " ".join(summary["verdict"])
    assert ("PyTorch trained 1.20x faster than TensorFlow/Keras (training time, "
            "TensorFlow/Keras below its own default: without XLA, which Keras uses by default "
            "on this GPU, 95% CI") in verdict
    assert ("Each framework at its own defaults (TensorFlow/Keras with XLA and PyTorch eager), "
            "TensorFlow/Keras trained 1.25x faster than PyTorch") in verdict
    assert ("TensorFlow/Keras without XLA, which Keras uses by default on this GPU, and "
            "PyTorch eager, its default") in verdict
    page = directory.pages[0].read_text()  # report.md
    assert ("| each at its own defaults | with XLA, Keras' default on this GPU | eager, its "
            "default | 0.800x") in page
    assert "| matched | without XLA, which Keras uses by default on this GPU |" in page
    assert "[the defaults report](defaults/report.html)" in page
    assert ("TensorFlow/Keras ran below its own default: without XLA, which Keras uses by "
            "default on this GPU (the compile states below") in page  # under the headline table
    defaults_dir = files.ComparisonDir(directory.defaults)
    assert files.read_json(defaults_dir.summary)["compile_states"][
        "tf"]["compiled"] is True  # its own comparison, beside the matched one
    # the comparison's parity check, run once on the matched runs' settings, goes with it
    defaults_page = " ".join(defaults_dir.pages[0].read_text().split())
    assert "no parity check was recorded" not in defaults_page
    assert files.read_json(defaults_dir.summary)["parity"]["passed"] is True
    assert ("It ran once, for the comparison's matched runs; these are each framework at its "
            "defaults.") in defaults_page
    assert "It ran once" not in page  # the matched report's own check


def test_the_defaults_comparison_joins_the_runs_of_separate_invocations(tmp_path):
    """`compare --framework tf` first, then `compare --resume` running PyTorch: the matched
    report holds TensorFlow's matched runs only, the defaults report its runs at Keras'
    default from the first invocation beside PyTorch's matched runs of the second."""
    directory = files.ComparisonDir(tmp_path / "cmp")
    plan = comparison.planned_runs(tiny_config(tmp_path),
                                   ComparisonConfig(seeds=2, own_loops=False), directory, False,
                                   device_kind="gpu")
    done = _ran_on_an_h100(plan)
    earlier = comparison.earlier_results([q for q, _ in done if q.config.framework == "tf"])
    comparison.write_reports(directory, [(q, o) for q, o in done if q.config.framework == "torch"],
                             earlier, [], PASSED, "cnncompare compare --resume", None)
    summary = files.read_json(directory.summary)
    assert {fw: f["runs"] for fw, f in summary["frameworks"].items()} == {"tf": 2, "torch": 2}
    assert summary["ratios"]["train_time_s"]["ratio"] == pytest.approx(1.2)
    assert summary["defaults"]["time_ratio"]["ratio"] == pytest.approx(0.8)


def _ran_on_an_h100(plan: list) -> list:
    """Each planned run's result as it would be recorded on an H100 (training seconds:
    TensorFlow 12 eager and 8 with XLA, PyTorch 10), with its outcome."""
    times = {("tf", "matched"): 12.0, ("tf", "defaults"): 8.0, ("torch", "matched"): 10.0}
    outcomes = []
    for queued in plan:
        run = queued.config
        result = fake_result(run.framework, run.seed, times[(run.framework, run.variant)],
                             0.6, environment=H100)
        result["config"]["variant"] = run.variant
        result["fairness"]["compile_state"] = compile_state.resolve(run, "gpu").to_dict()
        files.write_json(files.RunDir(Path(run.out)).result, result)
        outcomes.append((queued, runner.Outcome(run.framework, Path(run.out), 0, "completed",
                                                None)))
    return outcomes
