"""TensorBoard: every run writes event files with the same tags in both frameworks, holding
the values the result files hold."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import patience, tiny_config

from compare.experiment import datasets
from compare.run import loop, recorder


def _events(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    found = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
             for tag in accumulator.Tags()["scalars"]}
    for tag in accumulator.Tags().get("tensors", []):  # tf.summary writes scalars as tensors
        import numpy as np
        found[tag] = [(e.step, float(np.frombuffer(e.tensor_proto.tensor_content, np.float32)[0])
                       if e.tensor_proto.tensor_content else e.tensor_proto.float_val[0])
                      for e in accumulator.Tensors(tag)]
    return found


@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_event_files_hold_the_runs_scalars(tmp_path, framework, tf_two_cpus):
    module = tf_two_cpus if framework == "tf" else __import__("torch_impl.train").train
    config = tiny_config(tmp_path, framework=framework, epochs=2, timing_window=4)
    trainer = module.Trainer(config, datasets.config_dataset(config), module.select_device(config))
    record = recorder.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, record) == 0
    directory = tmp_path / "run" / "tensorboard" / f"{framework}-seed0"
    assert list(directory.glob("events.out.tfevents.*"))
    events = _events(directory)
    assert set(events) == set(recorder.TENSORBOARD_TAGS)
    with open(tmp_path / "run" / "steps.csv") as f:
        steps = [(int(r["global_step"]), float(r["loss"])) for r in csv.DictReader(f)]
    assert len(events["train/loss"]) == len(steps) == 16  # 8 steps x 2 epochs
    for (step, value), (csv_step, loss) in zip(sorted(events["train/loss"]), steps):
        assert step == csv_step and value == pytest.approx(loss, rel=1e-6)
    accuracies = [value for _, value in sorted(events["test/accuracy"])]
    result_accuracies = [e["test_accuracy"] for e in record.epochs]
    assert accuracies == pytest.approx(result_accuracies, rel=1e-6)
    assert all(v > 0 for _, v in events["train/step_time_ms"])


def test_both_writers_write_the_same_events(tmp_path, tf_two_cpus):
    """Handed the same series, the two frameworks' writers write the same tags, steps and
    values (each value as float32); TensorFlow's writes every series with one trace."""
    import numpy as np

    from tf_impl.scalars import ScalarWriter as TFWriter
    from torch_impl.scalars import ScalarWriter as TorchWriter
    series = [("train/loss", [2.302585092994046, 1 / 3, 0.1, 1e-8, 7.5], [0, 1, 2, 3, 4]),
              ("train/lr", [0.01, 0.01, 0.009999, 0.0, 0.2], [0, 1, 2, 3, 4]),
              ("train/step_time_ms", [], []),  # an epoch without a whole window
              ("test/accuracy", [0.96875], [4]),
              ("train/loss", [0.25, 1e30], [5, 6])]  # the next epoch's: another length
    for name, writer in (("tf", TFWriter(tmp_path / "tf")),
                         ("torch", TorchWriter(tmp_path / "torch"))):
        for tag, values, steps in series:
            writer.scalars(tag, values, steps)
        with pytest.raises(ValueError):
            writer.scalars("train/lr", [0.1, 0.2], [7])
        writer.close()
        if name == "tf":
            assert writer._write.experimental_get_tracing_count() == 1
    expected: dict[str, list[tuple[int, float]]] = {}
    for tag, values, steps in series:
        if values:
            expected.setdefault(tag, []).extend(
                (step, float(np.float32(value))) for step, value in zip(steps, values))
    assert _events(tmp_path / "tf") == expected
    assert _events(tmp_path / "torch") == expected


def test_the_pytorch_writer_never_loads_tensorflow(tmp_path):
    """In a PyTorch process, TensorFlow loaded by tensorboard would bring a second LLVM
    beside torch's compiler (an abort): the writer keeps tensorboard on its own stub."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from torch_impl.train import ScalarWriter\n"
            f"w = ScalarWriter({str(tmp_path)!r}); w.scalars('train/loss', [1.5], [3]); w.close()\n"
            "print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=patience(300))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert list(tmp_path.glob("events.out.tfevents.*"))
