"""The float64 parity gate against deliberately broken builds: each semantic slip in a twin
fails it far above its limit, a layer without a float64 kernel falls back to float32 naming
it, a framework that cannot run is named as that, and the report shows the gate beside the
timed configuration's drift."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_config

from benchmarks.parity_slips import SLIPS, slipped
from compare.experiment import datasets, parity
from compare.run import worker

# precision-sensitive: CI runs these again as on an AVX2-only CPU
# Both frameworks' float64 probes of each slip (30-60 s in all under pytest -n 2): the
# heavy tier, and CI's AVX2 pass
pytestmark = [pytest.mark.machine_sensitive, pytest.mark.slow]


MY_CNN = str(Path(__file__).resolve().parents[1] / "examples" / "my_cnn.py")


def _probe(tmp_path, module, name: str, **changes) -> dict:
    """One framework's float64 probe of examples/my_cnn.py (a strided convolution, depthwise
    ones, BatchNorm, residual adds; the probe's 8 images) in this process."""
    import keras

    from compare.machine import precision_choice
    # resolved as the parity check resolves the probe's config before starting its process
    config = precision_choice.carry(parity.probe_config(tiny_config(
        tmp_path, model=MY_CNN, batch_size=parity.PROBE_BATCH, **changes)))
    path = tmp_path / f"{name}.npz"
    try:
        worker.probe(module, config, datasets.config_dataset(config), path, 3)
    finally:
        keras.mixed_precision.set_global_policy("float32")
        keras.config.set_floatx("float32")
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def honest(tmp_path_factory, tf_two_cpus):
    """Both frameworks' float64 probes of the unbroken builds."""
    from torch_impl import train as torch_train
    tmp_path = tmp_path_factory.mktemp("honest")
    return {"tf": _probe(tmp_path, tf_two_cpus, "tf"),
            "torch": _probe(tmp_path, torch_train, "torch")}


def test_the_unbroken_small_build_passes_in_float64(honest):
    record = parity.compare_probes(honest["tf"], honest["torch"], steps=3)
    assert record["passed"], {k: record[k] for k in parity.GATED}
    assert all(record[k] < getattr(parity.FLOAT64, k) / 100 for k in parity.GATED), record


@pytest.mark.parametrize("slip", list(SLIPS))
def test_a_semantic_slip_fails_the_float64_gate(tmp_path, tf_two_cpus, honest, slip):
    """The smallest slips one can make in a twin, each in Keras' build alone: the figure
    it moves stands over 100x above its float64 limit (the figures are printed)."""
    with slipped(slip):
        record = parity.compare_probes(_probe(tmp_path, tf_two_cpus, "tf"), honest["torch"],
                                       steps=3)
    figure = SLIPS[slip].figure
    limit = getattr(parity.FLOAT64, figure)
    print(f"{slip}: {figure} {record[figure]:.3g}, {record[figure] / limit:.3g}x its limit "
          f"{limit:g}; failed {record['failed']}")
    assert not record["passed"] and figure in record["failed"]
    assert record[figure] > 100 * limit


def test_the_running_variance_convention_is_named_not_hidden(honest):
    """Compared without mapping PyTorch's unbiased running variance to Keras' biased one,
    the running statistics fail the gate: the convention is measured apart, exactly."""
    torch_as_biased = {**honest["torch"], "running_variance_unbiased": np.bool_(False)}
    record = parity.compare_probes(honest["tf"], torch_as_biased, steps=3)
    assert record["failed"] == ["bn_running_stats_max_rel_diff"]
    print(f"unmapped: {record['bn_running_stats_max_rel_diff']:.3g}")
    # n/(n-1) with n = 8 images x 16 x 16 positions at the smallest: 5.6e-5 measured
    limit = parity.FLOAT64.bn_running_stats_max_rel_diff
    assert record["bn_running_stats_max_rel_diff"] > 10 * limit


