"""What the tool costs per step: `cnncompare run` against each framework's fastest idiomatic
bare loop, with the training set in memory.

The bare loops (each in a fresh process, on the GPU when the framework sees one):
- PyTorch: the training set normalised once into one tensor on the device; each epoch's
  batches are indexed from it by a permutation (torch.randperm on the device); torch.optim.SGD
  (fused on a GPU); autocast + GradScaler under mixed precision; channels_last on a GPU.
- Keras: model.fit on tf.data.Dataset.from_tensor_slices of the normalised arrays (shuffle,
  batch, prefetch), compiled with steps_per_execution (--keras-steps-per-execution) and
  keras.optimizers.SGD; the mixed_float16 policy (Keras adds the loss scaling) on a GPU
  under mixed precision; jit_compile off, as the tool's default.
Both build the network with the tool's own builders (tf_impl.model, torch_impl.model: the
same layers and parameter count), so the loops differ and the networks do not. The tool runs
the same recipe: constant learning rate, SGD momentum 0.9, no augmentation, seed 0.

Per configuration (model and global batch) and framework, --repeats runs of each, the bare
loop and the tool alternating which goes first. The figure is the training time of the epochs
after the first (the first carries tracing, compilation and autotuning), synchronised with
the device at both ends; the ratio is the tool's median over the bare loop's median (1.0:
the tool adds nothing; 1.10: 10% slower). Writes DIR/overhead.json and DIR/overhead.md.

    python benchmarks/tool_overhead.py --dataset folder --data-dir /tmp/cifar10-jpeg --repeats 3
    python benchmarks/tool_overhead.py --dataset synthetic --synthetic-size 512 --repeats 1 \\
        --configs lenet:32 --out /tmp/overhead-smoke            # a smoke run: does it work?
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# model: batch -> the recipe's constant learning rate (lenet b4: the PyTorch tutorial's)
LEARNING_RATES = {("lenet", 4): 0.001, ("lenet", 32): 0.01, ("resnet9", 512): 0.1}
RECIPE = {"lenet": {"weight_decay": 0.0, "nesterov": False},
          "resnet9": {"weight_decay": 5e-4, "nesterov": True}}
CONFIGS = {"cpu": ["lenet:4", "lenet:32"], "gpu": ["lenet:4", "lenet:32", "resnet9:512"]}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="folder", help="cnncompare --dataset (folder, "
                        "synthetic, cifar10, ...) [default: folder]")
    parser.add_argument("--data-dir", help="cnncompare --data-dir, e.g. the extracted JPEG copy")
    parser.add_argument("--synthetic-size", type=int, default=10_000,
                        help="synthetic training images (test: a fifth) [default: 10000]")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                        help="auto: the GPU when both frameworks see one [default: auto]")
    parser.add_argument("--configs", help="MODEL:BATCH,... [default: lenet:4,lenet:32 on CPU; "
                        "also resnet9:512 on a GPU]")
    parser.add_argument("--frameworks", default="tf,torch", help="[default: tf,torch]")
    parser.add_argument("--epochs", type=int, default=2,
                        help="epochs per run; the first is left out of the figure [default: 2]")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each, alternating; medians [default: 3]")
    parser.add_argument("--precision", choices=("auto", "fp32", "mixed"), default="auto",
                        help="auto: fp32 on CPU, mixed on a GPU [default: auto]")
    parser.add_argument("--steps-per-call", type=int,
                        help="the tool's --steps-per-call [default: the tool's own]")
    parser.add_argument("--pipeline", help="the tool's --pipeline [default: the tool's own]")
    parser.add_argument("--strategy", help="the tool's --strategy (auto, none or mirrored) "
                        "[default: the tool's own]")
    parser.add_argument("--keras-steps-per-execution", type=int, default=32,
                        help="model.compile(steps_per_execution=) of the Keras loop "
                             "[default: 32]")
    parser.add_argument("--keras-strategy", choices=("default", "mirrored"), default="default",
                        help="the Keras loop's distribution: default (none: the fastest, as "
                             "the tool's --strategy auto on one device) or mirrored "
                             "(MirroredStrategy on its one device, as the tool's --strategy "
                             "mirrored: the tool's own cost at equal strategy) [default: default]")
    parser.add_argument("--out", default="runs/overhead", help="[default: runs/overhead]")
    parser.add_argument("--bare-child", help=argparse.SUPPRESS)  # a bare loop's own process
    return parser.parse_args()


def _python(framework: str) -> str:
    from compare.process import runner
    return runner.python_for(framework)


def _environment() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    return env


def device_kind(args: argparse.Namespace, frameworks: list[str]) -> str:
    """cpu or gpu: the GPU under auto only when every framework sees one (a comparison on
    one device kind, as compare's own guard)."""
    if args.device != "auto":
        return args.device
    from compare.machine import devices
    from compare.process import runner
    kinds = {devices.device_kind(runner.framework_environment(fw), "auto")[0]
             for fw in frameworks}
    return "gpu" if kinds == {"gpu"} else "cpu"


def steady_seconds(epoch_times: list[float]) -> float:
    """Training time of the epochs after the first (all of them for a one-epoch run)."""
    return sum(epoch_times[1:]) if len(epoch_times) > 1 else sum(epoch_times)


# ---- the tool

def tool_run(framework: str, job: dict, args: argparse.Namespace) -> dict:
    """`cnncompare run` of the job's recipe; its epochs' training times (evaluation apart)."""
    with tempfile.TemporaryDirectory() as out:
        command = [_python(framework), "-c", "from compare.cli import main; main()", "run",
                   "--framework", framework, "--model", job["model"],
                   "--batch-size", str(job["batch"]), "--epochs", str(job["epochs"]),
                   "--lr", str(job["lr"]), "--schedule", "constant", "--momentum", "0.9",
                   "--weight-decay", str(job["weight_decay"]), "--label-smoothing", "0",
                   "--no-augment", "--precision", job["precision"], "--device", job["device"],
                   "--seed", "0", "--dataset", job["dataset"], "--profile", "0", "--quiet",
                   "--out", out]
        command += ["--data-dir", job["data_dir"]] if job["data_dir"] else []
        command += (["--synthetic-size", str(job["synthetic_size"])]
                    if job["dataset"] == "synthetic" else [])
        command += (["--steps-per-call", str(args.steps_per_call)]
                    if args.steps_per_call else [])
        command += ["--pipeline", args.pipeline] if args.pipeline else []
        command += ["--strategy", args.strategy] if args.strategy else []
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=_environment(),
                       cwd=REPO)
        result = json.loads((Path(out) / "result.json").read_text())
    return {"epoch_times_s": [e["train_time_s"] for e in result["epochs"]],
            "test_accuracy": result["summary"]["final_test_accuracy"],
            "steps_per_call": result["summary"].get("steps_per_call")}


