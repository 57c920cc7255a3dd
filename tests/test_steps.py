"""Step batching (--steps-per-call), timing windows of whole calls sized by time, and TF's
--strategy: K steps per call compute what K calls of one step compute, the per-step rows
stay one per step, and the windows are the ones the settings ask for."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import patience, tiny_config
from test_reliability import FakeTrainer

from compare import schema
from compare.cli import cli
from compare.experiment import datasets, networks, settings
from compare.experiment.config import (
    DEFAULT_STEPS_PER_CALL,
    PipelineConfig,
    RunConfig,
    steps_per_call,
)
from compare.experiment.recipe import learning_rate
from compare.process import sweep
from compare.run import fairness, loop
from compare.run import recorder as recorder_module


def _steps(out: Path) -> list[dict[str, str]]:
    with open(out / "steps.csv") as f:
        return list(csv.DictReader(f))


def _windows(out: Path) -> list[dict[str, str]]:
    with open(out / "windows.csv") as f:
        return list(csv.DictReader(f))


def _train(module, config):
    """A real run through compare.run.loop; the trainer, for its traces."""
    trainer = module.Trainer(config, datasets.config_dataset(config), module.select_device(config))
    manifest = fairness.manifest(config, trainer.choice, trainer.replicas, trainer.manifest())
    record = recorder_module.Recorder(config, trainer, trainer.spec, {}, manifest, {})
    assert loop.train_epochs(trainer, config, record) == 0
    return trainer


def _config(tmp_path, framework: str, name: str, **changes):
    """2 epochs of 8 steps, a one-cycle schedule (every step its own learning rate)."""
    return tiny_config(tmp_path, framework=framework, epochs=2, schedule="onecycle", lr=0.05,
                       out=str(tmp_path / name), pipeline=PipelineConfig.preset("naive"),
                       **changes)


def test_steps_per_call_resolves_per_device_in_one_place():
    assert steps_per_call(RunConfig(), on_gpu=False) == DEFAULT_STEPS_PER_CALL["cpu"] == 32
    assert steps_per_call(RunConfig(), on_gpu=True) == DEFAULT_STEPS_PER_CALL["gpu"] == 32
    assert steps_per_call(RunConfig(steps_per_call=3), on_gpu=True) == 3
    assert settings.VARIABLE["steps-per-call"].shown_default() == "32 on every device"
    outcome = CliRunner().invoke(cli, ["run", "--help"])
    assert "--steps-per-call" in outcome.output and "--strategy" in outcome.output
    assert "--timing-window-s" in outcome.output


def test_tf_three_steps_per_call_give_the_losses_of_one(tmp_path, tf_two_cpus):
    """Bit for bit on CPU in float32: the same steps.csv (losses and learning rates) for K=1
    and K=3 (8 steps an epoch: calls of 3, 3 and 2), and no trace per call."""
    one = _train(tf_two_cpus, _config(tmp_path, "tf", "one", steps_per_call=1))
    three = _train(tf_two_cpus, _config(tmp_path, "tf", "three", steps_per_call=3))
    a, b = _steps(tmp_path / "one"), _steps(tmp_path / "three")
    assert len(a) == len(b) == 16 and a == b
    config = _config(tmp_path, "tf", "one")
    assert [float(r["lr"]) for r in b] == [learning_rate(config, s, 16) for s in range(16)]
    # One trace for every call length: K, and the epoch's last, shorter call.
    assert one._train_steps.experimental_get_tracing_count() == 1
    assert three._train_steps.experimental_get_tracing_count() == 1
    windows = _windows(tmp_path / "three")
    assert all(int(w["steps"]) in (2, 3, 5, 6, 8) for w in windows)  # whole calls
    assert sum(int(w["steps"]) for w in windows) == 16
    waits = [float(w["input_wait_s"]) for w in windows]  # timed in the graph
    assert all(np.isfinite(waits)) and min(waits) >= 0 and sum(waits) > 0
    result = schema.read_result(tmp_path / "three" / "result.json")
    assert result["summary"].steps_per_call == 3
    assert result["fairness"]["steps_per_call"] == 3
    assert result["fairness"]["steps_per_call_from"] == "--steps-per-call"
    assert "inside the graph" in result["fairness"]["step_batching"]


@pytest.mark.machine_sensitive  # two replicas' reductions, float32 rounding
def test_tf_steps_per_call_over_two_mirrored_replicas(tmp_path, tf_two_cpus):
    """K=3 under MirroredStrategy over 2 logical CPUs: each step's loss as on one device."""
    _train(tf_two_cpus, _config(tmp_path, "tf", "one", steps_per_call=1))
    _train(tf_two_cpus, _config(tmp_path, "tf", "two", steps_per_call=3, devices=2))
    a, b = _steps(tmp_path / "one"), _steps(tmp_path / "two")
    np.testing.assert_allclose([float(r["loss"]) for r in b], [float(r["loss"]) for r in a],
                               rtol=1e-5)