@pytest.fixture
def probes_in_this_process(monkeypatch, tf_two_cpus):
    """compare.process.parity_check's probes run here, one after another (as the probe
    subprocess would run them, its error line kept), so a test can patch a twin."""
    import keras

    from compare.process import runner
    from torch_impl import train as torch_train
    modules = {"tf": tf_two_cpus, "torch": torch_train}

    def run_probe(config, path, steps, perturb=False, floor=None, then=None):
        try:
            worker.probe(modules[config.framework], config, datasets.config_dataset(config),
                         path, steps, perturb, floor)
            if then is not None:
                follow, follow_path, follow_floor = then
                worker.probe(modules[config.framework], follow,
                             datasets.config_dataset(follow), follow_path, steps,
                             floor=follow_floor)
            return 0, None
        except Exception as exc:  # noqa: BLE001 - as the subprocess's one line
            return 1, f"{exc.__class__.__name__}: {exc}"
        finally:
            keras.mixed_precision.set_global_policy("float32")
            keras.config.set_floatx("float32")
    monkeypatch.setattr(runner, "run_probe", run_probe)
    monkeypatch.setattr(runner, "concurrently", lambda jobs, at_once=2: [j() for j in jobs])


def test_a_layer_without_a_float64_kernel_falls_back_to_float32_naming_it(
        tmp_path, probes_in_this_process, monkeypatch):
    """PyTorch made to refuse float64 max pooling: the check says which framework and layer,
    gates in float32 against the noise floor instead, and still measures the drift."""
    import torch

    from compare.experiment import specs
    from compare.process import parity_check
    from torch_impl import model as torch_model

    class NoFloat64MaxPool(torch.nn.MaxPool2d):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise NotImplementedError("\"max_pool2d\" not implemented for 'Double'")
            return super().forward(x)
    monkeypatch.setitem(torch_model.TORCH_LAYERS, specs.MaxPool,
                        lambda layer, norm, net: NoFloat64MaxPool(layer.size))
    record = parity_check.run_parity(tiny_config(tmp_path, model="lenet"), tmp_path / "parity")
    assert record["float64_unsupported"] == (
        "PyTorch has no float64 kernel for layer pool1 (MaxPool): NotImplementedError: "
        "\"max_pool2d\" not implemented for 'Double'")
    assert record["passed"] and record["precision"] == "float32"
    assert record["tolerances"] == dataclasses.asdict(parity.Tolerances())
    assert record["timed_configuration"]["agrees"]
    assert "float32: PyTorch has no float64 kernel for layer pool1" in parity.describe(record)


def test_a_framework_that_cannot_run_is_named_not_called_a_different_experiment(
        tmp_path, probes_in_this_process, monkeypatch):
    from compare.errors import DeviceError
    from compare.process import parity_check
    from torch_impl import train as torch_train

    def no_device(config):
        raise DeviceError("CUDA error: no kernel image is available for execution on the device")
    monkeypatch.setattr(torch_train, "select_device", no_device)
    record = parity_check.run_parity(tiny_config(tmp_path, model="lenet"), tmp_path / "parity")
    assert not record["passed"] and record["failed"] == ["probe"]
    assert record["errors"] == {"torch": {
        "device": "the CPU, float64",
        "line": "DeviceError: CUDA error: no kernel image is available for execution on the "
                "device"}}
    said = parity.describe(record)
    assert said.startswith("parity check could not run: PyTorch on the CPU, float64: "
                           "DeviceError: CUDA error") and "same experiment" not in said


def test_on_a_cpu_each_gate_process_probes_the_timed_configuration_next(
        tmp_path, probes_in_this_process, monkeypatch):
    """On the CPU one process a framework probes the gate and then the timed configuration
    (two calls, not four): the timed figures are those of the timed configuration probed in
    processes of its own. A timed probe that fails after the gate's leaves the gate passed
    and the drift not measured, with the failure's line."""
    from compare.experiment import precision_rule
    from compare.process import parity_check, runner
    probe = runner.run_probe
    calls = []

    def counted(config, path, steps, perturb=False, floor=None, then=None):
        calls.append(then is not None)
        return probe(config, path, steps, perturb, floor, then)
    monkeypatch.setattr(runner, "run_probe", counted)
    config = tiny_config(tmp_path, model="lenet")
    record = parity_check.run_parity(config, tmp_path / "together")
    assert calls == [True, True] and record["passed"]
    alone = parity_check._timed_record(parity.timed_config(config), tmp_path / "alone", 3)
    together = record["timed_configuration"]
    assert [together["configuration"].pop("probed_in"), alone["configuration"].pop("probed_in")
            ] == [{"tf": "its gate's process", "torch": "its gate's process"},
                  {"tf": "a process of its own", "torch": "a process of its own"}]
    assert together == alone and alone["agrees"]

    real = worker.probe

    def no_float32(module, config, *args, **kwargs):
        if config.precision != precision_rule.PROBE_ONLY:
            raise RuntimeError("float32 kernel failed")
        return real(module, config, *args, **kwargs)
    monkeypatch.setattr(worker, "probe", no_float32)
    record = parity_check.run_parity(config, tmp_path / "failed")
    assert record["passed"] and "float32 kernel failed" in record["timed_configuration"]["error"]


