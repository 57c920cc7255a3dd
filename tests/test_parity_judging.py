"""The parity check's judgement (compare.experiment.parity) on probes made in numpy: the
configurations it probes, the figures it computes from two probes, its gates and the lines it
prints. tests/test_parity.py runs the real probes of both frameworks; these check the
arithmetic and the words on values worked out here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from compare.experiment import networks, parity, parity_record, recipe, specs
from compare.experiment.config import PipelineConfig, RunConfig


def test_the_probe_scales_the_runs_schedule_down_to_its_peak_and_never_up():
    fast = RunConfig(lr=0.1, schedule="onecycle", warmup_fraction=0.25)
    for step in range(8):
        assert parity.probe_learning_rate(fast, step, 8) == pytest.approx(
            recipe.learning_rate(fast, step, 8) * 1e-3 / 0.1)
    slow = RunConfig(lr=1e-4, schedule="onecycle", warmup_fraction=0.25)
    assert parity.probe_learning_rate(slow, 1, 8) == recipe.learning_rate(slow, 1, 8)
    assert parity.probe_learning_rate(RunConfig(lr=1e-3), 0, 8) == 1e-3


def test_the_probes_configurations_keep_what_each_one_judges():
    run = RunConfig(batch_size=512, precision="mixed", device="gpu", devices=4, tf32=True,
                    compile=True, cuda_graphs=True, shared_init=False, micro_batches=4,
                    pipeline=PipelineConfig.preset("tuned"), dropout=True)
    naive = PipelineConfig.preset("naive")
    probe = parity.probe_config(run)
    assert (probe.precision, probe.device, probe.devices, probe.batch_size) == ("fp64", "cpu",
                                                                                 1, 8)
    assert (probe.tf32, probe.compile, probe.cuda_graphs) == (False, False, False)
    assert (probe.shared_init, probe.micro_batches, probe.pipeline, probe.dropout) == (
        True, 1, naive, False)
    assert parity.probe_config(run, "fp32").precision == "fp32"
    timed = parity.timed_config(run)
    assert (timed.precision, timed.device, timed.tf32, timed.compile, timed.cuda_graphs) == (
        "mixed", "gpu", True, True, True)  # the timed run's numerics, kept
    assert (timed.devices, timed.batch_size, timed.shared_init, timed.micro_batches,
            timed.pipeline, timed.dropout) == (1, 16, True, 1, naive, False)
    staged = run.replace(parallel="model", devices=2)
    assert parity.probe_config(staged).devices == 2 == parity.timed_config(staged).devices
    assert parity.probe_batch(RunConfig(batch_size=4)) == 4
    assert parity.probe_batch(RunConfig(batch_size=8)) == 8 == parity.PROBE_BATCH
    assert parity.probe_batch(RunConfig(batch_size=9)) == 8
    assert parity.timed_config(RunConfig(batch_size=12)).batch_size == 12
    assert parity.timed_config(RunConfig(batch_size=32)).batch_size == 16


def test_of_the_built_in_networks_only_mobilenetv2_has_tensorflows_timed_probe_apart():
    """The line drawn where it was measured to pay (docs/benchmarks.md): MobileNetV2's 153
    layers are past it, ResNet-18's 60 are not; a network whose spec cannot be read is probed
    as a small one."""
    from compare.process import parity_check
    layers = {name: len(list(specs.walk(networks.get_spec(name).layers)))
              for name in networks.MODELS}
    assert layers["mobilenetv2"] >= parity_check.APART_FROM_LAYERS > layers["resnet18"]
    assert {name: parity_check.apart(name) for name in networks.MODELS} == {
        name: ("tf",) if name == "mobilenetv2" else () for name in networks.MODELS}
    assert parity_check.apart("no/such/file.py:Net") == ()


def test_the_noise_floors_step_is_one_ulp_of_the_compute_precision():
    assert parity.compute_epsilon({"precision_policy": "mixed_bfloat16"}) == 2.0 ** -8
    assert parity.compute_epsilon({"precision_policy": "autocast float16"}) == 2.0 ** -11
    assert parity.compute_epsilon({"precision_policy": "float32"}) is None
    assert parity.compute_epsilon({}) is None
    w = np.array([1.0, -2.0, 0.5], np.float32)
    up = parity.one_ulp_up(w, None)
    assert up.dtype == np.float32
    np.testing.assert_array_equal(up, [1.0 + 2.0 ** -23, -2.0 - 2.0 ** -22, 0.5 + 2.0 ** -24])
    scaled = parity.one_ulp_up(w, 2.0 ** -8)
    assert scaled.dtype == np.float32
    np.testing.assert_array_equal(scaled, w * (1 + 2.0 ** -8))


def test_the_first_layer_without_a_float64_kernel_is_named_with_its_error():
    spec = networks.get_spec("lenet")
    seen: list[tuple[str, tuple[int, ...]]] = []

    def run_alone(layer: specs.LayerSpec, shape: tuple[int, ...]) -> None:
        seen.append((layer.name, shape))
        if layer.name == "pool2":
            raise TypeError("no float64 kernel\nfor MaxPool on this CPU")

    assert parity.first_float64_failure(spec, run_alone) == (
        "pool2 (MaxPool): TypeError: no float64 kernel")
    assert seen[0] == ("conv1", (3, 32, 32)) and seen[-1] == ("pool2", (16, 10, 10))
    assert len(seen) == 6  # it stops at the first failure

    def silent(layer: specs.LayerSpec, shape: tuple[int, ...]) -> None:
        raise RuntimeError(" " * 3)

    assert parity.first_float64_failure(spec, silent) == "conv1 (Conv): RuntimeError: "

    def verbose(layer: specs.LayerSpec, shape: tuple[int, ...]) -> None:
        raise ValueError("x" * 500)

    said = parity.first_float64_failure(spec, verbose)
    assert said is not None and len(said) == 300 and said.startswith("conv1 (Conv): ValueError")
    assert parity.first_float64_failure(spec, lambda layer, shape: None) is None


def _probe(loss: float = 0.5, shift: float = 0.0, unbiased: bool | None = False,
           dtype: type = np.float64) -> dict[str, np.ndarray]:
    """A probe of a conv and a BatchNorm: logits, loss, gradients, weights before and after
    3 steps, running statistics; `shift` moves the conv's update."""
    rng = np.random.default_rng(0)
    start = rng.normal(size=(4, 3)).astype(dtype)
    bn = "stage.bn"  # a BatchNorm inside a block: its name holds a dot
    probe = {"logits": np.linspace(-1, 1, 8).reshape(2, 4).astype(dtype),
             "loss": np.array(loss, dtype),
             "grad/conv.weight": np.full((4, 3), 0.1, dtype),
             f"grad/{bn}.weight": np.array([0.2, -0.2], dtype),
             "init/conv.weight": start, "param/conv.weight": start - 0.01 + shift,
             f"init/{bn}.weight": np.ones(2, dtype), f"param/{bn}.weight": np.full(2, 0.99, dtype),
             f"init/{bn}.running_var": np.array([2.0, 0.5], dtype),
             f"param/{bn}.running_var": np.array([1.5, 2.0], dtype),
             f"init/{bn}.running_mean": np.zeros(2, dtype),
             f"param/{bn}.running_mean": np.array([0.1, -0.1], dtype),
             f"bn/{bn}": np.array([0.1, 5.0])}
    if unbiased is not None:
        probe["running_variance_unbiased"] = np.array(unbiased)
    return probe