@pytest.mark.machine_sensitive  # per-batch against whole-set sums, float32 rounding
@pytest.mark.parametrize("replicas", [1, 2])
def test_tf_evaluates_the_whole_test_set_in_one_call(tmp_path, tf_two_cpus, replicas):
    """TF's evaluation reads every test batch in one call, traced once whatever the last
    batch's size (70 images in batches of 32: the last holds 6): its loss and accuracy are
    the model's on the whole normalised test set, on one device or two mirrored replicas."""
    from compare.experiment import plan
    config = tiny_config(tmp_path, synthetic_test_size=70, devices=replicas)
    dataset = datasets.config_dataset(config)
    trainer = tf_two_cpus.Trainer(config, dataset, tf_two_cpus.select_device(config))
    images = plan.normalise(dataset.test_x, dataset.mean, dataset.std)
    logits = trainer.model(images, training=False).numpy().astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    picked = shifted[np.arange(len(logits)), dataset.test_y]
    expected_loss = np.mean(np.log(np.exp(shifted).sum(axis=1)) - picked)
    expected_accuracy = np.mean(logits.argmax(axis=1) == dataset.test_y)
    for _ in range(2):
        loss, accuracy = trainer.evaluate()
        assert loss == pytest.approx(expected_loss, rel=1e-5)
        assert accuracy == pytest.approx(expected_accuracy)
    assert trainer._evaluate.experimental_get_tracing_count() == 1


@pytest.mark.machine_sensitive  # whether a float16 step overflows depends on the kernels
@pytest.mark.parametrize("replicas", [1, 2])
def test_tf_mirrored_strategy_records_its_float16_loss_scale(tmp_path, tf_two_cpus, replicas):
    """Under MirroredStrategy (asked for: one replica, or two on logical CPUs) a float16 run's
    loss scale is read each epoch: the scaler's variable is mirrored, and a float() of it
    failed the run on a GPU. 8 finite steps an epoch, a doubling every 4: 256 -> 1024."""
    config = tiny_config(tmp_path, precision="fp16", devices=replicas, strategy="mirrored",
                         loss_scale_initial=256.0, loss_scale_growth_interval=4)
    try:
        trainer = tf_two_cpus.Trainer(config, datasets.config_dataset(config),
                                      tf_two_cpus.select_device(config))
        assert trainer.replicas == replicas and trainer.loss_scale() == 256.0
        recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
        assert loop.train_epochs(trainer, config, recorder) == 0
        assert trainer.manifest()["strategy"]["wrapper"] == "MirroredStrategy"
    finally:
        tf_two_cpus.keras.mixed_precision.set_global_policy("float32")
    result = schema.read_result(tmp_path / "run" / "result.json")
    assert [e["loss_scale"] for e in result["epochs"]] == [1024.0]


def test_torch_three_steps_per_call_give_the_losses_of_one(tmp_path):
    from torch_impl import train as torch_train
    _train(torch_train, _config(tmp_path, "torch", "one", steps_per_call=1))
    _train(torch_train, _config(tmp_path, "torch", "three", steps_per_call=3))
    a, b = _steps(tmp_path / "one"), _steps(tmp_path / "three")
    assert len(a) == 16 and a == b
    result = schema.read_result(tmp_path / "three" / "result.json")
    assert result["fairness"]["strategy"]["wrapper"] is None  # auto, one replica: no DDP
    assert result["fairness"]["steps_per_call"] == result["summary"].steps_per_call == 3


