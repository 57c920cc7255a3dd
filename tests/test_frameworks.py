"""Each framework's trainer, by one test for both where the behaviour is shared (a real step,
reduced precision on CPU, the CLI path), and one for each where the mechanism differs
(TensorFlow's MirroredStrategy over 2 logical CPUs and XLA; PyTorch's DDP over 2 gloo
processes and DataLoader workers)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import tiny_config, trainer_for

from compare import schema
from compare.cli import cli
from compare.experiment import datasets
from compare.experiment.config import PipelineConfig
from compare.machine import allocator
from compare.run import loop
from compare.run import recorder as recorder_module

# What each framework calls the shared settings, where the tests check them.
OWN = {
    "tf": {"bf16_policy": "mixed_bfloat16", "model_file": "model.keras", "bn_as_set": 0.9,
           "loss_rel": 1e-5},
    "torch": {"bf16_policy": "autocast bfloat16", "model_file": "model.pt", "bn_as_set": 0.1,
              "loss_rel": 1e-6},
}


@pytest.mark.machine_sensitive  # weights within float32 rounding of the kernels
def test_one_step_applies_the_pytorch_form_sgd_update(tmp_path, framework):
    name, module = framework
    trainer = trainer_for(module, tiny_config(tmp_path, weight_decay=0.01))
    batch = next(iter(trainer.batches(0)))
    before = trainer.weights()
    _, loss_before, grads = trainer.gradients(batch)
    trainer.reset()
    loss = trainer.train_step(batch, 0.1)
    after = trainer.weights()
    assert float(loss) == pytest.approx(loss_before, rel=OWN[name]["loss_rel"])
    for weight, g in grads.items():  # first step: v = g + wd * w, w -= lr * v
        np.testing.assert_allclose(after[weight],
                                   before[weight] - 0.1 * (g + 0.01 * before[weight]), atol=1e-6)
    for _ in range(15):
        trainer.train_step(batch, 0.05)
    assert trainer.gradients(batch)[1] < 0.75 * loss_before  # it learns the batch


@pytest.mark.machine_sensitive  # bfloat16 native or emulated
def test_mixed_precision_is_bfloat16_on_a_cpu(tmp_path, framework):
    """--precision mixed on a CPU computes in bfloat16 without loss scaling; the first step's
    loss is the float32 one within bfloat16's rounding."""
    name, module = framework
    trainer = trainer_for(module, tiny_config(tmp_path, precision="mixed"))
    assert trainer.numerics["policy"] == OWN[name]["bf16_policy"]
    assert not trainer.numerics["loss_scaling"]  # loss scaling only for float16
    assert trainer.manifest()["precision_policy"] == OWN[name]["bf16_policy"]
    batch = next(iter(trainer.batches(0)))
    fp32 = trainer_for(module, tiny_config(tmp_path)).gradients(batch)[1]
    computed = []  # the dtype each convolution computed in, during the step itself
    if name == "torch":
        hooks = [m.register_forward_hook(lambda m, i, out: computed.append(str(out.dtype)))
                 for key, m in trainer.model.named_layers.items() if key.startswith("conv")]
    loss = float(trainer.train_step(batch, 0.01))
    assert np.isfinite(loss) and loss == pytest.approx(fp32, abs=0.05)
    if name == "tf":
        assert trainer.model.get_layer("conv1").compute_dtype == "bfloat16"
        assert trainer.model.output.dtype == "float32"  # logits cast back for the loss
    else:
        while hooks:
            hooks.pop().remove()
        assert computed == ["torch.bfloat16"] * 2  # lenet's conv1 and conv2, under autocast
        assert not trainer.scaler.is_enabled()  # GradScaler only for float16


