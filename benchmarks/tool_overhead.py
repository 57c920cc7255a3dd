"""What the shared loop costs each framework: `cnncompare run` against the framework's own
loop on the same recipe (`cnncompare run --own-loop`: Keras compile + fit; the plain PyTorch
loop; compare.run.own_loop), per configuration, alternated in fresh processes.

Both train the same model from the same initial weights on the same batches (the tool's data
pipeline) with the same SGD, schedule, precision and distribution, so the loop is the only
difference. The figure is the training time of the epochs after the first (the first carries
tracing, compilation and autotuning) in two measures: the median step time of the
synchronised timing windows (both loops cut their epochs into the same windows,
compare.run.windows), and the training time itself, synchronised with the device at both
ends. Each ratio pairs a repeat's shared-loop run with the own-loop run beside it in time: the
geometric mean of the per-repeat ratios with its 95% t interval (1.000: the shared loop costs
nothing; 1.050: 5% slower), and the interval's width (high / low). The TF / PyTorch rows pair
the two frameworks' runs of a repeat the same way, in each loop. Writes DIR/overhead.json and
DIR/overhead.md.

    python -m benchmarks.tool_overhead --repeats 5 --out benchmarks/results/cpu-xeon-2core
    python -m benchmarks.tool_overhead --configs lenet:32 --synthetic-size 512 --repeats 1 \\
        --out /tmp/overhead-smoke                               # a smoke run: does it work?
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run by path (python benchmarks/tool_overhead.py): the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common

# The configurations: the seed's batch 4 (the PyTorch tutorial's lr 0.001) and 32 on any
# device, and the ResNet-9 recipe at batch 512 on a GPU.
CONFIGS = {"cpu": ["lenet:4", "lenet:32"], "gpu": ["lenet:4", "lenet:32", "resnet9:512"]}
LEARNING_RATES = {("lenet", 4): "0.001"}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", help="MODEL:BATCH,... [default: lenet:4,lenet:32; also "
                        "resnet9:512 on a GPU]")
    parser.add_argument("--frameworks", default="tf,torch", help="[default: tf,torch]")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each loop, alternating which goes first [default: 5]")
    common.add_run_options(parser)
    parser.add_argument("--out", type=Path, default=Path("runs/overhead"),
                        help="[default: runs/overhead]")
    return parser.parse_args()


def run(framework: str, config: str, own_loop: bool, args: argparse.Namespace) -> dict:
    """One run in a fresh process: its training seconds, accuracy and device."""
    model, batch = config.split(":")
    lr = LEARNING_RATES.get((model, int(batch)))
    return common.run(framework, args, "--model", model, "--batch-size", batch,
                      *(["--lr", lr] if lr else []), own_loop=own_loop)


def measure(args: argparse.Namespace) -> dict:
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    from compare.machine import devices
    kind = "gpu" if devices.nvidia_gpus() and "--device=cpu" not in args.option else "cpu"
    configs = args.configs.split(",") if args.configs else CONFIGS[kind]
    rows = [{"config": c, "framework": fw, "shared": [], "own": []}
            for c in configs for fw in frameworks]
    for repeat in range(args.repeats):
        for row in rows if repeat % 2 == 0 else rows[::-1]:
            order = [("shared", False), ("own", True)]
            for name, own_loop in order if repeat % 2 == 0 else order[::-1]:
                done = run(row["framework"], row["config"], own_loop, args)
                row[name].append(done)
                print(f"{row['config']} {row['framework']} {name} loop, run {repeat + 1}: "
                      f"{done['seconds']:.3f} s, median step {done['step_ms']} ms, "
                      f"test accuracy {done['test_accuracy']:.4f}",
                      flush=True)
    for row in rows:
        row.update(device=row["shared"][0]["device"],
                   **{f"{loop}_median_{key}": _median([r[key] for r in row[loop]])
                      for loop in ("shared", "own") for key in ("step_ms", "seconds")},
                   step_ratio=_paired(row["shared"], row["own"], "step_ms"),
                   time_ratio=_paired(row["shared"], row["own"], "seconds"))
    between = []
    for config in configs:
        by_framework = {r["framework"]: r for r in rows if r["config"] == config}
        if {"tf", "torch"} <= set(by_framework):
            tf, torch = by_framework["tf"], by_framework["torch"]
            between.append({"config": config, **{
                f"{loop}_{key}_ratio": _paired(tf[loop], torch[loop], key)
                for loop in ("shared", "own") for key in ("step_ms", "seconds")}})
    return {"machine": common.machine_label(), "date": time.strftime("%Y-%m-%d"),
            "repeats": args.repeats, "epochs": args.epochs,
            "command": "python -m benchmarks.tool_overhead " + " ".join(sys.argv[1:]),
            "figure": "after the first epoch: the median step time of the synchronised windows "
                      "(step), and the training time, device-synchronised (time); ratios: "
                      "geometric mean of the per-repeat ratios, 95% t interval",
            "rows": rows, "tf_over_torch": between}


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _paired(numerator: list[dict], denominator: list[dict], key: str) -> dict:
    """The ratio of `key` over the repeats, paired repeat by repeat (runs beside each other
    in time), with its 95% interval and that interval's width (high / low)."""
    from compare.report.stats import paired_ratio
    ratio = paired_ratio(dict(enumerate(r[key] for r in numerator)),
                         dict(enumerate(r[key] for r in denominator)), key)
    low, high = ratio["low"], ratio["high"]
    return {"ratio": ratio["ratio"], "low": low, "high": high, "n": ratio["n"],
            "width": high / low if low and high else None}


