"""Two models of one framework trained in turn in one process, from one thread or from two:
why compare.run.own_loop.Twin runs Keras' `fit` on a thread of its own (tf_impl.own_loop.Baton)
but PyTorch's own loop on the run's thread (it yields after each window instead).

Each process builds two LeNets with SGD (momentum) on one synthetic batch held in memory,
warms both, then trains them in turn, a call of 32 steps each, `--calls` times: from the
main thread alone ("one thread"), or the second model from a second thread that works only
while the main one waits, as the twin's baton hands the turn over ("two threads"). The
figure is each model's median milliseconds per step; the forms alternate in fresh processes.

    python -m benchmarks.research.two_threads --processes 3 \\
        --json benchmarks/results/cpu-epyc-avx2-2core/two_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(REPO))

STEPS = 32  # a call's steps, as the tool's default steps per call on a CPU
FORMS = ("one thread", "two threads")


def torch_calls(batch: int) -> list[Callable[[], None]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    def lenet() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
            nn.ReLU(), nn.Linear(84, 10))
    images, labels = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    calls = []
    for _ in range(2):
        model = lenet()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def call(model=model, optimizer=optimizer) -> None:
            for _ in range(STEPS):
                loss = F.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        calls.append(call)
    return calls


def tf_calls(batch: int) -> list[Callable[[], None]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf
    images = tf.random.normal((batch, 32, 32, 3))
    labels = tf.random.uniform((batch,), 0, 10, tf.int32)
    calls = []
    for _ in range(2):
        model = keras.Sequential([
            keras.Input((32, 32, 3)), keras.layers.Conv2D(6, 5, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Conv2D(16, 5, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Flatten(),
            keras.layers.Dense(120, activation="relu"), keras.layers.Dense(84, activation="relu"),
            keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)

        @tf.function
        def steps(model=model, optimizer=optimizer):
            loss = tf.constant(0.0)
            for _ in tf.range(STEPS):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                        labels, model(images), from_logits=True))
                gradients = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss

        calls.append(lambda steps=steps: steps().numpy())  # the read waits for the steps
    return calls


def measure(framework: str, form: str, batch: int, count: int) -> list[float]:
    """Each model's median ms per step over `count` calls each, trained in turn."""
    calls = (torch_calls if framework == "torch" else tf_calls)(batch)
    for call in calls:  # warm: tracing, first allocations
        call()
    times: list[list[float]] = [[], []]

    def timed(index: int) -> None:
        started = time.perf_counter()
        calls[index]()
        times[index].append(1000.0 * (time.perf_counter() - started) / STEPS)

    if form == FORMS[0]:
        for _ in range(count):
            timed(0)
            timed(1)
    else:  # the second model on a thread of its own, working while the main one waits
        condition = threading.Condition()
        second_holds = [False]

        def second() -> None:
            for _ in range(count):
                with condition:
                    condition.wait_for(lambda: second_holds[0])
                timed(1)
                with condition:
                    second_holds[0] = False
                    condition.notify_all()
        thread = threading.Thread(target=second)
        thread.start()
        for _ in range(count):
            timed(0)
            with condition:
                second_holds[0] = True
                condition.notify_all()
                condition.wait_for(lambda: not second_holds[0])
        thread.join()
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3, help="per framework and form")
    parser.add_argument("--calls", type=int, default=15, help="per model and process")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", nargs=2, metavar=("FRAMEWORK", "FORM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a process of its own
        print(json.dumps(measure(args.one[0], args.one[1], args.batch, args.calls)))
        return
    from benchmarks.common import machine_label
    rows = []
    for index in range(args.processes):
        for framework in ("torch", "tf"):
            for form in (FORMS if index % 2 == 0 else FORMS[::-1]):
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.research.two_threads", "--one", framework,
                     form, "--batch", str(args.batch), "--calls", str(args.calls)],
                    cwd=REPO, capture_output=True, text=True, check=True)
                ms = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append({"framework": framework, "form": form, "ms_per_step": ms})
                print(f"{framework:5} {form:11} {ms[0]:.2f} {ms[1]:.2f} ms a step", flush=True)
    medians = {f"{fw} {form}": statistics.median(m for r in rows if (r["framework"], r["form"])
                                                 == (fw, form) for m in r["ms_per_step"])
               for fw in ("torch", "tf") for form in FORMS}
    for name, value in medians.items():
        print(f"{name}: median {value:.2f} ms a step")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"command": "python -m benchmarks.research.two_threads " + " ".join(sys.argv[1:]),
             "machine": machine_label(), "batch": args.batch, "steps_per_call": STEPS,
             "rows": rows, "medians_ms_per_step": medians}, indent=1) + "\n")


if __name__ == "__main__":
    main()