@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_the_wrapper_on_one_replica_trains_as_none(tmp_path, framework, tf_two_cpus):
    """--strategy mirrored wraps one replica (MirroredStrategy; DDP in one process) and
    computes the unwrapped run's losses; auto on one replica wraps nothing, in both."""
    from torch_impl import train as torch_train
    module = tf_two_cpus if framework == "tf" else torch_train
    _train(module, _config(tmp_path, framework, "auto")).close()
    _train(module, _config(tmp_path, framework, "mirrored", strategy="mirrored")).close()
    a, b = _steps(tmp_path / "auto"), _steps(tmp_path / "mirrored")
    np.testing.assert_allclose([float(r["loss"]) for r in b], [float(r["loss"]) for r in a],
                               rtol=1e-6)
    plain = schema.read_result(tmp_path / "auto" / "result.json")["fairness"]
    wrapped = schema.read_result(tmp_path / "mirrored" / "result.json")["fairness"]
    assert plain["strategy"] == {"choice": "auto", "wrapper": None, "reason": "auto: one "
                                 "replica trains without a distribution wrapper"}
    wrapper = {"tf": "MirroredStrategy", "torch": "DistributedDataParallel"}[framework]
    assert wrapped["strategy"]["wrapper"] == wrapper
    assert wrapper.split("Parallel")[0] in wrapped["distribution"]
    assert plain["distribution"] in ("default strategy (no distribution) on /cpu:0",
                                     "single process, no DDP")


class CountingTrainer(FakeTrainer):
    """10 steps an epoch in calls of 3; each step costs 10 ms of a fake clock."""

    steps_per_epoch = 10
    steps_per_call = 3

    def __init__(self, clock):
        super().__init__(fail_at_epoch=99, failure=None)
        self.clock, self.calls = clock, []

    def train_steps(self, batches, lrs):
        self.calls.append(len(lrs))
        self.clock.now += 0.010 * len(lrs)
        return super().train_steps(batches, lrs)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _run_counting(tmp_path, monkeypatch, steps_per_epoch=10, **changes):
    clock = FakeClock()
    monkeypatch.setattr(loop, "time", clock)  # the loop's clock only
    config = tiny_config(tmp_path, epochs=3, schedule="onecycle", **changes)
    trainer = CountingTrainer(clock)
    trainer.steps_per_epoch = steps_per_epoch
    record = recorder_module.Recorder(config, trainer, networks.get_spec("lenet"), {}, {}, {})
    assert loop.train_epochs(trainer, config, record) == 0
    return trainer, record, config


def test_calls_take_k_steps_and_the_epochs_last_call_the_rest(tmp_path, monkeypatch):
    trainer, record, config = _run_counting(tmp_path, monkeypatch, timing_window=4)
    assert trainer.calls == [3, 3, 3, 1] * 3
    steps = record.steps  # one row per step, its own learning rate, in order
    assert [row[0] for row in steps] == list(range(30))
    assert [row[2] for row in steps] == [learning_rate(config, s, 30) for s in range(30)]
    # timing_window 4 steps: 2 whole calls per window, the epoch's end closes one too
    assert [w["steps"] for w in record.windows] == [6, 4] * 3
    assert [w["first_step"] for w in record.windows[:2]] == [0, 6]


def test_windows_are_sized_by_time_in_the_first_epoch_then_held(tmp_path, monkeypatch):
    """A call of 3 steps takes 30 ms here; a 0.06 s target makes windows of 2 calls, once the
    first window (tracing, compilation) is behind; an epoch of 4 calls bounds them to 1 (an
    eighth of an epoch, rounded up to whole calls)."""
    _, record, _ = _run_counting(tmp_path, monkeypatch, steps_per_epoch=40,
                                 timing_window_s=0.06)
    sizes = [(w["epoch"], w["steps"]) for w in record.windows]
    steady = [6] * 6 + [4]  # 2 calls a window; the last, 3 steps + the epoch's last 1
    assert sizes == ([(1, 3), (1, 3)] + [(1, 6)] * 5 + [(1, 4)]  # sizing: 1 call, 1, then 2
                     + [(epoch, n) for epoch in (2, 3) for n in steady])
    figures = record.result["summary"]["steady_step_time_ms"]
    assert figures["window_target_s"] == 0.06
    assert figures["median"] == pytest.approx(10.0) and figures["windows"] == 14
    assert figures["steps_per_window"] == 6
    _, record, _ = _run_counting(tmp_path / "short", monkeypatch, timing_window_s=0.06)
    assert [w["steps"] for w in record.windows if w["epoch"] > 1] == [3, 3, 3, 1] * 2