def test_running_variance_is_mapped_exactly_to_the_biased_form():
    for keras_form in (_probe(), _probe(unbiased=None)):  # Keras' probe, or one that predates it
        biased = parity.running_stats_in_biased_form(keras_form, steps=3)
        assert set(biased) == {"stage.bn.running_var", "stage.bn.running_mean"}  # no weights
        np.testing.assert_array_equal(biased["stage.bn.running_var"], [1.5, 2.0])
    mapped = parity.running_stats_in_biased_form(_probe(unbiased=True), steps=3)
    decay, start = 0.9 ** 3, np.array([2.0, 0.5])
    np.testing.assert_allclose(mapped["stage.bn.running_var"],
                               decay * start + 4 / 5 * (np.array([1.5, 2.0]) - decay * start),
                               rtol=1e-15)
    np.testing.assert_array_equal(mapped["stage.bn.running_mean"], [0.1, -0.1])
    float32 = parity.running_stats_in_biased_form(_probe(unbiased=True, dtype=np.float32), 3)
    assert float32["stage.bn.running_var"].dtype == np.float64  # mapped in float64


def test_relative_differences_take_a_floor_from_all_the_references_norm():
    reference = {"big": np.array([3.0, 4.0]), "zero": np.array([0.0, 0.0])}
    values = {"big": np.array([3.0, 4.5]), "zero": np.array([1e-5, 0.0])}
    found = parity.relative_differences(values, reference)
    assert found["big"] == pytest.approx(0.5 / 5)
    assert found["zero"] == pytest.approx(1e-5 / (1e-5 * 5))  # against 1e-5 of the total norm
    assert parity.relative_differences({"z": np.zeros(2)}, {"z": np.zeros(2)}) == {"z": 0.0}


