"""benchmarks/batchnorm.py on a CPU: ResNet-9's BatchNorm shapes, every variant of a framework
doing the same work (the same gradients), and its file of timings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import batchnorm
from compare.experiment import networks

RESNET9_BATCHNORMS = [("prep_bn", 64, 32), ("layer1_bn", 128, 32), ("layer1_res1_bn", 128, 16),
                      ("layer1_res2_bn", 128, 16), ("layer2_bn", 256, 16),
                      ("layer3_bn", 512, 8), ("layer3_res1_bn", 512, 4),
                      ("layer3_res2_bn", 512, 4)]


def test_the_shapes_are_resnet9s_batchnorm_inputs():
    assert batchnorm.batchnorm_shapes(networks.resnet9()) == RESNET9_BATCHNORMS


def _gradients(build, variant: str, seed: int, framework: str) -> list[np.ndarray]:
    """The step's gradients (input, scale, offset) on inputs drawn from `seed`."""
    if framework == "tf":
        import tensorflow as tf
        tf.random.set_seed(seed)
    else:
        import torch
        torch.manual_seed(seed)
    step, sync = build(variant, 4, 6, 5, "cpu")
    found = step()
    sync()
    return [np.asarray(g.detach().float().numpy() if hasattr(g, "detach") else g, np.float32)
            for g in found]


@pytest.mark.parametrize("framework, build, variants", [
    ("tf", batchnorm.tf_steps, ("keras", "keras-xla", "fused")),
    pytest.param("torch", batchnorm.torch_steps, ("eager", "compiled"),
                 marks=pytest.mark.slow)])  # inductor compiles C++ kernels: seconds
def test_every_variant_computes_the_same_gradients(framework, build, variants):
    """Keras' layer, with XLA or without, and TensorFlow's fused kernel give the same
    gradients of the input, scale and offset for the same input and upstream gradient (float16
    activations: to a float16 tolerance), as PyTorch's eager and compiled batch_norm do: the
    variants time the same work."""
    reference = _gradients(build, variants[0], 3, framework)
    assert [g.shape for g in reference] == (
        [(4, 5, 5, 6), (6,), (6,)] if framework == "tf" else [(4, 6, 5, 5), (6,), (6,)])
    assert all(np.abs(g).max() > 0 for g in reference)
    for variant in variants[1:]:
        for mine, theirs in zip(_gradients(build, variant, 3, framework), reference):
            np.testing.assert_allclose(mine, theirs, rtol=2e-2, atol=2e-2)
    other = _gradients(build, variants[0], 4, framework)  # another draw: not a constant
    assert not np.allclose(other[0], reference[0])


def test_the_file_gives_each_layer_and_their_sum(tmp_path, capsys):
    assert batchnorm.main(["--framework", "torch", "--device", "cpu", "--tiny", "--variant",
                           "eager", "--out", str(tmp_path)]) == 0
    found = json.loads((tmp_path / "batchnorm-torch.json").read_text())
    layers = found["variants"]["eager"]["layers"]
    assert [(r["layer"], r["shape"]) for r in layers] == [
        (name, [batchnorm.TINY_BATCH, channels, size, size])
        for name, channels, size in RESNET9_BATCHNORMS]
    assert all(r["ms"] > 0 for r in layers)
    assert found["variants"]["eager"]["step_ms"] == pytest.approx(sum(r["ms"] for r in layers))
    assert "torch eager:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:
        batchnorm.main(["--framework", "tf", "--variant", "eager", "--out", str(tmp_path)])
    assert stopped.value.code == 2


def test_a_step_is_timed_per_step_over_blocks_after_the_warm_up(monkeypatch):
    """On a clock that moves 2 ms a step (and 1 s more in the first block, a burst), the
    figure is 2 ms: a block's time over its steps, the median of the blocks, the warm-up
    steps untimed and each block closed by a synchronisation."""
    clock, calls = [0.0], []

    def step():
        calls.append("step")
        clock[0] += 0.002 + (1.0 if calls.count("sync") == 1 and calls.count("step") == 4
                             else 0.0)
    monkeypatch.setattr(batchnorm.time, "perf_counter", lambda: clock[0])
    assert batchnorm.timed(step, lambda: calls.append("sync"), (3, 5, 3)) == pytest.approx(2.0)
    assert calls == ["step"] * 3 + ["sync"] + (["step"] * 5 + ["sync"]) * 3