# ---- the bare loops, each run in its own process (--bare-child)

def bare_run(framework: str, job: dict) -> dict:
    done = subprocess.run([_python(framework), __file__, "--bare-child",
                           json.dumps({**job, "framework": framework})],
                          check=True, capture_output=True, text=True, env=_environment(),
                          cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _arrays(job: dict):
    """The tool's decoded arrays, normalised once with its statistics: float32 NHWC."""
    import numpy as np

    from compare.experiment import datasets
    ds = datasets.load(job["dataset"], job["data_dir"],
                       synthetic_train_size=job["synthetic_size"],
                       synthetic_test_size=max(1, job["synthetic_size"] // 5), progress=False)
    mean, std = ds.mean.astype(np.float32) * 255, ds.std.astype(np.float32) * 255

    def normalise(x):
        return (x.astype(np.float32) - mean) / std
    return normalise(ds.train_x), ds.train_y, normalise(ds.test_x), ds.test_y, len(ds.classes)


def bare_torch(job: dict) -> dict:
    import torch
    import torch.nn.functional as F

    from compare.experiment import specs
    from torch_impl.model import build_model
    gpu = job["device"] == "gpu"
    device = torch.device("cuda" if gpu else "cpu")
    torch.manual_seed(0)
    train_x, train_y, test_x, test_y, classes = _arrays(job)
    layout = torch.channels_last if gpu else torch.contiguous_format
    x = torch.from_numpy(train_x).permute(0, 3, 1, 2).to(device, memory_format=layout)
    y = torch.from_numpy(train_y).to(device)
    model = build_model(specs.get_spec(job["model"], classes)).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=job["lr"], momentum=0.9,
                                nesterov=job["nesterov"], weight_decay=job["weight_decay"],
                                **({"fused": True} if gpu else {}))
    mixed = job["precision"] == "mixed"
    dtype = torch.float16 if gpu else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=mixed and gpu)
    batch, steps = job["batch"], len(y) // job["batch"]
    times = []
    model.train()
    for _ in range(job["epochs"]):
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        order = torch.randperm(len(y), device=device)
        for step in range(steps):
            index = order[step * batch:(step + 1) * batch]
            with torch.autocast(device.type, dtype=dtype, enabled=mixed):
                logits = model(x[index])
            loss = F.cross_entropy(logits.float(), y[index])
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        if gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=mixed):
        for start in range(0, len(test_y), 1000):
            images = torch.from_numpy(test_x[start:start + 1000]).permute(0, 3, 1, 2)
            logits = model(images.to(device, memory_format=layout))
            correct += (logits.argmax(1).cpu() == torch.from_numpy(test_y[start:start + 1000])
                        ).sum().item()
    return {"epoch_times_s": times, "test_accuracy": correct / len(test_y)}