def test_equal_float64_probes_pass_with_every_figure_and_the_method():
    record = parity.compare_probes(_probe(unbiased=True), _probe(unbiased=True), steps=3)
    assert record["passed"] is True and record["failed"] == [] and record["precision"] == "float64"
    assert record["grad_rel_diff_per_layer"] == {"conv.weight": 0.0, "stage.bn.weight": 0.0}
    assert record["bn_running_stats_rel_diff"] == {"stage.bn.running_var": 0.0,
                                                   "stage.bn.running_mean": 0.0}
    for key in parity.GATED:
        assert record[key] == 0.0
    assert record["tolerances"] == {
        "logits_max_abs_diff": 1e-8, "loss_abs_diff": 1e-9, "grad_max_rel_diff": 1e-6,
        "params_rel_update_diff_after_steps": 1e-6, "bn_running_stats_max_rel_diff": 1e-6}
    assert record["loss"] == {"tf": 0.5, "torch": 0.5} and record["steps"] == 3
    assert record["conventions"] == [parity.RUNNING_VARIANCE]
    assert record["param_abs_diff_per_weight"] == {"conv.weight": 0.0, "stage.bn.weight": 0.0}
    assert record["method"] == (
        "float64 on the CPU, TF32 off, shared initial weights, the data plan's first batch (2 "
        "images): logits, loss, every gradient; then 3 SGD steps on the plan's first batches, "
        "the run's learning-rate schedule scaled to peak 0.001: the weight updates and "
        "BatchNorm's running statistics")