@pytest.mark.parametrize("name", ["tf", "torch"])
def test_cli_run_writes_a_valid_result(tmp_path, name):
    out = tmp_path / "cli"
    outcome = CliRunner().invoke(cli, ["run", "--framework", name, "--dataset", "synthetic",
                                       "--synthetic-size", "320", "--epochs", "2",
                                       "--precision", "fp32", "--workers", "0", "--device", "cpu",
                                       "--out", str(out), "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    result = schema.read_result(out / "result.json")
    summary = result["summary"]
    assert summary.status == "completed" and len(result["epochs"]) == 2
    assert 0.0 <= summary.final_test_accuracy <= 1.0
    assert summary.steady_step_time_ms.median > 0 and summary.images_per_s > 0
    assert (summary.peak_device_memory_bytes is None
            and "CPU" in summary.peak_device_memory_note)
    assert result["fairness"]["precision_policy"] == "float32"
    assert result["fairness"]["bn_momentum"] == {"torch_convention": 0.1,
                                                 "as_set": OWN[name]["bn_as_set"],
                                                 "set_by": "the run"}
    assert result["fairness"]["init_source"].startswith("shared numpy weights")
    # the framework's process kept its freed buffers (compare.machine.allocator)
    users = [n for n in allocator.USER_SETTINGS if n in os.environ]
    assert result["fairness"]["host_allocator"]["set_by"] == (
        "nobody: not glibc, left as it is" if allocator._glibc()[0] is None
        else f"the environment ({', '.join(users)})" if users else "cnncompare")
    steps = (out / "steps.csv").read_text().splitlines()
    assert steps[0] == "global_step,epoch,lr,loss" and len(steps) == 1 + 2 * 10
    assert (out / OWN[name]["model_file"]).exists() and (out / "windows.csv").exists()
    assert json.loads((out / "config.json").read_text())["framework"] == name


# TensorFlow's own mechanisms


@pytest.mark.machine_sensitive  # weights agree within float32 rounding of two reductions
def test_mirrored_strategy_on_two_logical_cpus_matches_one_device(tmp_path, tf_two_cpus):
    """Loss scaled by the global batch and summed over replicas = the global-batch mean:
    after an epoch of steps the weights agree, and so does every step's loss."""
    one = tiny_config(tmp_path)
    two = one.replace(devices=2)
    a, b = trainer_for(tf_two_cpus, one), trainer_for(tf_two_cpus, two)
    assert a.replicas == 1 and b.replicas == 2
    assert b.choice.shared_chip and not a.choice.shared_chip  # logical devices of one CPU
    # each replica's variables on its own device, as TensorFlow placed them
    assert a.manifest()["weights_on"] == ["/cpu:0"]
    assert b.manifest()["weights_on"] == ["/cpu:0", "/cpu:1"]
    losses_a, losses_b = [], []
    for batch_a, batch_b in zip(a.batches(0), b.batches(0)):
        losses_a.append(float(a.train_step(batch_a, 0.05)))
        losses_b.append(float(b.train_step(batch_b, 0.05)))
    assert len(losses_a) == 8
    np.testing.assert_allclose(losses_b, losses_a, rtol=1e-5)
    wa, wb = a.weights(), b.weights()
    for weight in wa:
        np.testing.assert_allclose(wb[weight], wa[weight], atol=2e-6, err_msg=weight)


def _trained_and_recorded(module, config) -> tuple[object, dict, list[float]]:
    """A trainer after the shared loop's epochs, its result.json and its steps' losses."""
    trainer = trainer_for(module, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    out = Path(config.out)
    steps = (out / "steps.csv").read_text().splitlines()[1:]
    return trainer, schema.read_result(out / "result.json"), [float(row.split(",")[3])
                                                              for row in steps]


@pytest.mark.machine_sensitive  # XLA's fused kernels round unlike eager ones
def test_xla_compiles_the_step_and_trains_as_eager_does(tmp_path, tf_two_cpus):
    """What compiled is read from TensorFlow: the traced forward/backward marked for XLA and
    the HLO XLA builds for it, and the run's result.json says so; with --no-compile (the
    negative control) nothing is."""
    plain, plain_result, plain_losses = _trained_and_recorded(
        tf_two_cpus, tiny_config(tmp_path, out=str(tmp_path / "eager")))
    xla, result, losses = _trained_and_recorded(
        tf_two_cpus, tiny_config(tmp_path, compile=True, out=str(tmp_path / "xla")))
    assert len(losses) == 8
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-4)
    compiled = xla.compilation()
    # every trace marked for XLA (the training step's and the evaluation's)
    assert compiled["compiled"] and compiled["traces"] == compiled["xla_traces"] >= 1
    assert compiled["hlo_instructions"] > 50  # LeNet's convolutions, dots and their gradients
    recorded = result["compilation"]  # the record of a compiled run (taken after training)
    assert recorded["compiled"] and recorded["traces"] == recorded["xla_traces"] >= 1
    assert recorded["hlo_instructions"] > 50
    plain_record = plain.compilation()
    assert plain_record == plain_result["compilation"]
    cache = plain_record.pop("cache")  # no cache folder named in this process: nothing found
    assert plain_record == {"compiler": "XLA (jit_compile)", "compiled": False, "traces": 1,
                            "xla_traces": 0, "hlo_instructions": 0}
    assert (cache["entries_found"], cache["misses"], cache["hits"]) == (0, 0, 0)
    assert "XLA" in xla.manifest()["compile"]
    # As Model.fit's jit_compile: XLA's program holds the update too, so it reads each
    # weight's momentum buffer besides the batch and the weights; under a strategy (here
    # MirroredStrategy on one device), whose update all-reduces, the forward and backward only
    weights = len(xla.model.trainable_variables)
    assert _xla_program_inputs(xla) >= 2 + 2 * weights
    mirrored = trainer_for(tf_two_cpus, tiny_config(tmp_path, compile=True, strategy="mirrored",
                                                    out=str(tmp_path / "mirrored")))
    assert mirrored.train_step(next(iter(mirrored.batches(1))), 0.01) is not None
    assert _xla_program_inputs(mirrored) == 2 + weights


def _xla_program_inputs(trainer) -> int:
    """The parameters of the entry computation of the HLO XLA builds for the trainer's
    compiled part of a step: what that program reads (the batch, variables)."""
    function = trainer._jit_part  # noqa: SLF001 - the function tf_impl/manifest.py reads
    traced = function._list_all_concrete_functions()[0]  # noqa: SLF001
    hlo = function.experimental_get_compiler_ir(*traced.structured_input_signature[0])(
        stage="hlo")
    return hlo[hlo.index("ENTRY"):].split("\n}")[0].count(" parameter(")


@pytest.mark.machine_sensitive  # whether a float16 step overflows depends on the kernels
def test_fp16_trains_on_a_cpu_with_dynamic_loss_scaling_and_records_the_scale(tmp_path,
                                                                               framework):
    """--precision fp16: the GPU's float16 mixed precision on any device, the CPU here, with
    the loss scaling both frameworks use on a GPU; each epoch records the scale."""
    name, module = framework
    config = tiny_config(tmp_path, precision="fp16", epochs=2, loss_scale_initial=256.0,
                         loss_scale_growth_interval=4)
    trainer = trainer_for(module, config)
    assert trainer.loss_scale() == 256.0  # read from the framework's own scaler, untrained
    try:
        recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
        assert loop.train_epochs(trainer, config, recorder) == 0
        manifest = trainer.manifest()
    finally:
        if name == "tf":
            module.keras.mixed_precision.set_global_policy("float32")
    result = schema.read_result(tmp_path / "run" / "result.json")
    # 8 finite steps an epoch, a doubling every 4: 256 -> 1024 -> 4096
    assert [e["loss_scale"] for e in result["epochs"]] == [1024.0, 4096.0]
    assert all(np.isfinite(e["train_loss"]) for e in result["epochs"])
    assert manifest["precision"]["compute_type"] == "float16"
    assert manifest["loss_scaling"].startswith("dynamic")


def test_a_run_records_what_compiled(tmp_path, framework):
    """result.json holds the compiler's own account of the step (here eager: nothing; a
    compiled run's record: the XLA and torch.compile tests)."""
    name, module = framework
    config = tiny_config(tmp_path)
    trainer = trainer_for(module, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    compiled = schema.read_result(tmp_path / "run" / "result.json")["compilation"]
    assert compiled == trainer.compilation() and compiled["compiled"] is False


# PyTorch's own mechanisms


def test_torch_fused_sgd_skips_an_overflowing_first_step_as_the_stock_one_does():
    """On a GPU the optimizer is torch's fused SGD, whose momentum buffers a first step that
    GradScaler skips (an overflow) could leave as uninitialised memory. The fused kernel runs
    on CPU tensors too: from such a start, four steps of it move the weights as the stock
    SGD's do (within float32 rounding: the kernels differ)."""
    import torch

    from compare.experiment.config import RunConfig
    from compare.run.interface import DeviceChoice
    from torch_impl.optimizer import make_optimizer
    config = RunConfig(lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    choices = {"stock": DeviceChoice("cpu", ("cpu",), None, "CPU"),
               "fused": DeviceChoice("gpu", ("cuda:0",), None, "GPU")}  # fused, on the CPU
    inputs = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))
    weights, scales = {}, {}
    for name, choice in choices.items():
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        optimizer = make_optimizer(model, config, choice)
        assert bool(optimizer.defaults.get("fused")) == (name == "fused")
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24, growth_interval=1000)
        for step in range(4):
            optimizer.zero_grad()
            scaler.scale(model(inputs).square().mean()).backward()
            if step == 0:
                model.weight.grad[0, 0] = float("inf")  # the overflow: the step is skipped
            scaler.step(optimizer)
            scaler.update()
        weights[name], scales[name] = [p.detach().clone() for p in model.parameters()], \
            scaler.get_scale()
    assert scales["fused"] == scales["stock"] == 2.0 ** 23  # halved once, then finite
    for fused, stock in zip(weights["fused"], weights["stock"]):
        assert torch.isfinite(fused).all()
        torch.testing.assert_close(fused, stock, rtol=1e-5, atol=1e-6)


@pytest.mark.machine_sensitive  # inductor's kernels round unlike eager ones
@pytest.mark.slow  # inductor compiles C++ kernels: seconds on 2 cores
def test_torch_compile_captures_the_step_in_one_graph_and_trains_as_eager_does(tmp_path):
    """What compiled is read from dynamo's counters: the model in one graph, no graph break;
    the eager trainer (the negative control) compiles nothing."""
    from torch_impl import train as torch_train
    eager, eager_result, eager_losses = _trained_and_recorded(
        torch_train, tiny_config(tmp_path, out=str(tmp_path / "eager")))
    eager_record = eager.compilation()
    assert eager_record == eager_result["compilation"]
    cache = eager_record.pop("cache")
    assert eager_record == {"compiler": "torch.compile (dynamo + inductor)", "compiled": False,
                            "graphs": 0, "graph_breaks": 0, "frames": 0}
    assert (cache["hits"], cache["misses"], cache["compile_s"]) == (0, 0, 0.0)
    compiled, result, losses = _trained_and_recorded(
        torch_train, tiny_config(tmp_path, compile=True, out=str(tmp_path / "compiled")))
    assert compiled.device.type == "cpu" and len(losses) == 8
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-4)
    found = compiled.compilation()
    assert found["compiled"] and found["graphs"] >= 1 and found["graph_breaks"] == 0
    assert found["frames"] >= 1
    assert result["compilation"] == found  # the record of a compiled run
    for name, value in compiled.weights().items():
        np.testing.assert_allclose(value, eager.weights()[name], rtol=1e-4, atol=1e-6,
                                   err_msg=name)