def test_sweep_varies_steps_per_call_and_strategy():
    varies = [settings.parse_vary("steps_per_call=1,8"),
              settings.parse_vary("strategy=mirrored,none")]
    assert varies == [("steps-per-call", [1, 8]), ("strategy", ["mirrored", "none"])]
    rows = sweep.combinations(RunConfig(), varies, ["tf"])
    assert [(c.steps_per_call, c.strategy) for _, _, c in rows] == [
        (1, "mirrored"), (1, "none"), (8, "mirrored"), (8, "none")]
    with pytest.raises(Exception, match="--strategy none trains one replica"):
        sweep.combinations(RunConfig(devices=2, batch_size=32), varies, ["torch"])


def test_cuda_graphs_on_the_cpu_are_one_clear_line_and_exit_2(tmp_path):
    """--cuda-graphs (PyTorch's graph replay) needs a CUDA GPU: a CPU run says so and
    trains nothing; the GPU run is tests/test_gpu.py's."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", "run",
                           "--framework", "torch", "--device", "cpu", "--cuda-graphs",
                           "--dataset", "synthetic", "--synthetic-size", "64", "--quiet",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=patience(300))
    assert done.returncode == 2, done.stderr
    assert "--cuda-graphs: CUDA graphs need a CUDA GPU" in done.stderr
    assert "Traceback" not in done.stderr and "it trained nothing" in done.stderr
    assert not (tmp_path / "run" / "result.json").exists()
    assert settings.parse_vary("cuda-graphs=off,on") == ("cuda-graphs", [False, True])


def test_tf_close_lets_the_pipelines_go_on_a_thread_that_ends(tmp_path, tf_two_cpus):
    """Trainer.close hands the pipelines to a thread of its own (deleting the training
    iterator can wait for tf.data's autotuning), which frees them and ends."""
    import gc
    import threading
    import weakref
    trainer = _train(tf_two_cpus, _config(tmp_path, "tf", "closed"))
    batches = weakref.ref(trainer.train_batches)
    trainer.close()
    assert trainer.train_batches is None and trainer.test_batches is None
    for thread in [t for t in threading.enumerate() if t.name == "tf-data-release"]:
        thread.join(patience(60))
        assert not thread.is_alive()
    gc.collect()
    assert batches() is None


@pytest.mark.parametrize("graphs, counter", [(False, "max_memory_allocated"),
                                             (True, "max_memory_reserved")])
def test_torch_peak_memory_under_cuda_graphs_counts_their_pool(monkeypatch, graphs, counter):
    """A CUDA graph's activations stay in its private pool and are replayed in place, so
    allocated bytes missed them after the capture (ResNet-9 on an H200: 89 MiB against
    1,234 MiB eager); under --cuda-graphs the peak is what the process holds, reserved bytes,
    and says so. (On the GPU: test_torch_cuda_graphs_train_as_the_eager_step_does.)"""
    from types import SimpleNamespace

    import torch

    from torch_impl.train import Trainer
    read = {"max_memory_allocated": 89 * 2**20, "max_memory_reserved": 1300 * 2**20}
    for name, value in read.items():
        monkeypatch.setattr(torch.cuda, name, lambda device=None, v=value: v)
    trainer = SimpleNamespace(choice=SimpleNamespace(on_gpu=True), device="cuda:0",
                              config=SimpleNamespace(cuda_graphs=graphs))
    peak, note = Trainer.peak_memory(trainer)
    assert peak == read[counter] and note.startswith(f"torch.cuda.{counter}")