def test_each_figure_fails_its_gate_and_float32_probes_get_the_float32_limits():
    tf = _probe(loss=0.5 + 1e-6, shift=1e-4)
    tf["grad/stage.bn.weight"] = np.array([0.2, -0.3])
    tf["logits"] = tf["logits"] + np.array([0.0, 0.0, 0.0, 2e-8] * 2).reshape(2, 4)
    tf["param/stage.bn.running_mean"] = np.array([0.1, -0.2])
    record = parity.compare_probes(tf, _probe(), steps=3)
    assert record["failed"] == list(parity.GATED) and record["passed"] is False
    assert record["loss_abs_diff"] == pytest.approx(1e-6)
    assert record["logits_max_abs_diff"] == pytest.approx(2e-8)
    assert record["grad_max_rel_diff"] == pytest.approx(0.1 / np.linalg.norm([0.2, -0.2]))
    assert record["params_rel_update_diff_after_steps"] == pytest.approx(
        np.sqrt(12) * 1e-4 / np.sqrt(12 * 1e-4 + 2 * 1e-4))
    assert record["params_max_abs_diff_after_steps"] == pytest.approx(1e-4)
    assert record["bn_running_stats_max_rel_diff"] == pytest.approx(0.1 / np.sqrt(0.02))
    assert record["grad_rel_diff_per_layer"]["conv.weight"] == 0.0
    wide = parity.compare_probes(_probe(loss=0.5 + 1e-6, dtype=np.float32),
                                 _probe(dtype=np.float32), steps=3)
    assert wide["precision"] == "float32" and wide["passed"] is True  # 1e-6 within 1e-4
    assert wide["tolerances"]["loss_abs_diff"] == 1e-4
    strict = parity.compare_probes(_probe(loss=0.5 + 1e-6, dtype=np.float32),
                                   _probe(dtype=np.float32), steps=3,
                                   tolerances=parity.FLOAT64)
    assert strict["failed"] == ["loss_abs_diff"]
    mixed = parity.compare_probes(_probe(dtype=np.float32), _probe(), steps=3)
    assert mixed["precision"] == "float32"  # float64 only where both probes are
    at_limit = parity.compare_probes(_probe(loss=0.75), _probe(), steps=3,
                                     tolerances=parity.Tolerances(loss_abs_diff=0.25))
    assert at_limit["loss_abs_diff"] == 0.25 and at_limit["passed"] is True  # the limit passes
    nan = _probe()
    nan["loss"] = np.array(np.nan)
    assert parity.compare_probes(nan, _probe(), steps=3)["failed"] == ["loss_abs_diff"]


def test_a_probe_without_batchnorm_or_with_a_missing_gradient():
    plain = {k: v for k, v in _probe().items() if "bn" not in k}
    record = parity.compare_probes(plain, plain, steps=3)
    assert record["bn_running_stats_max_rel_diff"] == 0.0 and record["conventions"] == []
    lacking = {k: v for k, v in _probe().items() if not k.startswith("grad/")}
    with pytest.raises(ValueError) as refused:
        parity.compare_probes(lacking, _probe(), steps=3)
    assert str(refused.value) == ("the TensorFlow probe lacks gradients for conv.weight, "
                                  "stage.bn.weight")


def _failed_after_steps(update: float | None, running: float | None) -> dict:
    return {"passed": False, "failed": list(parity.AFTER_STEPS),
            "params_rel_update_diff_after_steps": update, "bn_running_stats_max_rel_diff": running}


def test_update_failures_within_twice_their_noise_floor_pass_and_say_so():
    noise = {"params_rel_update_diff_after_steps": 0.1, "bn_running_stats_max_rel_diff": 0.05}
    judged = parity.judge_updates_against_noise(_failed_after_steps(0.2, 0.1), noise)
    assert judged["passed"] is True and judged["failed"] == []
    assert judged["update_noise_floor"] == 0.1 and judged["noise_floors"] == noise
    assert judged["update_gate"] == ("0.2 of the update, within 2 x its noise floor 0.1 "
                                     "(PyTorch against itself, weights moved by 1 ulp)")
    over = parity.judge_updates_against_noise(_failed_after_steps(0.21, 0.1), noise)
    assert over["passed"] is False and over["failed"] == ["params_rel_update_diff_after_steps"]
    assert over["update_gate"].startswith("0.21 of the update, over 2 x its noise floor 0.1")
    stats_over = parity.judge_updates_against_noise(_failed_after_steps(0.1, 0.11), noise)
    assert stats_over["failed"] == ["bn_running_stats_max_rel_diff"]
    early = {**_failed_after_steps(0.1, 0.1), "failed": ["loss_abs_diff",
                                                         *parity.AFTER_STEPS]}
    assert parity.judge_updates_against_noise(early, noise) is early  # not the floor's to judge
    passed = {"passed": True, "failed": []}
    assert parity.judge_updates_against_noise(passed, noise) is passed