def test_dataloader_workers_deliver_the_same_batches(tmp_path):
    import torch

    from torch_impl import train as torch_train
    inline = trainer_for(torch_train, tiny_config(tmp_path))
    workers = trainer_for(torch_train, tiny_config(tmp_path, pipeline=PipelineConfig(workers=2)))
    for a, b in zip(inline.batches(1), workers.batches(1)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _ddp_against_one_process(tmp_path, **two_changes):
    """Train one process and two gloo DDP processes on the same global batches; assert the
    weights after an epoch agree; the two-process run's result."""
    import torch

    from torch_impl import train as torch_train
    one = tiny_config(tmp_path, out=str(tmp_path / "one"))
    two = one.replace(devices=2, out=str(tmp_path / "two"), **two_changes)
    dataset = datasets.config_dataset(one)
    assert torch_train.train(one, dataset) == 0
    assert torch_train.train(two, dataset) == 0
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True)["state_dict"]
            for d in ("one", "two"))
    for weight in a:
        np.testing.assert_allclose(b[weight].numpy(), a[weight].numpy(), atol=2e-6,
                                   err_msg=weight)
    return (schema.read_result(tmp_path / "one" / "result.json"),
            schema.read_result(tmp_path / "two" / "result.json"))


@pytest.mark.machine_sensitive  # two reductions of one batch, float32 rounding
@pytest.mark.slow  # two DDP processes and one (14-16 s under pytest -n 2)
def test_ddp_two_gloo_processes_match_one_process_on_the_same_global_batch(tmp_path):
    """Averaged gradients over 2 ranks = the gradient of the global batch: after every step of
    an epoch the weights agree, and so do the recorded global-batch losses."""
    ra, rb = _ddp_against_one_process(tmp_path)
    assert (rb["summary"].replicas == 2
            and rb["fairness"]["distribution"] == "DistributedDataParallel (gloo)")
    assert rb["fairness"]["per_replica_batch"] == 16
    assert (ra["environment"]["hardware"]["shared_chip"], rb["environment"]["hardware"][
        "shared_chip"]) == (False, True)  # two processes on one CPU
    assert rb["epochs"][0]["train_loss"] == pytest.approx(ra["epochs"][0]["train_loss"], rel=1e-5)


