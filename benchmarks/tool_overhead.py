"""What the shared loop costs each framework: `cnncompare run` against the framework's own
loop on the same recipe (`cnncompare run --own-loop`: Keras compile + fit; the plain PyTorch
loop; compare.run.own_loop), per configuration, alternated in fresh processes; or, with
`--beside`, as `compare` measures it.

`--beside` runs `cnncompare compare` itself, each configuration once a repeat (the order
turned every repeat; `--comparisons` picks some): batch 32 on 10,000 synthetic images and
batch 4 on 12,000 (the PyTorch tutorial's lr 0.001), 3 epochs, 3 seeds, float32, and the
README's first command as it stands. Each comparison trains each own loop in its run's
process, a timing window of each loop in turn, and the two frameworks side by side taking
turns (docs/measurement.md, "On a busy host"); its report's ratios, each seed's paired, give
each repeat's figures: each framework's shared / own ratio and the TF / PyTorch training-time
ratio, with their 95% intervals (the quickstart's 2 seeds: their range). Writes
DIR/overhead-beside.json and .md, and each comparison's figures and what they come from
under DIR/overhead-beside/.

Both train the same model from the same initial weights on the same batches (the tool's data
pipeline) with the same SGD, schedule, precision and distribution, so the loop is the only
difference. The figure is the training time of the epochs after the first (the first carries
tracing, compilation and autotuning) in two measures: the median step time of the
synchronised timing windows (both loops cut their epochs into the same windows,
compare.run.schedule), and the training time itself, synchronised with the device at both
ends. Each ratio pairs a repeat's shared-loop run with the own-loop run beside it in time: the
geometric mean of the per-repeat ratios with its 95% t interval (1.000: the shared loop costs
nothing; 1.050: 5% slower), and the interval's width (high / low). The TF / PyTorch rows pair
the two frameworks' runs of a repeat the same way, in each loop. Writes DIR/overhead.json and
DIR/overhead.md.

    python -m benchmarks.tool_overhead --repeats 5 --out benchmarks/results/cpu-xeon-2core
    python -m benchmarks.tool_overhead --beside --repeats 5 --out DIR
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
# --beside: each configuration's `compare` options, after --dataset synthetic
COMPARISONS = {
    "batch32": ["--batch-size", "32", "--synthetic-size", "10000", "--epochs", "3",
                "--seeds", "3", "--precision", "fp32"],
    "batch4": ["--batch-size", "4", "--lr", LEARNING_RATES[("lenet", 4)], "--synthetic-size",
               "12000", "--epochs", "3", "--seeds", "3", "--precision", "fp32"],
    "quickstart": ["--epochs", "2", "--seeds", "2"]}  # the README's first command
# An interval no wider than these (high / low) resolves a difference of about 10% around
# its centre (shared / own), and the TF / PyTorch ratio to a third
RESOLVING_WIDTH = {"shared_over_own": 1.2, "tf_over_torch": 1.35}
# The figures of each comparison --beside reads, and the resolving width each is held to
BESIDE_RATIOS = {"tf_shared_over_own": "shared_over_own",
                 "torch_shared_over_own": "shared_over_own",
                 "tf_over_torch_train_time": "tf_over_torch"}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", help="MODEL:BATCH,... [default: lenet:4,lenet:32; also "
                        "resnet9:512 on a GPU]")
    parser.add_argument("--beside", action="store_true",
                        help="measure as `compare` does, in comparisons of 3 seeds")
    parser.add_argument("--comparisons", default=",".join(COMPARISONS),
                        help=f"--beside: which of them [default: {','.join(COMPARISONS)}]")
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


def measure_beside(args: argparse.Namespace) -> dict:
    """Each configuration's comparison once a repeat; a row of figures per comparison."""
    from compare.report.own_loops import CAVEAT_RATIO
    folder = args.out / "overhead-beside"
    chosen_names = [name.strip() for name in args.comparisons.split(",") if name.strip()]
    unknown = sorted(set(chosen_names) - set(COMPARISONS))
    if unknown:
        sys.exit(f"--comparisons: no comparison named {', '.join(unknown)} "
                 f"(there are {', '.join(COMPARISONS)})")
    comparisons = {name: COMPARISONS[name] for name in chosen_names}
    rows = []
    for repeat in range(1, args.repeats + 1):
        for name in comparisons if repeat % 2 else list(comparisons)[::-1]:
            out = folder / f"{name}-r{repeat}"
            command = [sys.executable, "-m", "compare.cli", "compare", "--dataset", "synthetic",
                       *comparisons[name], "--out", str(out.resolve()), "--quiet"]
            if common.run_and_say(out.name, command, common.REPO) == 0:
                rows.append({"config": name, **common.comparison_figures(out)})
            common.prune(out)
    summary = {}
    for name in comparisons:
        chosen = [r for r in rows if r["config"] == name]
        summary[name] = {key: _over_repeats([r[key] for r in chosen], RESOLVING_WIDTH[goal])
                         for key, goal in BESIDE_RATIOS.items()}
    return {"machine": common.machine_label(), "date": time.strftime("%Y-%m-%d"),
            "repeats": args.repeats,
            "command": "python -m benchmarks.tool_overhead " + " ".join(sys.argv[1:]),
            "comparisons": {name: " ".join(["cnncompare compare --dataset synthetic",
                                            *options]) for name, options in comparisons.items()},
            "centre_goal": CAVEAT_RATIO, "resolving_width": RESOLVING_WIDTH,
            "rows": rows, "summary": summary}