def _ratio_text(ratio: dict) -> str:
    if ratio["ratio"] is None:
        return "n/a"
    if ratio["width"] is None:
        return f"{ratio['ratio']:.3f}"
    return f"{ratio['ratio']:.3f} [{ratio['low']:.3f}, {ratio['high']:.3f}] ({ratio['width']:.2f}x)"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} ms"


def markdown(document: dict) -> str:
    names = {"tf": "TensorFlow/Keras (Model.fit)", "torch": "PyTorch (plain loop)"}
    lines = [f"# The shared loop against each framework's own loop ({document['machine']}, "
             f"{document['date']})", "", f"`{document['command']}`", "",
             f"Figures: {document['figure']}; {document['repeats']} alternated runs of "
             f"{document['epochs']} epochs each. A ratio reads: centre [95% interval] "
             "(interval width, high / low).", "",
             "| configuration | framework | own loop, median step | shared loop, median step "
             "| shared / own, step | shared / own, time |", "|---|---|---|---|---|---|"]
    for row in document["rows"]:
        lines.append(f"| {row['config'].replace(':', ', batch ')} | "
                     f"{names.get(row['framework'], row['framework'])} | "
                     f"{_ms(row['own_median_step_ms'])} | {_ms(row['shared_median_step_ms'])} | "
                     f"{_ratio_text(row['step_ratio'])} | {_ratio_text(row['time_ratio'])} |")
    if document["tf_over_torch"]:
        lines += ["", "TF / PyTorch, the two frameworks' runs of each repeat paired:", "",
                  "| configuration | shared loop, step | shared loop, time | own loops, step "
                  "| own loops, time |", "|---|---|---|---|---|"]
        for row in document["tf_over_torch"]:
            lines.append(f"| {row['config'].replace(':', ', batch ')} | " + " | ".join(
                _ratio_text(row[f"{loop}_{key}_ratio"]) for loop in ("shared", "own")
                for key in ("step_ms", "seconds")) + " |")
    device = document["rows"][0]["device"] if document["rows"] else "n/a"
    lines += ["", f"Device: {device}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = arguments()
    document = measure(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.json").write_text(json.dumps(document, indent=2))
    (args.out / "overhead.md").write_text(markdown(document))
    print(markdown(document))
    print(f"wrote {args.out / 'overhead.json'} and {args.out / 'overhead.md'}")


if __name__ == "__main__":
    main()