def bare_keras(job: dict) -> dict:
    import keras
    import tensorflow as tf

    from compare.experiment import specs
    from tf_impl.model import build_model
    gpu = job["device"] == "gpu"
    if not gpu:
        tf.config.set_visible_devices([], "GPU")
    keras.utils.set_random_seed(0)
    if job["precision"] == "mixed":  # Keras wraps the optimizer in LossScaleOptimizer itself
        keras.mixed_precision.set_global_policy("mixed_float16" if gpu else "mixed_bfloat16")
    train_x, train_y, test_x, test_y, classes = _arrays(job)
    strategy = (tf.distribute.MirroredStrategy(["/gpu:0" if gpu else "/cpu:0"])
                if job["keras_strategy"] == "mirrored" else tf.distribute.get_strategy())
    train = (tf.data.Dataset.from_tensor_slices((train_x, train_y))
             .shuffle(len(train_y), seed=0, reshuffle_each_iteration=True)
             .batch(job["batch"], drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    with strategy.scope():  # build and compile in the scope (the Keras guide)
        model = build_model(specs.get_spec(job["model"], classes))
        model.compile(optimizer=keras.optimizers.SGD(job["lr"], momentum=0.9,
                                                     nesterov=job["nesterov"],
                                                     weight_decay=job["weight_decay"] or None),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=job["keras_steps_per_execution"], jit_compile=False)

    class EpochClock(keras.callbacks.Callback):
        """Each epoch's wall time, the device synchronised at both ends."""

        def __init__(self):
            super().__init__()
            self.times, self.start = [], 0.0

        def on_epoch_begin(self, epoch, logs=None):
            tf.test.experimental.sync_devices()
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            tf.test.experimental.sync_devices()
            self.times.append(time.perf_counter() - self.start)

    clock = EpochClock()
    model.fit(train, epochs=job["epochs"], verbose=0, callbacks=[clock])
    logits = model.predict(test_x, batch_size=1000, verbose=0)
    accuracy = float((logits.argmax(1) == test_y).mean())
    return {"epoch_times_s": clock.times, "test_accuracy": accuracy}


# ---- the measurement

def jobs(args: argparse.Namespace, device: str) -> list[dict]:
    precision = args.precision if args.precision != "auto" else (
        "mixed" if device == "gpu" else "fp32")
    found = []
    for text in (args.configs.split(",") if args.configs else CONFIGS[device]):
        model, _, batch = text.strip().partition(":")
        if model not in RECIPE or not batch.isdigit():
            raise SystemExit(f"--configs {text!r}: expected MODEL:BATCH with MODEL one of "
                             f"{', '.join(RECIPE)}")
        batch = int(batch)
        found.append({"model": model, "batch": batch,
                      "lr": LEARNING_RATES.get((model, batch), 0.01), **RECIPE[model],
                      "epochs": args.epochs, "precision": precision, "device": device,
                      "dataset": args.dataset, "data_dir": args.data_dir,
                      "synthetic_size": args.synthetic_size,
                      "keras_steps_per_execution": args.keras_steps_per_execution,
                      "keras_strategy": args.keras_strategy})
    return found


def measure(args: argparse.Namespace) -> dict:
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    device = device_kind(args, frameworks)
    rows = []
    for job in jobs(args, device):
        for framework in frameworks:
            rows.append({"config": f"{job['model']} batch {job['batch']}",
                         "framework": framework, "job": job, "bare": [], "tool": []})
    for repeat in range(args.repeats):
        for row in rows if repeat % 2 == 0 else rows[::-1]:
            pair = [("bare", lambda r=row: bare_run(r["framework"], r["job"])),
                    ("tool", lambda r=row: tool_run(r["framework"], r["job"], args))]
            for name, run in (pair if repeat % 2 == 0 else pair[::-1]):
                done = run()
                row[name].append(done)
                print(f"{row['config']} {row['framework']} {name} run {repeat + 1}: steady "
                      f"{steady_seconds(done['epoch_times_s']):.2f} s, test accuracy "
                      f"{done['test_accuracy']:.4f}", flush=True)
    for row in rows:
        bare = statistics.median(steady_seconds(r["epoch_times_s"]) for r in row["bare"])
        tool = statistics.median(steady_seconds(r["epoch_times_s"]) for r in row["tool"])
        row.update(bare_median_s=bare, tool_median_s=tool, ratio=tool / bare)
    return {"device": device, "frameworks": frameworks, "repeats": args.repeats,
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "figure": "training time of the epochs after the first, device-synchronised; "
                      "ratio = tool median / bare median",
            "rows": rows}


def markdown(document: dict) -> str:
    strategy = document["rows"][0]["job"].get("keras_strategy", "default") if document[
        "rows"] else "default"
    names = {"tf": f"TensorFlow/Keras (fit, {strategy} strategy)",
             "torch": "PyTorch (permutation loop)"}
    lines = [f"# Tool overhead ({document['device'].upper()}, medians of "
             f"{document['repeats']} alternated run(s))", "",
             f"Figure: {document['figure']}.", "", f"    {document['command']}", "",
             "| configuration | framework | bare loop | cnncompare run | tool / bare |",
             "|---|---|---|---|---|"]
    for row in document["rows"]:
        lines.append(f"| {row['config']} ({row['job']['precision']}) | "
                     f"{names.get(row['framework'], row['framework'])} | "
                     f"{row['bare_median_s']:.2f} s | {row['tool_median_s']:.2f} s | "
                     f"{row['ratio']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = arguments()
    if args.bare_child:
        job = json.loads(args.bare_child)
        run = bare_torch if job["framework"] == "torch" else bare_keras
        print(json.dumps(run(job)))
        return
    document = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(document, indent=2))
    (out / "overhead.md").write_text(markdown(document))
    print(markdown(document))
    print(f"wrote {out / 'overhead.json'} and {out / 'overhead.md'}")


if __name__ == "__main__":
    main()
