"""TensorFlow on the GPU, for the GPU tests: each scenario runs in its own process (the test
process hides the GPUs from TensorFlow to split the CPU) and prints one JSON line last.

    python tests/gpu_tf_scenarios.py SCENARIO OUT_DIR

started by tests/on_gpu.py in the environment of the tool's framework processes
(compare.process.runner.child_environment: the checkout on PYTHONPATH, TensorFlow quiet).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from compare.experiment import datasets
from compare.experiment.config import PipelineConfig, RunConfig
from compare.run import loop
from compare.run import recorder as recorder_module


def _config(out: Path, **changes) -> RunConfig:
    """A small GPU run's config, its precision resolved for the GPU as a command resolves it
    before any framework process starts (a trainer refuses a config without it)."""
    from compare.machine import precision_choice
    fields = dict(dataset="synthetic", synthetic_train_size=512, synthetic_test_size=128,
                  epochs=1, batch_size=64, precision="mixed", quiet=True, out=str(out),
                  device="gpu", steps_per_call=1, profile_steps=0,
                  pipeline=PipelineConfig(workers=0, persistent_workers=False))
    fields.update(changes)
    return precision_choice.carry(RunConfig(**fields))


def _trainer(config: RunConfig):
    from tf_impl import train as tf_train
    return tf_train.Trainer(config, datasets.config_dataset(config),
                            tf_train.select_device(config))


def loss_scaling(out: Path) -> dict:
    """Start at a scale float16 overflows: the step is skipped and the scale halves until
    the gradients are finite; after 3 finite steps it doubles."""
    trainer = _trainer(_config(out, loss_scale_initial=2.0 ** 24, loss_scale_growth_interval=3))
    optimizer = trainer.optimizer
    before = trainer.weights()
    batches = trainer.batches(0)
    scales, losses, unchanged_after_first = [], [], None
    for i, batch in enumerate(batches):
        losses.append(float(trainer.train_step(batch, 0.01)))
        scales.append(float(optimizer.dynamic_scale.numpy()))
        if i == 0:
            after = trainer.weights()
            unchanged_after_first = all(np.array_equal(before[k], after[k]) for k in before)
    return {"scales": scales, "losses": losses, "skipped_first": unchanged_after_first,
            "policy": trainer.manifest()["precision_policy"],
            "loss_scaling": trainer.manifest()["loss_scaling"]}


def placement(out: Path) -> dict:
    """The device pipeline's load under /GPU:0 with soft placement off: it raises where an op
    has no GPU kernel (a uint8 gather did), so finishing proves every op ran on the GPU."""
    tf.config.set_soft_device_placement(False)
    from tf_impl.data import PlanImages
    images = np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(64, dtype=np.int64) % 10
    with tf.device("/GPU:0"):
        source = PlanImages(images, labels, np.full(3, 0.5), np.full(3, 0.25), 4, True,
                            "/gpu:0", cutout=8)
        keys = tf.constant(np.stack([np.arange(8), np.full(8, 2), np.full(8, 3),
                                     np.arange(8) % 2, np.arange(8), np.full(8, 5)]
                                    ).astype(np.int64))
        batch, got = tf.function(source.load_batch)(*tf.unstack(keys))
    with tf.device("/CPU:0"):
        host = PlanImages(images, labels, np.full(3, 0.5), np.full(3, 0.25), 4, True, None,
                          cutout=8)
        host_batch, _ = host.load_batch(*tf.unstack(keys))
    return {"device": batch.device, "shape": list(batch.shape),
            "equal_to_host": bool(np.array_equal(batch.numpy(), host_batch.numpy())),
            "labels": got.numpy().tolist(), "resident_bytes": source.resident_bytes()}


def pipeline_batches(out: Path) -> dict:
    """The first batch of epoch 1 from each pipeline on the GPU, against the naive one's:
    the largest pixel difference and whether the labels agree."""
    first = {}
    for kind in ("naive", "tuned", "device"):
        pipeline = PipelineConfig.preset(kind)
        if kind != "device":
            pipeline = PipelineConfig(kind=kind, workers=0, persistent_workers=False)
        trainer = _trainer(_config(out / kind, pipeline=pipeline, augment=True,
                                   precision="fp32"))
        images, labels = trainer._load(next(iter(trainer.batches(1))))
        first[kind] = (np.asarray(images, dtype=np.float32), np.asarray(labels))
    base_images, base_labels = first["naive"]
    return {kind: {"max_pixel_difference": float(np.abs(images - base_images).max()),
                   "labels_equal": bool(np.array_equal(labels, base_labels)),
                   "shape": list(images.shape)}
            for kind, (images, labels) in first.items()}


def peak_memory(out: Path) -> dict:
    """reset_peak_memory: the next peak counts from the reset, not from the largest
    allocation before it."""
    trainer = _trainer(_config(out))
    with tf.device("/GPU:0"):
        big = tf.ones((256, 1024, 1024), tf.float32)  # 1 GiB
        big_peak = trainer.peak_memory()[0]
        del big
    trainer.reset_peak_memory()
    batches = trainer.batches(0)
    trainer.train_step(next(batches), 0.01)
    trainer.sync()
    return {"big_peak": big_peak, "after_reset": trainer.peak_memory()[0]}


def resume_loss_scale(out: Path) -> dict:
    """A mixed-precision run stopped after its first epoch resumes with the loss scale it had."""
    from tf_impl import train as tf_train
    config = _config(out, epochs=2, loss_scale_initial=2.0 ** 24, loss_scale_growth_interval=3)
    trainer = _trainer(config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    for batch in trainer.batches(0):
        trainer.train_step(batch, 0.01)
    scale = float(trainer.optimizer.dynamic_scale.numpy())
    trainer.save_checkpoint(out)
    recorder.write()
    fresh = tf_train.Trainer(config, datasets.config_dataset(config),
                             tf_train.select_device(config))
    fresh.load_checkpoint(out)
    return {"scale": scale, "restored": float(fresh.optimizer.dynamic_scale.numpy()),
            "initial": 2.0 ** 24}


def phases_on_the_device(out: Path) -> dict:
    """The default --profile read on GPU:0's own clock."""
    config = _config(out, epochs=1, steps_per_call=4, profile_steps=8,
                     synthetic_train_size=1024)
    trainer = _trainer(config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    code = loop.train_epochs(trainer, config, recorder)
    return {"code": code, "profile": recorder.result.get("profile")}


if __name__ == "__main__":
    name, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(globals()[name](out)))