def test_a_network_of_many_layers_probes_tensorflows_timed_configuration_apart(
        tmp_path, probes_in_this_process, monkeypatch):
    """From APART_FROM_LAYERS layers on, TensorFlow's timed probe is a call of its own,
    started before the others, and PyTorch's stays chained after its gate; the record says so
    and is the chained check's, figure for figure. One layer fewer than the network has:
    chained."""
    from compare.experiment import networks, precision_rule, specs
    from compare.process import parity_check, runner
    probe = runner.run_probe
    calls = []

    def counted(config, path, steps, perturb=False, floor=None, then=None):
        calls.append((config.framework, config.precision == precision_rule.PROBE_ONLY,
                      then is not None))
        return probe(config, path, steps, perturb, floor, then)
    monkeypatch.setattr(runner, "run_probe", counted)
    config = tiny_config(tmp_path, model="lenet")
    layers = len(list(specs.walk(networks.get_spec("lenet").layers)))
    monkeypatch.setattr(parity_check, "APART_FROM_LAYERS", layers)
    apart = parity_check.run_parity(config, tmp_path / "apart")
    assert calls == [("tf", True, False), ("tf", False, False), ("torch", True, True)]
    calls.clear()
    monkeypatch.setattr(parity_check, "APART_FROM_LAYERS", layers + 1)
    chained = parity_check.run_parity(config, tmp_path / "chained")
    assert calls == [("tf", True, True), ("torch", True, True)]
    assert apart["passed"] and apart["timed_configuration"]["agrees"]
    # the record says which process probed the timed configuration, and is otherwise the same
    said = [record["timed_configuration"]["configuration"].pop("probed_in")
            for record in (apart, chained)]
    assert said == [{"tf": "a process of its own", "torch": "its gate's process"},
                    {"tf": "its gate's process", "torch": "its gate's process"}]
    assert apart["timed_configuration"]["configuration"]["images"] == parity.TIMED_PROBE_BATCH
    assert apart == chained


def test_the_report_shows_the_float64_gate_beside_the_timed_drift():
    from compare.report import sections
    timed = {"configuration": {"device": "the GPU, float16"}, "agrees": False,
             "figures": {k: 0.5 for k in parity.GATED},
             "noise_floor": {k: 0.01 for k in parity.GATED}}
    record = {"passed": True, "precision": "float64", "method": "float64 on the CPU",
              "tolerances": dataclasses.asdict(parity.FLOAT64), "timed_configuration": timed,
              "conventions": [parity.RUNNING_VARIANCE], **{k: 1e-13 for k in parity.GATED}}
    section = sections.parity(sections.Group({"parity": record}))
    assert section.columns == ("Check", "Gate (float64)", "Limit", "Timed: TF vs PyTorch",
                               "Own drift (floor)")
    assert section.rows[3] == ["params_rel_update_diff_after_steps", "1e-13", "1e-06", "0.5",
                               "0.01"]
    assert "**PASSED** (the float64 gate)" in section.intro
    assert "(the GPU, float16) drifts OUTSIDE the frameworks' own run-to-run drift" in (
        section.intro)
    assert section.items == [parity.RUNNING_VARIANCE]
    failed = sections.parity(sections.Group({"parity": {
        "passed": False, "error": "PyTorch on the GPU, float16: CUDA error: no kernel image"}}))
    assert failed.intro.startswith("**COULD NOT RUN**: PyTorch on the GPU, float16: CUDA error")
    assert "same experiment" not in failed.intro
