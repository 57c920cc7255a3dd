"""Specs, initial weights, the data plan, the config and the result contract."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from compare import files, schema
from compare.experiment import networks, plan, specs, weights
from compare.experiment.config import RunConfig, recipe_config
from compare.experiment.recipe import learning_rate
from compare.run import summary as run_summary


def test_lenet_matches_the_seed_net():
    spec = networks.get_spec("lenet")
    assert specs.parameter_count(spec) == 62_006
    # conv1 5*5*3*6*28*28 + conv2 5*5*6*16*10*10 + fc 400*120 + 120*84 + 84*10 multiply-adds
    assert specs.forward_flops(spec) == 2 * (352_800 + 240_000 + 48_000 + 10_080 + 840)
    assert specs.train_flops(spec) == 3 * specs.forward_flops(spec)
    assert specs.output_shapes(spec)["flatten"] == (400,)


def test_resnet9_parameters_and_flops_by_hand():
    spec = networks.get_spec("resnet9")
    convs = [(3, 64), (64, 128), (128, 128), (128, 128), (128, 256), (256, 512), (512, 512),
             (512, 512)]
    params = sum(9 * a * b + 2 * b for a, b in convs) + 512 * 10  # 3x3 convs, BN gamma/beta, fc
    assert specs.parameter_count(spec) == params == 6_573_120
    sizes = [32, 32, 16, 16, 16, 8, 4, 4]  # output side of each conv
    macs = sum(9 * a * b * s * s for (a, b), s in zip(convs, sizes)) + 512 * 10
    assert specs.forward_flops(spec) == 2 * macs
    assert specs.output_shapes(spec)["layer3_res"] == (512, 4, 4)


def test_a_spec_that_does_not_fit_together_is_refused():
    broken = specs.ModelSpec("broken", (3, 32, 32), 10, (specs.Conv("c", 4, 8, 3),))
    with pytest.raises(ValueError, match="expects 4 channels"):
        specs.output_shapes(broken)


def test_initial_weights_are_seeded_and_follow_the_documented_initialisers():
    spec = networks.get_spec("resnet9")
    a, b = weights.initial_weights(spec, 0), weights.initial_weights(spec, 0)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["prep_conv.weight"],
                              weights.initial_weights(spec, 1)["prep_conv.weight"])
    bound = 1 / np.sqrt(64 * 9)
    w = a["layer1_conv.weight"]
    assert w.dtype == np.float32 and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert (a["prep_bn.weight"] == 1).all() and (a["prep_bn.running_var"] == 1).all()
    assert (a["prep_bn.bias"] == 0).all() and (a["prep_bn.running_mean"] == 0).all()


def test_flatten_row_permutation_round_trips_and_moves_the_right_rows():
    w = np.arange(2 * 16 * 5 * 5, dtype=np.float32).reshape(2, 400)
    hwc = weights.chw_to_hwc_rows(w, (16, 5, 5))
    np.testing.assert_array_equal(weights.hwc_to_chw_rows(hwc, (16, 5, 5)), w)
    # input (c=3, h=1, w=2) is torch column 3*25 + 1*5 + 2 and Keras column (1*5 + 2)*16 + 3
    assert hwc[0, (1 * 5 + 2) * 16 + 3] == w[0, 3 * 25 + 1 * 5 + 2]
    assert weights.flatten_input_shape(networks.get_spec("lenet"), "fc1") == (16, 5, 5)
    assert weights.flatten_input_shape(networks.get_spec("lenet"), "fc2") is None
    # 512x1x1: the orders agree
    assert weights.flatten_input_shape(networks.get_spec("resnet9"), "fc") is None


def test_epoch_plan_is_a_seeded_permutation_with_augmentation_in_range():
    p = plan.epoch_plan(1000, 64, epoch=0, seed=0, padding=4)
    assert p.indices.shape == (15, 64) and len(np.unique(p.indices)) == 15 * 64
    assert p.offsets.min() >= 0 and p.offsets.max() <= 8
    assert 0.4 < p.flips.mean() < 0.6
    same = plan.epoch_plan(1000, 64, epoch=0, seed=0)
    assert np.array_equal(p.indices, same.indices) and np.array_equal(p.offsets, same.offsets)
    assert not np.array_equal(p.indices, plan.epoch_plan(1000, 64, epoch=1, seed=0).indices)
    off = plan.epoch_plan(1000, 64, epoch=0, seed=0, augment=False)
    assert (off.offsets == 4).all() and not off.flips.any()


def test_augment_batch_crops_and_flips_as_specified():
    images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    idx = np.array([2, 0, 1])
    dy, dx, flip = np.array([4, 0, 8]), np.array([4, 8, 0]), np.array([False, True, False])
    out = plan.augment_batch(images, idx, dy, dx, flip, 4)
    np.testing.assert_array_equal(out[0], images[2])  # centre crop is the identity
    padded = np.pad(images[0], ((4, 4), (4, 4), (0, 0)))
    np.testing.assert_array_equal(out[1], padded[0:32, 8:40][:, ::-1])  # crop then mirror
    assert (out[2][-4:] == 0).all() and (out[2][:, :4] == 0).all()  # shifted in: zero padding
    np.testing.assert_array_equal(out[2][:-4, 4:], images[1][4:, :28])


def test_cutout_squares_lie_inside_the_image_and_leave_the_crops_drawn_as_before():
    plain = plan.epoch_plan(1000, 64, epoch=0, seed=0)
    cut = plan.epoch_plan(1000, 64, epoch=0, seed=0, cutout=8, image_size=(32, 32))
    assert np.array_equal(plain.offsets, cut.offsets) and np.array_equal(plain.flips, cut.flips)
    assert not plain.cutouts.any() and cut.cutouts.min() == 0 and cut.cutouts.max() == 24
    assert not plan.epoch_plan(1000, 64, 0, 0, augment=False, cutout=8).cutouts.any()
    with pytest.raises(ValueError, match="does not fit"):
        plan.epoch_plan(10, 2, 0, 0, cutout=40, image_size=(32, 32))
    images = np.ones((2, 32, 32, 3), np.float32)
    out = plan.cut_out(images, np.array([0, 24]), np.array([3, 24]), 8)
    assert (out[0, :8, 3:11] == 0).all() and out[0].sum() == 3 * (32 * 32 - 64)
    assert (out[1, 24:, 24:] == 0).all() and out[1].sum() == 3 * (32 * 32 - 64)
    assert images.all()  # a copy


def test_normalise_is_float32_per_channel():
    batch = np.full((1, 2, 2, 3), 255, np.uint8)
    out = plan.normalise(batch, np.array([0.5, 0.5, 0.5]), np.array([0.25, 0.5, 1.0]))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0, 0], [2.0, 1.0, 0.5])


def test_config_round_trips_through_json_and_recipes_override_few_fields():
    config = recipe_config("resnet9", lr=0.1, epochs=None)
    assert config.lr == 0.1 and config.epochs == 10 and config.schedule == "onecycle"
    assert RunConfig.from_json(config.to_json()) == config
    assert recipe_config("lenet") == RunConfig(augment=False)  # the seed's recipe: no augmentation
    assert recipe_config("resnet9").augment and recipe_config("lenet", augment=True).augment


def test_onecycle_rises_then_falls_to_zero():
    config = RunConfig(lr=1.0, schedule="onecycle", warmup_fraction=0.25)
    lrs = [learning_rate(config, s, 100) for s in range(100)]
    assert lrs[0] == pytest.approx(1 / 25) and max(lrs) == 1.0 and lrs.index(1.0) == 24
    assert lrs[-1] == pytest.approx(1 / 75) and all(a >= b for a, b in zip(lrs[24:], lrs[25:]))
    assert learning_rate(RunConfig(lr=0.3), 57, 100) == 0.3


def _result(**summary) -> dict:
    base = run_summary.summarise_run(RunConfig(), [], [], status="completed", replicas=1,
                                     train_flops_per_image=100, device_name=None, on_gpu=False,
                                     peak_memory_note=None, host_peak_rss_bytes=None)
    base = dataclasses.replace(base, **{"final_test_accuracy": 0.5, "best_test_accuracy": 0.6,
                                        **summary})
    epoch = {"epoch": 1, "train_loss": 1.0, "test_loss": 1.1, "test_accuracy": 0.5,
             "train_time_s": 2.0, "eval_time_s": 0.1, "images_per_s": 100.0}
    return {"schema_version": schema.RESULT_VERSION, "framework": "torch", "model": {},
            "config": {}, "environment": {}, "fairness": {}, "epochs": [epoch],
            "summary": base.to_dict(),
            "measurement": {}}


def test_result_schema_round_trip(tmp_path):
    path = files.write_json(tmp_path / "result.json", _result())
    read = schema.read_result(path)
    assert {**read, "summary": read["summary"].to_dict()} == json.loads(path.read_text())
    assert read["summary"].final_test_accuracy == 0.5


def test_a_result_of_the_first_schema_is_read_as_the_current_one(tmp_path):
    """Version 1 recorded TensorFlow's --strategy as its name and PyTorch's as "not
    applicable"; read today, each says whether its framework trained under a wrapper."""
    old = _result()
    old["schema_version"] = 1
    old["fairness"] = {"strategy": "mirrored", "distribution": "MirroredStrategy over /cpu:0"}
    path = files.write_json(tmp_path / "result.json", old)
    read = schema.read_result(path)
    assert read["schema_version"] == schema.RESULT_VERSION
    assert read["fairness"]["strategy"]["wrapper"] == "MirroredStrategy"
    future = {**_result(), "schema_version": schema.RESULT_VERSION + 1}
    with pytest.raises(schema.SchemaError, match="this cnncompare reads versions 1 to"):
        schema.read_result(files.write_json(tmp_path / "future.json", future))
    torn = tmp_path / "torn.json"
    torn.write_text('{"schema_version": 2, "fram')
    with pytest.raises(schema.SchemaError, match="torn.json: not valid JSON"):
        schema.read_result(torn)


