"""One setting's values against each other, per framework: `cnncompare run --SETTING A` and
`--SETTING B`, alternated, in fresh processes; medians and the B/A ratio.

Two figures, each of the epochs after the first (the first carries tracing and the pipeline's
start), as the report's steady figures are: the training time, synchronised with the device,
and the median step time of the run's timing windows. For each, the ratio of B's median over
A's (above 1: B trained slower), and the paired ratio: each of A's runs against the B run
beside it in time, their geometric mean with its 95% t interval and width (high / low), which
a host whose speed drifts from one minute to the next widens less than it moves the medians.

    python -m benchmarks.setting_ab --setting pipeline --values naive,tuned --repeats 5
    python -m benchmarks.setting_ab --setting strategy --values none,mirrored --repeats 5
    python -m benchmarks.setting_ab --setting timing-window-s --values 0.5,0.125 --repeats 8
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
    return {"seconds": done["seconds"], "step_ms": done["step_ms"],
            "precision": (manifest.get("precision") or {}).get("compute_type"),
            "wrapper": (manifest.get("strategy") or {}).get("wrapper")}


def main() -> int:
    args = arguments()
    values = args.values.split(",")
    if len(values) != 2:
        sys.exit("--values takes two values: A,B")
    rows = []
    for framework in args.frameworks.split(","):
        runs: dict[str, list[dict]] = {value: [] for value in values}
        for i in range(args.repeats):
            for value in (values if i % 2 == 0 else values[::-1]):
                runs[value].append(run(framework, value, args))
                step = runs[value][-1]["step_ms"]
                print(f"{framework} {args.setting}={value} run {i + 1}: "
                      f"{runs[value][-1]['seconds']:.3f} s"
                      + (f", {step:.3f} ms a step" if step else ""), flush=True)
        rows.append(summarise(framework, runs, values))
    # what holds the run to another CPU's instructions, if set (tests/as_avx2_cpu.sh sets all)
    limits = [f"{name}='{os.environ[name]}'" for name in AS_ANOTHER_CPU if name in os.environ]
    command = " ".join([*limits, "python -m benchmarks.setting_ab", *sys.argv[1:]])
    document = {"command": command, "cpu": common.machine_label(),
                "date": time.strftime("%Y-%m-%d"), "setting": args.setting, "values": values,
                "figure": "training time and median window step time of the epochs after the "
                          f"first; medians of alternated runs; ratio = {values[1]} / {values[0]}",
                "rows": rows}
    out = args.out or Path(f"runs/ab-{args.setting}")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.setting}.json").write_text(json.dumps(document, indent=2))
    text = markdown(document)
    (out / f"{args.setting}.md").write_text(text)
    print(text)
    return 0


def summarise(framework: str, runs: dict[str, list[dict]], values: list[str]) -> dict:
    """One framework's row: each value's median of both figures, the ratio of the medians
    (B / A) and the paired ratio of the runs side by side in time (the i-th of each value)."""
    a, b = values
    row: dict = {"framework": framework, "runs": runs}
    for figure, key in (("seconds", "s"), ("step_ms", "step_ms")):
        if not all(r[figure] for v in values for r in runs[v]):
            continue  # a figure some run did not record (an own loop's windows)
        medians = {v: statistics.median(r[figure] for r in runs[v]) for v in values}
        row[f"median_{key}"] = medians
        row[f"ratio_{key}"] = medians[b] / medians[a]
        row[f"paired_{key}"] = common.ratio_interval(
            [y[figure] / x[figure] for x, y in zip(runs[a], runs[b])])
    row["ratio"] = row["ratio_s"]  # the medians' ratio of training time, as first written
    return row


FIGURES = (("seconds", "s", "Training time of the epochs after the first, seconds"),
           ("step_ms", "step_ms",
            "Median step time of the timing windows after the first epoch, ms"))


def markdown(document: dict) -> str:
    """A table per figure: each value's median and, in brackets, the fastest and slowest run
    (the spread that says whether a ratio is beyond noise), the ratio of the medians and,
    where written, the paired ratio with its 95% interval and width."""
    a, b = document["values"]
    rows = document["rows"]

    def cell(runs: list[dict], figure: str) -> str:
        values = sorted(r[figure] for r in runs)
        return f"{statistics.median(values):.3f} [{values[0]:.3f}-{values[-1]:.3f}]"

    title_line = (f"# --{document['setting']} {a} against {b} ({document['cpu']}, "
                  f"{document['date']})")
    lines = [title_line, "", f"`{document['command']}`", ""]
    for figure, key, title in FIGURES:
        if not all(f"ratio_{key}" in r or (key == "s" and "ratio" in r) for r in rows):
            continue  # a figure an earlier version of this script did not write
        lines += [(f"{title}: median [fastest-slowest] of {len(rows[0]['runs'][a])} "
                   "alternated runs; the paired ratio pairs each run with the other value's "
                   "beside it in time."), "",
                  f"| framework | {a} | {b} | {b} / {a} (medians) | {b} / {a} (paired) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['framework']} | {cell(r['runs'][a], figure)} | "
                  f"{cell(r['runs'][b], figure)} | {r.get(f'ratio_{key}', r['ratio']):.3f} | "
                  f"{common.ratio_cell(r.get(f'paired_{key}'))} |" for r in rows]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
