"""The sweep: parsing, the plan, speed-ups, reports; the device pipeline; time to accuracy."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import tiny_config

from compare.cli import cli
from compare.errors import UserError
from compare.experiment import datasets, settings
from compare.experiment.config import PipelineConfig, RunConfig
from compare.process import sweep
from compare.records import RunSummary, StepTimes
from compare.report import sweep as sweep_report


def test_parse_vary_and_the_cartesian_plan():
    varies = [settings.parse_vary("precision=fp32,mixed"),
              settings.parse_vary("batch_size=32, 64"), settings.parse_vary("compile=off,on")]
    assert varies == [("precision", ["fp32", "mixed"]), ("batch-size", [32, 64]),
                      ("compile", [False, True])]
    rows = sweep.combinations(RunConfig(), varies, ["tf", "torch"])
    assert len(rows) == 2 * 2 * 2 * 2
    assert [fw for fw, _, _ in rows[:4]] == ["tf", "torch", "torch", "tf"]  # order alternates
    fw, chosen, config = rows[-1]
    assert chosen == {"precision": "mixed", "batch-size": 64, "compile": True}
    assert (config.precision == "mixed" and config.batch_size == 64 and config.compile
            and config.framework == fw)
    assert sweep.combinations(RunConfig(), [settings.parse_vary("pipeline=device")],
                              ["tf"])[0][2].pipeline.kind == "device"


@pytest.mark.parametrize("text, message", [
    ("precision", "expected NAME=V1,V2"),
    ("colour=red", "unknown setting 'colour'"),
    ("batch-size=0,32", "--vary batch-size=0: Invalid value for '--batch-size': 0 is not an "
                        "integer >= 1"),
    ("pipeline=fast", "'fast' is not valid (one of naive, tuned, device)"),
    ("compile=maybe", "'maybe' is not valid (on or off)"),
])
def test_bad_vary_is_one_clear_line(text, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings.parse_vary(text)


def test_speedups_are_relative_to_each_frameworks_baseline():
    def row(fw, precision, ips, tta=None):
        return {"framework": fw, "settings": {"precision": precision}, "status": "completed",
                "path": "", "error": None,
                "summary": RunSummary(status="completed", replicas=1, train_flops_per_image=1,
                                      images_per_s=ips, time_to_target_s=tta)}
    rows = sweep_report.with_speedups([row("tf", "fp32", 100.0, 10.0),
                                       row("tf", "mixed", 250.0, 4.0),
                                       row("torch", "fp32", 200.0), row("torch", "mixed", 300.0),
                                       {"framework": "torch", "settings": {"precision": "x"},
                                        "status": "failed", "summary": None, "path": None,
                                        "error": "boom"}],
                                      [("precision", ["fp32", "mixed"])])
    assert [r["speedup"] for r in rows] == [1.0, 2.5, 1.0, 1.5, None]
    assert (rows[1]["time_to_target_speedup"] == 2.5 and rows[0]["baseline"]
            and not rows[1]["baseline"])


def test_a_sweeps_table_of_runs_shows_the_figures_declared_for_it():
    summary = RunSummary(status="completed", replicas=1, train_flops_per_image=1,
                         epochs_completed=2, train_time_s=12.5, images_per_s=800.0,
                         steady_step_time_ms=StepTimes(median=40.0, p90=44.0),
                         input_wait_fraction=0.05, final_test_accuracy=0.61,
                         peak_device_memory_bytes=3 * 2 ** 20, mfu=0.25, energy_per_image_j=0.5)
    rows = sweep_report.with_speedups(
        [{"framework": "tf", "settings": {"precision": "fp32"}, "status": "completed",
          "path": "", "error": None, "summary": summary},
         {"framework": "tf", "settings": {"precision": "mixed"}, "status": "failed",
          "path": None, "error": "boom", "summary": None}], [("precision", ["fp32", "mixed"])])
    document = {"rows": rows, "varied": {"precision": ["fp32", "mixed"]},
                "baseline": {"precision": "fp32"}, "command": "cnncompare sweep"}
    (table,) = [s for s in sweep_report.sections_of(document) if s.key == "sweep"]
    assert table.columns == (
        "Framework", "Settings", "Status", "Speed-up", "Training time", "Throughput",
        "Steady step time (median)", "Input wait", "Final test accuracy", "Peak device memory",
        "MFU", "Energy per image")  # no time to target: no run measured one
    assert table.rows == [
        ["TensorFlow/Keras", "precision=fp32 (baseline)", "completed", "1.000x", "12.50 s",
         "800 img/s", "40.00 ms", "5.0%", "0.6100", "3 MiB", "25.0%", "0.5 J"],
        ["TensorFlow/Keras", "precision=mixed", "failed: boom", "n/a", *["n/a"] * 8]]
    rows[0]["summary"] = dataclasses.replace(summary, time_to_target_s=7.0, epochs_completed=0)
    (table,) = [s for s in sweep_report.sections_of(document) if s.key == "sweep"]
    assert table.columns[-1] == "Time to target accuracy" and table.rows[0][-1] == "7.00 s"
    assert table.rows[0][4] == "n/a"  # no epoch completed: no training time


@pytest.mark.slow
def test_sweep_cli_writes_json_markdown_and_html(tmp_path):
    out = tmp_path / "sweep"
    outcome = CliRunner().invoke(cli, ["sweep", "--dataset", "synthetic", "--synthetic-size", "320",
                                       "--epochs", "2", "--precision", "fp32",
                                       "--vary", "pipeline=naive,device",
                                       "--target-accuracy", "0.05", "--quiet", "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    document = json.loads((out / "sweep.json").read_text())
    assert len(document["rows"]) == 4 and document["baseline"] == {"pipeline": "naive"}
    for row in document["rows"]:
        assert row["status"] == "completed" and row["summary"]["images_per_s"] > 0
        assert row["speedup"] == 1.0 if row["baseline"] else row["speedup"] > 0
        assert row["summary"]["time_to_target_s"] is not None
    html = (out / "sweep.html").read_text()
    assert "<svg" in html and "Time to target" in html and "pipeline=device" in html
    assert ("| TensorFlow/Keras | pipeline=naive (baseline) | completed |"
            in (out / "sweep.md").read_text())


def test_device_pipeline_batches_equal_the_loader_batches(tmp_path, tf_two_cpus):
    from torch_impl import train as torch_train
    config = tiny_config(tmp_path, device="cpu")
    resident = config.replace(pipeline=PipelineConfig.preset("device"))
    dataset = datasets.config_dataset(config)
    loader = torch_train.Trainer(config, dataset, torch_train.select_device(config))
    on_device = torch_train.Trainer(resident, dataset, torch_train.select_device(resident))
    for (a, la), (b, lb) in zip(loader.batches(1), on_device.batches(1)):
        assert torch.equal(a, b) and torch.equal(la, lb)
    for devices in (1, 2):  # TF: the same losses as tf.data, one or two replicas
        plain = tf_two_cpus.Trainer(config.replace(devices=devices), dataset,
                                         tf_two_cpus.select_device(config.replace(devices=devices)))
        device = tf_two_cpus.Trainer(resident.replace(devices=devices), dataset,
                                          tf_two_cpus.select_device(
                                              resident.replace(devices=devices)))
        a = [float(plain.train_step(x, 0.05)) for x in plain.batches(0)]
        b = [float(device.train_step(x, 0.05)) for x in device.batches(0)]
        np.testing.assert_allclose(b, a, rtol=1e-6)


def test_torch_loader_runs_on_into_the_next_epoch_with_a_fresh_iterators_batches(tmp_path,
                                                                                   monkeypatch):
    """Epochs taken whole share one loader iterator, so its workers load the next epoch's
    first batches during the evaluation; each epoch's batches are those a new iterator at
    that epoch gives, bit for bit. An epoch left part-way makes the next start anew."""
    from torch_impl import data as torch_data
    from torch_impl import train as torch_train
    starts = []  # the first epoch of each sampler pass the loader began to read
    plain_iter = torch_data._PlanKeys.__iter__

    def counted(self):
        starts.append(self.first)
        yield from plain_iter(self)
    monkeypatch.setattr(torch_data._PlanKeys, "__iter__", counted)
    config = tiny_config(tmp_path, epochs=3, augment=True, cutout=8,
                         pipeline=PipelineConfig(workers=2))
    dataset = datasets.config_dataset(config)

    def trainer(workers: int):
        chosen = config.replace(pipeline=PipelineConfig(workers=workers))
        return torch_train.Trainer(chosen, dataset, torch_train.select_device(chosen))

    flowing = trainer(2)
    runs_on = [list(flowing.batches(epoch)) for epoch in range(3)]
    assert starts == [0] and [len(b) for b in runs_on] == [flowing.steps_per_epoch] * 3
    fresh = trainer(0)  # the same batches, loaded in this process
    for epoch in range(3):
        fresh.train_batches.flow.continues_at = None  # a new iterator at this epoch
        for (a, la), (b, lb) in zip(runs_on[epoch], fresh.batches(epoch)):
            assert torch.equal(a, b) and torch.equal(la, lb)
    starts.clear()
    next(flowing.batches(0))  # an epoch left part-way: the next starts a new iterator
    again = list(flowing.batches(1))
    assert starts == [0, 1]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(again, runs_on[1]))


def test_time_to_target_accuracy_is_the_training_time_of_the_first_epoch_reaching_it(tmp_path):
    from test_reliability import FakeTrainer

    from compare import schema
    from compare.experiment import networks
    from compare.run import loop
    from compare.run import recorder as recorder_module

    class Improving(FakeTrainer):
        def evaluate(self):
            return 1.0, 0.2 * self.epoch  # 0.2, 0.4, 0.6

    config = tiny_config(tmp_path, epochs=3, target_accuracy=0.35)
    trainer = Improving(99, None)
    recorder = recorder_module.Recorder(config, trainer, networks.get_spec("lenet"), {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    result = schema.read_result(tmp_path / "run" / "result.json")
    epochs = result["epochs"]
    assert result["summary"].epochs_to_target == 2
    assert result["summary"].time_to_target_s == pytest.approx(epochs[0]["train_time_s"]
                                                                  + epochs[1]["train_time_s"])