def test_a_figure_the_check_could_not_measure_fails_its_floor_too():
    noise = {"params_rel_update_diff_after_steps": 0.1, "bn_running_stats_max_rel_diff": 0.05}
    judged = parity.judge_updates_against_noise(_failed_after_steps(0.1, None), noise)
    assert judged["passed"] is False and judged["failed"] == ["bn_running_stats_max_rel_diff"]
    assert math.isnan(parity_record.figure(_failed_after_steps(None, 0.1),
                                    "params_rel_update_diff_after_steps"))


def test_a_saved_record_is_read_back_only_if_it_is_one():
    record = parity.compare_probes(_probe(), _probe(), steps=3)
    assert parity_record.from_json(json.loads(json.dumps(record))) == record
    for not_one in (None, [], {}, {"passed": "yes"}, {"passed": 1}):
        assert parity_record.from_json(not_one) is None, not_one


def test_the_terminal_lines_give_the_verdict_every_figure_and_the_drift():
    record = parity.compare_probes(_probe(), _probe(), steps=3)
    assert parity.describe(record) == (
        "parity passed in float64: logits 0.00e+00, loss 0.00e+00, gradients 0.00e+00 (rel), "
        "updates after 3 steps 0.00e+00 (rel), running statistics 0.00e+00 (rel)")
    failed = {**record, "passed": False, "precision": "float32", "loss_abs_diff": 0.25,
              "float64_unsupported": "pool2 (MaxPool): TypeError: no kernel",
              "bn_running_stats_max_rel_diff": 0.5}
    assert parity.describe(failed) == (
        "parity FAILED in float32 (float32: pool2 (MaxPool): TypeError: no kernel): logits "
        "0.00e+00, loss 2.50e-01, gradients 0.00e+00 (rel), updates after 3 steps 0.00e+00 "
        "(rel), running statistics 5.00e-01 (rel)")
    older = {k: v for k, v in record.items() if k not in ("precision",
                                                          "bn_running_stats_max_rel_diff")}
    assert parity.describe(older) == (  # a record from before float64 and running statistics
        "parity passed in float32: logits 0.00e+00, loss 0.00e+00, gradients 0.00e+00 (rel), "
        "updates after 3 steps 0.00e+00 (rel), running statistics 0.00e+00 (rel)")
    assert parity.describe({"error": "the TensorFlow probe died"}) == (
        "parity check could not run: the TensorFlow probe died")
    timed = {"configuration": {"device": "gpu"}, "agrees": False,
             "noise_floor": {"params_rel_update_diff_after_steps": 0.01},
             "figures": {"params_rel_update_diff_after_steps": 0.05, "grad_max_rel_diff": 0.002}}
    line = ("  timed configuration (gpu), measured, not gated: updates differ by 5.00e-02 (rel) "
            "against a noise floor of 1.00e-02, gradients 2.00e-03: OUTSIDE the frameworks' own "
            "drift")
    assert parity.describe_drift(timed) == line
    assert parity.describe({**record, "timed_configuration": timed}).endswith("(rel)\n" + line)
    assert parity.describe_drift({**timed, "agrees": True}).endswith(
        ": within the frameworks' own drift")
    assert parity.describe_drift({"configuration": {"device": "cpu"}, "error": "no GPU"}) == (
        "  the timed configuration's drift (cpu) not measured: no GPU")
    assert parity.describe_drift({"error": "no GPU"}) == (
        "  the timed configuration's drift () not measured: no GPU")


def test_the_matched_runs_parity_record_is_lent_to_a_report_of_other_runs_saying_so():
    """The check runs once, on the matched runs' settings: a report of the runs at their
    defaults or their best holds the same record with `runs` naming them; none stays none."""
    record = {"passed": True, "steps": 3}
    assert parity.for_runs_beside(record, "defaults") == {"passed": True, "steps": 3,
                                                          "runs": "defaults"}
    assert record == {"passed": True, "steps": 3}  # the matched report's own is left as it is
    assert parity.for_runs_beside(None, "best") is None
