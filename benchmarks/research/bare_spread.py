"""How much a bare script's speed moves from run to run on this host, outside cnncompare: the
spread the tool's figures cannot be narrower than when runs are timed one after another.

Each run is a fresh process of a bare script as the frameworks' guides write it: LeNet on
synthetic 32x32 images held in memory, SGD with momentum, 3 epochs; Keras with
`model.compile` + `model.fit` on NumPy arrays, PyTorch with a plain loop over a DataLoader.
Nothing of cnncompare is imported by them. A run's figure is its steady step time: the
training time of its epochs after the first over their steps. The frameworks alternate
(Keras, PyTorch, PyTorch, Keras, ...) so that pairs are adjacent in time as `compare
--no-turns` places its seeds' runs.

For each framework the table gives the runs' median step time, their range and the standard
deviation of the log step times; for the TF / PyTorch ratio of each adjacent pair, the 95% t
interval over the first 3 pairs (as 3 seeds would give) and over all pairs. With
`--tool DIR...`, the same for the shared loop of `compare` comparisons (each seed's run
result's median window step time after the first epoch), seed to seed.

    python -m benchmarks.research.bare_spread --runs 6 --batch 32 --images 10000 --out DIR \\
        [--tool COMPARISON_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(REPO))

from benchmarks import common

EPOCHS = 3


def _images(count: int, seed: int = 0):
    import numpy as np
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count)
    # each class a brightness offset, so that the network learns something
    images = (rng.random((count, 32, 32, 3), dtype=np.float32) * 0.5
              + labels[:, None, None, None].astype(np.float32) / 20)
    return images, labels


def bare_keras(batch: int, images: int) -> list[float]:
    """The epochs' training times, s: Keras compile + fit, as its guides write it."""
    import keras
    x, y = _images(images)
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(6, 5, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(16, 5, activation="relu"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(120, activation="relu"),
        keras.layers.Dense(84, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times: list[float] = []

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            times.append(time.perf_counter() - self.started)

    model.fit(x, y, batch_size=batch, epochs=EPOCHS, shuffle=True, verbose=0,
              callbacks=[EpochClock()])
    return times


def bare_torch(batch: int, images: int) -> list[float]:
    """The epochs' training times, s: the plain PyTorch loop of its tutorials."""
    import torch
    from torch import nn
    x, y = _images(images)
    data = torch.utils.data.TensorDataset(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(),
                                          torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True)
    model = nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120),
                          nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for _ in range(EPOCHS):
        started = time.perf_counter()
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss_fn(model(inputs), labels).backward()
            optimizer.step()
        times.append(time.perf_counter() - started)
    return times


SCRIPTS = {"tf": bare_keras, "torch": bare_torch}


def steady_step_ms(epoch_times: list[float], batch: int, images: int) -> float:
    steps = math.ceil(images / batch)
    return sum(epoch_times[1:]) / (steps * (len(epoch_times) - 1)) * 1e3


def spread(values: list[float]) -> dict:
    logs = [math.log(v) for v in values]
    return {"median": statistics.median(values), "low": min(values), "high": max(values),
            "log_std": statistics.stdev(logs) if len(logs) > 1 else None, "n": len(values)}


def tool_steps(directory: Path) -> dict[str, dict[int, float]]:
    """Each framework's shared-loop median window step time by seed, from a comparison."""
    found: dict[str, dict[int, float]] = {"tf": {}, "torch": {}}
    for path in sorted(directory.glob("runs/*-seed*/result.json")):
        result = json.loads(path.read_text())
        found[result["framework"]][result["config"]["seed"]] = (
            result["summary"]["steady_step_time_ms"]["median"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="fresh processes per framework")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tool", type=Path, nargs="*", default=[],
                        help="compare comparison folders to set beside the bare scripts")
    parser.add_argument("--one", choices=sorted(SCRIPTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one bare run, its epoch times as JSON
        print(json.dumps(SCRIPTS[args.one](args.batch, args.images)))
        return
    runs: dict[str, list[float]] = {"tf": [], "torch": []}
    for index in range(args.runs):
        for framework in (("tf", "torch") if index % 2 == 0 else ("torch", "tf")):
            done = subprocess.run([sys.executable, "-m", "benchmarks.research.bare_spread", "--one",
                                   framework, "--batch", str(args.batch), "--images",
                                   str(args.images), "--out", str(args.out)],
                                  capture_output=True, text=True, check=True, cwd=REPO)
            times = json.loads(done.stdout.strip().splitlines()[-1])
            runs[framework].append(steady_step_ms(times, args.batch, args.images))
            print(f"{framework} run {index + 1}: {runs[framework][-1]:.3f} ms a step", flush=True)
    pairs = [tf / torch for tf, torch in zip(runs["tf"], runs["torch"])]
    record: dict = {
        "command": "python -m benchmarks.research.bare_spread " + " ".join(sys.argv[1:]),
        "batch": args.batch, "images": args.images, "epochs": EPOCHS,
        "bare": {"steps_ms": runs, "spread": {fw: spread(v) for fw, v in runs.items()},
                 "tf_over_torch_first_3": common.ratio_interval(pairs[:3]),
                 "tf_over_torch_all": common.ratio_interval(pairs)},
        "tool": {}}
    for directory in args.tool:
        steps = tool_steps(directory)
        seeds = sorted(set(steps["tf"]) & set(steps["torch"]))
        record["tool"][directory.name] = {
            "spread": {fw: spread(list(v.values())) for fw, v in steps.items() if v},
            "tf_over_torch": common.ratio_interval(
                [steps["tf"][s] / steps["torch"][s] for s in seeds])}
    record["machine"] = common.machine_label()
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"bare_spread-batch{args.batch}"
    (args.out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / f"{name}.md").write_text(markdown(record))
    print(markdown(record))


def markdown(record: dict) -> str:
    def row(label: str, entry: dict) -> str:
        s = entry["spread"]
        cells = [f"{s[fw]['median']:.3f} ms ({s[fw]['low']:.3f}-{s[fw]['high']:.3f}), "
                 f"log sd {s[fw]['log_std']:.3f}" if fw in s and s[fw]["log_std"] is not None
                 else "-" for fw in ("tf", "torch")]
        return f"| {label} | " + " | ".join(cells) + " |"

    def interval(entry: dict | None) -> str:
        return ("-" if entry is None else f"{entry['ratio']:.3f} [{entry['low']:.3f}, "
                f"{entry['high']:.3f}] ({entry['width']:.2f}x, n={entry['n']})")

    lines = ["# Run-to-run spread: bare scripts against cnncompare's shared loop\n",
             f"{record['machine']}; LeNet, batch {record['batch']}, {record['images']} "
             f"synthetic images, {record['epochs']} epochs\n", f"    {record['command']}\n",
             "| runs | TensorFlow/Keras: step time (range), log sd | PyTorch: step time (range), "
             "log sd |", "|---|---|---|",
             row("bare scripts, fresh processes", record["bare"])]
    lines += [row(f"`compare` {name}, seed to seed", entry)
              for name, entry in record["tool"].items()]
    lines += ["", "| runs | TF / PyTorch step time, 95% interval |", "|---|---|",
              f"| bare scripts, the first 3 pairs | "
              f"{interval(record['bare']['tf_over_torch_first_3'])} |",
              f"| bare scripts, all pairs | {interval(record['bare']['tf_over_torch_all'])} |"]
    lines += [f"| `compare` {name} | {interval(entry['tf_over_torch'])} |"
              for name, entry in record["tool"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
