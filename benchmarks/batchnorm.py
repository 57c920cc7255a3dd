"""BatchNorm alone on ResNet-9's shapes: each framework's BatchNorm, forward and backward in
training mode, as the matched runs use it and as the framework's fused kernel runs it.

TensorFlow/Keras 3's BatchNormalization computes its moments and normalisation as separate
ops (no fused cuDNN kernel), in float32 under mixed_float16; XLA may fuse them. PyTorch's
batch_norm is one cuDNN kernel on a GPU. This times, per BatchNorm layer of ResNet-9 at the
recipe's batch (the shapes walked from compare.experiment.networks.resnet9), one training
step of the layer alone (forward, then the gradients of the input, scale and offset for a
fixed upstream gradient), float16 activations, channels last:

    tf:    keras      keras.layers.BatchNormalization (mixed_float16), in a tf.function
           keras-xla  the same, jit_compile=True (Keras' default on a GPU)
           fused      tf.raw_ops.FusedBatchNormV3, TensorFlow's fused kernel
    torch: eager      torch.nn.functional.batch_norm (cuDNN on a GPU), float16 in, float32
                      statistics, as under autocast
           compiled   the same under torch.compile

    python -m benchmarks.batchnorm --framework tf --device gpu --out runs/batchnorm

Each figure is the median over REPEATS of a block of ITERATIONS steps between two device
synchronisations, divided by ITERATIONS, so the launches overlap as in training. Writes
OUT/batchnorm-FRAMEWORK.json: per variant, each layer's milliseconds and their sum, the
BatchNorm time of one ResNet-9 step. `--tiny` proves the plumbing on a CPU (batch 8).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare.experiment import networks, specs  # noqa: E402

VARIANTS = {"tf": ("keras", "keras-xla", "fused"), "torch": ("eager", "compiled")}
BATCH, TINY_BATCH = 512, 8  # the recipe's batch; --tiny's
WARMUP, ITERATIONS, REPEATS = 10, 20, 7
TINY_RUNS = (1, 2, 3)  # --tiny: warm-up steps, steps a block, blocks
MOMENTUM, EPSILON = 0.1, 1e-5  # the recipe's (PyTorch's convention)


def batchnorm_shapes(spec: specs.ModelSpec) -> list[tuple[str, int, int]]:
    """(name, channels, height) of each BatchNorm in `spec`, in order, from its input shape."""
    shapes = specs.layer_shapes(spec)
    return [(layer.name, *shapes[layer.name][0][:2]) for layer in specs.walk(spec.layers)
            if isinstance(layer, specs.BatchNorm)]


def timed(step: Callable[[], object], sync: Callable[[], None], runs: tuple[int, int, int]
          ) -> float:
    """Milliseconds a step: the median over blocks of steps between two synchronisations."""
    warmup, iterations, repeats = runs
    for _ in range(warmup):
        step()
    sync()
    blocks = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(iterations):
            step()
        sync()
        blocks.append((time.perf_counter() - started) * 1000 / iterations)
    return statistics.median(blocks)


def tf_steps(variant: str, batch: int, channels: int, size: int, device: str
             ) -> tuple[Callable[[], object], Callable[[], None]]:
    import keras
    import tensorflow as tf
    with tf.device("/GPU:0" if device == "gpu" else "/CPU:0"):
        x = tf.random.normal((batch, size, size, channels), dtype=tf.float16)
        upstream = tf.random.normal((batch, size, size, channels), dtype=tf.float16)
        if variant == "fused":
            scale, offset = tf.Variable(tf.ones(channels)), tf.Variable(tf.zeros(channels))
            empty = tf.constant([], tf.float32)

            def forward(inputs):
                return tf.raw_ops.FusedBatchNormV3(
                    x=inputs, scale=scale, offset=offset, mean=empty, variance=empty,
                    epsilon=EPSILON, exponential_avg_factor=1.0, data_format="NHWC",
                    is_training=True).y
            weights = [scale, offset]
        else:
            layer = keras.layers.BatchNormalization(momentum=1 - MOMENTUM, epsilon=EPSILON,
                                                    dtype="mixed_float16")
            layer.build(x.shape)

            def forward(inputs):
                return layer(inputs, training=True)
            weights = [layer.gamma, layer.beta]

        @tf.function(jit_compile=variant == "keras-xla")
        def step():
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = forward(x)
            return tape.gradient(y, [x, *weights], output_gradients=upstream)
    return step, lambda: tf.test.experimental.sync_devices()


def torch_steps(variant: str, batch: int, channels: int, size: int, device: str
                ) -> tuple[Callable[[], object], Callable[[], None]]:
    import torch
    where = "cuda" if device == "gpu" else "cpu"
    x = torch.randn(batch, channels, size, size, device=where, dtype=torch.float16,
                    requires_grad=True).contiguous(memory_format=torch.channels_last)
    upstream = torch.randn_like(x)
    weight = torch.ones(channels, device=where, requires_grad=True)
    bias = torch.zeros(channels, device=where, requires_grad=True)
    mean, var = torch.zeros(channels, device=where), torch.ones(channels, device=where)

    def forward(inputs):
        return torch.nn.functional.batch_norm(inputs, mean, var, weight, bias, training=True,
                                              momentum=MOMENTUM, eps=EPSILON)
    # compiled as a training step compiles it: the forward, whose backward AOTAutograd builds
    chosen = torch.compile(forward) if variant == "compiled" else forward

    def step():
        return torch.autograd.grad(chosen(x), [x, weight, bias], upstream)
    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)
    return step, sync


def measure(framework: str, device: str, tiny: bool, variants: tuple[str, ...]) -> dict:
    batch, runs = (TINY_BATCH, TINY_RUNS) if tiny else (BATCH, (WARMUP, ITERATIONS, REPEATS))
    build = tf_steps if framework == "tf" else torch_steps
    shapes = batchnorm_shapes(networks.resnet9())
    found = {}
    for variant in variants:
        layers = []
        for name, channels, size in shapes:
            step, sync = build(variant, batch, channels, size, device)
            layers.append({"layer": name, "shape": [batch, channels, size, size],
                           "ms": timed(step, sync, runs)})
        found[variant] = {"layers": layers, "step_ms": sum(row["ms"] for row in layers)}
    return {"framework": framework, "device": device, "batch": batch,
            "timing": {"warmup": runs[0], "iterations": runs[1], "repeats": runs[2]},
            "variants": found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--variant", action="append", help="only these variants "
                        "[default: every variant of the framework]")
    parser.add_argument("--tiny", action="store_true", help=f"batch {TINY_BATCH}, a few steps")
    parser.add_argument("--out", type=Path, default=Path("runs/batchnorm"))
    args = parser.parse_args(argv)
    variants = tuple(args.variant or VARIANTS[args.framework])
    unknown = set(variants) - set(VARIANTS[args.framework])
    if unknown:
        parser.error(f"no variant {sorted(unknown)} for {args.framework}: "
                     f"{', '.join(VARIANTS[args.framework])}")
    found = measure(args.framework, args.device, args.tiny, variants)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"batchnorm-{args.framework}.json"
    path.write_text(json.dumps(found, indent=2) + "\n")
    for variant, entry in found["variants"].items():
        print(f"{args.framework} {variant}: {entry['step_ms']:.3f} ms of BatchNorm a step")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