@pytest.mark.machine_sensitive  # two reductions of one batch, float32 rounding
def test_the_device_pipeline_trains_two_ddp_processes_as_one(tmp_path):
    """--devices 2 --pipeline device: each gloo process holds the training set on its own
    device and gathers its half of every global batch there; the weights after an epoch are
    the one-process loader run's."""
    _, rb = _ddp_against_one_process(tmp_path, pipeline=PipelineConfig.preset("device"))
    assert rb["fairness"]["pipeline"]["kind"] == "device" and rb["fairness"]["replicas"] == 2


@pytest.mark.machine_sensitive  # two loops' kernels, float32 rounding
def test_own_loop_trains_the_shared_loops_steps(tmp_path, framework):
    """The framework's own loop (Keras compile + fit; the plain PyTorch loop) on the same
    initial weights, batches and per-step learning rates gives the shared loop's per-step
    losses, in float32 on a CPU, over an epoch of a one-cycle schedule.

    The own loops report a running mean of the loss after each call (Keras' fit reports
    nothing else), so each step's loss is recovered as k * mean_k - (k - 1) * mean_(k-1).
    Measured here: 0 (PyTorch: the same ops in the same order) and 4e-7 relative
    (Keras: its compile loss takes the batch mean where the shared step divides the sum by
    the global batch; the recovery multiplies float32 rounding by k <= 8). The bound, 1e-4,
    is well above that and 10x below the smallest step-to-step change of the loss here
    (0.0026), which the test checks, so a loop that trained other batches or rates could
    not pass it."""
    import importlib

    from compare.experiment.recipe import learning_rate
    from compare.run.own_loop import WindowClock
    name, module = framework
    config = tiny_config(tmp_path, schedule="onecycle", lr=0.05, augment=True)
    shared = trainer_for(module, config)
    steps = shared.steps_per_epoch
    lrs = [learning_rate(config, step, steps) for step in range(steps)]
    batches = shared.batches(0)
    expected, _ = shared.read_steps([shared.train_steps(batches, [lr]) for lr in lrs])

    own_loop = importlib.import_module(f"{module.__package__}.own_loop")
    trainer = trainer_for(module, config)
    clock = WindowClock(config.replace(timing_window=3), trainer.steps_per_call, trainer.sync)
    mean_losses: list[list[float]] = []
    handed = list(own_loop.own_loop(trainer, config, datasets.config_dataset(config), lrs,
                                    clock, mean_losses))
    assert [s for s, _ in mean_losses] == list(range(1, steps + 1))
    # a pause after each whole window (the caller's turn), then the epoch's seconds (its
    # last, shorter window closes with the epoch)
    assert handed[:-1] == [None] * (steps // 3) and handed[-1] > 0
    # windows of 3 whole calls (one step each), the last one what is left, inside the epoch
    assert [w["steps"] for w in clock.windows] == [3] * (steps // 3) + (
        [steps % 3] if steps % 3 else [])
    assert {w["epoch"] for w in clock.windows} == {1}
    assert 0 < sum(w["seconds"] for w in clock.windows) <= handed[-1]
    means = [m for _, m in mean_losses]
    own = [k * means[k - 1] - (k - 1) * (means[k - 2] if k > 1 else 0.0)
           for k in range(1, steps + 1)]
    differences = [abs(a - b) / abs(b) for a, b in zip(own, expected)]
    changes = [abs(b - a) / abs(a) for a, b in zip(expected, expected[1:])]
    assert max(differences) <= 1e-4, differences
    assert min(changes) >= 1e-3, changes  # the bound tells one step from the next
