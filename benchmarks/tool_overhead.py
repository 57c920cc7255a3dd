"""What the shared loop costs each framework: `cnncompare run` against the framework's own
loop on the same recipe (`cnncompare run --own-loop`: Keras compile + fit; the plain PyTorch
loop; compare.run.own_loop), per configuration, alternated in fresh processes.

Both train the same model from the same initial weights on the same batches (the tool's data
pipeline) with the same SGD, schedule, precision and distribution, so the loop is the only
difference. The figure is the training time of the epochs after the first (the first carries
tracing, compilation and autotuning), synchronised with the device at both ends; the ratio
is the shared loop's median over the own loop's (1.000: the shared loop costs nothing;
1.050: 5% slower). Writes DIR/overhead.json and DIR/overhead.md.

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
                      f"{done['seconds']:.3f} s, test accuracy {done['test_accuracy']:.4f}",
                      flush=True)
    for row in rows:
        shared = statistics.median(r["seconds"] for r in row["shared"])
        own = statistics.median(r["seconds"] for r in row["own"])
        row.update(shared_median_s=shared, own_median_s=own, ratio=shared / own,
                   device=row["shared"][0]["device"])
    return {"machine": common.machine_label(), "date": time.strftime("%Y-%m-%d"),
            "repeats": args.repeats, "epochs": args.epochs,
            "command": "python -m benchmarks.tool_overhead " + " ".join(sys.argv[1:]),
            "figure": "training time of the epochs after the first, device-synchronised; "
                      "ratio = shared loop median / own loop median",
            "rows": rows}


def markdown(document: dict) -> str:
    names = {"tf": "TensorFlow/Keras (Model.fit)", "torch": "PyTorch (plain loop)"}
    lines = [f"# The shared loop against each framework's own loop ({document['machine']}, "
             f"{document['date']})", "", f"`{document['command']}`", "",
             f"Figure: {document['figure']}; medians of {document['repeats']} alternated "
             f"runs of {document['epochs']} epochs.", "",
             "| configuration | framework | device | own loop | shared loop | shared / own |",
             "|---|---|---|---|---|---|"]
    for row in document["rows"]:
        lines.append(f"| {row['config'].replace(':', ', batch ')} | "
                     f"{names.get(row['framework'], row['framework'])} | {row['device']} | "
                     f"{row['own_median_s']:.3f} s | {row['shared_median_s']:.3f} s | "
                     f"{row['ratio']:.3f} |")
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