def test_an_own_loop_of_the_first_schema_is_read_without_windows(tmp_path):
    """Version 1 own loops recorded their epochs' times alone: read today they have no
    windows and no median step time (so the report falls back to the epochs' times); a
    version from the future is refused in one line that names the file."""
    first = {"schema_version": 1, "framework": "tf", "seed": 0, "loop": "Keras fit",
             "status": "completed", "config": {}, "device_used": "CPU", "steps_per_epoch": 8,
             "steps_per_call": 1, "epoch_times_s": [1.0, 0.5], "mean_losses": [],
             "final_test_accuracy": 0.5, "final_test_loss": 1.0}
    read = schema.read_own_loop(files.write_json(tmp_path / "own-loop.json", first))
    assert read.schema_version == schema.OWN_LOOP_VERSION
    assert read.windows == [] and read.steady_step_time_ms is None
    assert read.epoch_times_s == [1.0, 0.5] and read.final_test_accuracy == 0.5
    future = {**read.to_dict(), "schema_version": schema.OWN_LOOP_VERSION + 1}
    with pytest.raises(schema.SchemaError, match="future.json: own-loop schema version"):
        schema.read_own_loop(files.write_json(tmp_path / "future.json", future))


@pytest.mark.parametrize("change, message", [
    ({"status": "exploded"}, "summary.status"),
    ({"final_test_accuracy": 54.0}, "fraction in"),
    ({"steady_step_time_ms": 3.0}, "steady_step_time_ms: not a JSON object"),
    ({"train_time_s": "fast"}, "summary.train_time_s: .fast. is not float"),
    ({"processes": [{"rank": 0}]}, r"processes\[0\] lacks train_time_s"),
])
def test_result_schema_rejects_bad_values(tmp_path, change, message):
    with pytest.raises(schema.SchemaError, match=message):
        schema.validate_result(_result(**change))