def _over_repeats(entries: list[dict | None], width: float) -> dict:
    """The repeats' centres and widths: medians, and how many resolve (`width`)."""
    got = [e for e in entries if e]
    return {"n": len(got),
            "median_centre": statistics.median(e["ratio"] for e in got) if got else None,
            "median_width": statistics.median(e["width"] for e in got) if got else None,
            "widest": max((e["width"] for e in got), default=None),
            "resolving": sum(e["width"] <= width for e in got)}


def markdown_beside(document: dict) -> str:
    names = {"tf_shared_over_own": "TensorFlow/Keras: shared / `fit`",
             "torch_shared_over_own": "PyTorch: shared / plain loop",
             "tf_over_torch_train_time": "TF / PyTorch training time"}
    lines = [f"# The shared loop against each framework's own loop, as `compare` measures it "
             f"({document['machine']}, {document['date']})", "", f"`{document['command']}`",
             "", "Each ratio: centre [95% interval, or the range of 2 seeds] (width, high / "
             "low); comparisons in the order they ran:", "",
             "| comparison | " + " | ".join(names.values()) + " |", "|---|---|---|---|"]
    lines += [f"| {r['comparison']} | " + " | ".join(_ratio_text(r[key]) if r[key] else "-"
                                                     for key in names) + " |"
              for r in document["rows"]]
    lines += ["", f"Over the repeats: the median centre, the median and widest width, and how "
              f"many intervals are no wider than {document['resolving_width']['shared_over_own']}x"
              f" (shared / own) or {document['resolving_width']['tf_over_torch']}x (TF / "
              f"PyTorch):", "", "| configuration | " + " | ".join(names.values()) + " |",
              "|---|---|---|---|"]
    for name, figures in document["summary"].items():
        lines.append(f"| {name} | " + " | ".join(
            "-" if not f["n"] else f"{f['median_centre']:.3f}, {f['median_width']:.2f}x "
            f"(widest {f['widest']:.2f}x), {f['resolving']} of {f['n']}"
            for f in (figures[key] for key in names)) + " |")
    lines += ["", "Commands:", ""] + [f"- {name}: `{command}`"
                                      for name, command in document["comparisons"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = arguments()
    if args.beside:
        document = measure_beside(args)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "overhead-beside.json").write_text(json.dumps(document, indent=1) + "\n")
        (args.out / "overhead-beside.md").write_text(markdown_beside(document))
        print(markdown_beside(document))
        return
    document = measure(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.json").write_text(json.dumps(document, indent=2))
    (args.out / "overhead.md").write_text(markdown(document))
    print(markdown(document))
    print(f"wrote {args.out / 'overhead.json'} and {args.out / 'overhead.md'}")


if __name__ == "__main__":
    main()
