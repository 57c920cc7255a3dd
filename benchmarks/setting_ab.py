"""One setting's values against each other, per framework: `cnncompare run --SETTING A` and
`--SETTING B`, alternated, in fresh processes; medians and the B/A ratio.

The figure is the training time of the epochs after the first (the first carries tracing and
the pipeline's start), synchronised with the device, as the report's steady figures are; the
ratio is B's median over A's (above 1: B trained slower).

    python -m benchmarks.setting_ab --setting pipeline --values naive,tuned --repeats 5
    python -m benchmarks.setting_ab --setting strategy --values none,mirrored --repeats 5
    python -m benchmarks.setting_ab --setting precision --values fp32,mixed --repeats 3 \\
        --dataset folder --data-dir /tmp/cifar10-jpeg --epochs 2
    # as on a CPU without AVX-512 or bfloat16 instructions, from any x86-64 machine:
    tests/as_avx2_cpu.sh python -m benchmarks.setting_ab --setting precision \\
        --values fp32,mixed --model resnet9 --synthetic-size 64 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run by path (python benchmarks/setting_ab.py): the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common

# The environment that makes a run behave as on another CPU: the CPU flags --precision auto
# reads, and the frameworks' kernel limits.
AS_ANOTHER_CPU = ("CNNCOMPARE_CPU_FLAGS", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                  "TF_ENABLE_ONEDNN_OPTS")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", required=True,
                        help="a `cnncompare run` option without its dashes, e.g. pipeline")
    parser.add_argument("--values", required=True, help="A,B: the two values, A the baseline")
    parser.add_argument("--frameworks", default="tf,torch", help="[default: tf,torch]")
    parser.add_argument("--model", default="lenet", help="[default: lenet]")
    parser.add_argument("--batch-size", type=int, default=32, help="[default: 32]")
    common.add_run_options(parser)
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each value, alternating which goes first [default: 5]")
    parser.add_argument("--out", type=Path, help="DIR/<setting>.json and .md [default: "
                        "runs/ab-<setting>]")
    return parser.parse_args()


def run(framework: str, value: str, args: argparse.Namespace) -> dict:
    """Seconds of training in the epochs after the first, and what the run resolved."""
    done = common.run(framework, args, "--model", args.model, "--batch-size",
                      str(args.batch_size), f"--{args.setting}", value)
    manifest = done["fairness"]
    return {"seconds": done["seconds"],
            "precision": (manifest.get("precision") or {}).get("compute_type"),
            "wrapper": (manifest.get("strategy") or {}).get("wrapper")}


def main() -> int:
    args = arguments()
    values = args.values.split(",")
    if len(values) != 2:
        sys.exit("--values takes two values: A,B")
    rows = []
    for framework in args.frameworks.split(","):
        runs = {value: [] for value in values}
        for i in range(args.repeats):
            for value in (values if i % 2 == 0 else values[::-1]):
                runs[value].append(run(framework, value, args))
                print(f"{framework} {args.setting}={value} run {i + 1}: "
                      f"{runs[value][-1]['seconds']:.3f} s", flush=True)
        medians = {v: statistics.median(r["seconds"] for r in runs[v]) for v in values}
        rows.append({"framework": framework, "runs": runs, "median_s": medians,
                     "ratio": medians[values[1]] / medians[values[0]]})
    # what holds the run to another CPU's instructions, if set (tests/as_avx2_cpu.sh sets all)
    limits = [f"{name}='{os.environ[name]}'" for name in AS_ANOTHER_CPU if name in os.environ]
    command = " ".join([*limits, "python -m benchmarks.setting_ab", *sys.argv[1:]])
    document = {"command": command, "cpu": common.machine_label(),
                "date": time.strftime("%Y-%m-%d"), "setting": args.setting, "values": values,
                "figure": "training time of the epochs after the first; medians of alternated "
                          f"runs; ratio = {values[1]} / {values[0]}", "rows": rows}
    out = args.out or Path(f"runs/ab-{args.setting}")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.setting}.json").write_text(json.dumps(document, indent=2))
    text = markdown(document)
    (out / f"{args.setting}.md").write_text(text)
    print(text)
    return 0


def markdown(document: dict) -> str:
    """The table: each value's median and, in brackets, the fastest and slowest run (the
    spread that says whether a ratio is beyond noise), then the ratio of the medians."""
    a, b = document["values"]

    def cell(runs: list[dict]) -> str:
        seconds = sorted(r["seconds"] for r in runs)
        return f"{statistics.median(seconds):.3f} [{seconds[0]:.3f}-{seconds[-1]:.3f}]"
    lines = [f"# --{document['setting']} {a} against {b} ({document['cpu']}, "
             f"{document['date']})", "", f"`{document['command']}`", "",
             f"Training time of the epochs after the first, seconds: median [fastest-slowest] "
             f"of {len(document['rows'][0]['runs'][a])} alternated runs.", "",
             f"| framework | {a} | {b} | {b} / {a} (medians) |", "|---|---|---|---|"]
    lines += [f"| {r['framework']} | {cell(r['runs'][a])} | {cell(r['runs'][b])} | "
              f"{r['ratio']:.3f} |" for r in document["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