def test_nan_is_written_as_null(tmp_path):
    path = files.write_json(tmp_path / "x.json", {"loss": float("nan"), "ok": [1.0, float("inf")]})
    assert json.loads(path.read_text()) == {"loss": None, "ok": [1.0, None]}


def test_atomic_write_keeps_the_previous_file_when_writing_fails(tmp_path):
    path = tmp_path / "result.json"
    files.write_json(path, {"version": 1})

    def fail_midway(f):
        f.write('{"version": 2, "trunc')
        raise OSError("disk full")

    with pytest.raises(OSError):
        files.write_atomic(path, fail_midway)
    assert json.loads(path.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary left behind


def test_loader_workers_come_from_the_cores_per_process_unless_set():
    from compare.experiment.config import PipelineConfig, loader_workers
    tuned = PipelineConfig()
    assert loader_workers(tuned, processes=1, cores=2) == 0  # a worker would fight for a core
    assert loader_workers(tuned, processes=1, cores=16) == 8
    assert loader_workers(tuned, processes=2, cores=16) == 4
    assert loader_workers(tuned, processes=1, cores=64) == 8
    assert loader_workers(PipelineConfig(workers=3), processes=1, cores=2) == 3
    assert loader_workers(PipelineConfig.preset("naive"), processes=1, cores=16) == 0
