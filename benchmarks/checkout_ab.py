"""Two checkouts of cnncompare measured as `compare` measures: `tool_overhead --beside` run in
each, one repeat at a time, alternated A B B A (so a drift of the host falls on both alike),
to show that a change kept what the tool measures: each comparison's shared / own ratios and
TF / PyTorch ratio, their centres and interval widths, before and after, against the spread
of the repeats themselves, with a Mann-Whitney test of each side's 5 centres and widths.

    git worktree add /tmp/before <commit>; git worktree add /tmp/after <commit>
    python -m benchmarks.checkout_ab --before /tmp/before --after /tmp/after --repeats 5 \\
        --out benchmarks/results/cpu-xeon-2core/schedule-before-after
    python -m benchmarks.checkout_ab --summarise --out DIR/NAME   # its tables from NAME.json

Each checkout runs on this interpreter with its own directory first on PYTHONPATH (the
packages installed here, the code its own). Writes OUT.json and OUT.md, and each repeat's
comparisons' figures under OUT/ (packed into OUT/runs.tar.xz).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.tool_overhead import (  # noqa: E402
    BESIDE_RATIOS,
    COMPARISONS,
    RESOLVING_WIDTH,
    _over_repeats,
)

SIDES = ("before", "after")
NAMES = {"tf_shared_over_own": "TF shared / `fit`",
         "torch_shared_over_own": "PyTorch shared / plain",
         "tf_over_torch_train_time": "TF / PyTorch training time"}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the checkout before")
    parser.add_argument("--after", type=Path, help="the checkout after")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of each [default: 5]")
    parser.add_argument("--comparisons", default=",".join(COMPARISONS),
                        help=f"[default: {','.join(COMPARISONS)}]")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summarise", action="store_true",
                        help="measure nothing: sum up OUT.json's rows again")
    args = parser.parse_args()
    if not args.summarise and (args.before is None or args.after is None):
        parser.error("--before and --after name the two checkouts")
    return args


def order(repeat: int) -> tuple[str, ...]:
    """A B, B A, A B, ...: each side first as often as the other, by repeat (1-based)."""
    return SIDES if repeat % 2 else SIDES[::-1]


def run_side(checkout: Path, comparisons: str, out: Path) -> list[dict]:
    """One repeat of tool_overhead --beside in `checkout`: its rows (one per comparison)."""
    checkout = checkout.resolve()
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-m", "benchmarks.tool_overhead", "--beside", "--repeats", "1",
               "--comparisons", comparisons, "--out", str(out.resolve())]
    started = time.monotonic()
    subprocess.run(command, cwd=checkout, env=environment, check=True)
    print(f"{out.name}: {time.monotonic() - started:.0f} s", flush=True)
    return json.loads((out / "overhead-beside.json").read_text())["rows"]


def summarise(rows: list[dict]) -> dict:
    """Per side, comparison and figure: the repeats' median centre, median and widest width,
    and the range of the centres (the repeats' own spread); per comparison and figure, the
    two-sided Mann-Whitney p of the centres and of the widths, before against after."""
    from scipy.stats import mannwhitneyu
    summary: dict = {"tests": {}}
    names = sorted({row["config"] for row in rows})
    for side in SIDES:
        for name in names:
            chosen = [row for row in rows if (row["side"], row["config"]) == (side, name)]
            for key, goal in BESIDE_RATIOS.items():
                entries = [row[key] for row in chosen]
                figures = _over_repeats(entries, RESOLVING_WIDTH[goal])
                centres = [entry["ratio"] for entry in entries if entry]
                figures["centres"] = [min(centres), max(centres)] if centres else None
                summary.setdefault(side, {}).setdefault(name, {})[key] = figures
    for name in names:
        for key in BESIDE_RATIOS:
            found = {side: [row[key] for row in rows if (row["side"], row["config"]) == (
                side, name) and row[key]] for side in SIDES}
            if all(found.values()):
                summary["tests"].setdefault(name, {})[key] = {
                    part: float(mannwhitneyu([e[field] for e in found["before"]],
                                             [e[field] for e in found["after"]]).pvalue)
                    for part, field in (("centre_p", "ratio"), ("width_p", "width"))}
    return summary


def markdown(document: dict) -> str:
    return "\n".join([f"# Before and after, as `compare` measures ({document['machine']}, "
                      f"{document['date']})", "", f"`{document['command']}`", "",
                      f"Before: {document['before']}; after: {document['after']}; "
                      f"{document['repeats']} repeats of each, alternated A B B A. *Within the "
                      "spread*: the median centre after no further from the one before than the "
                      "centres before spread, and the median width after no wider than the "
                      "widest before; p: Mann-Whitney, two-sided, the centres and the widths "
                      "before against after.", "", table(document)])


def table(document: dict) -> str:
    """Per comparison and figure, before and after: the median centre over the repeats [the
    range of the centres]; the median interval width (the widest)."""
    lines = ["| comparison | figure | before: centre [range]; width (widest) | after | "
             "within the spread | p: centres, widths |", "|---|---|---|---|---|---|"]
    summary = document["summary"]
    for name in summary["before"]:
        for key in BESIDE_RATIOS:
            cells = []
            for side in SIDES:
                entry = summary[side][name][key]
                if not entry["n"]:
                    cells.append("none")
                    continue
                low, high = entry["centres"]
                cells.append(f"{entry['median_centre']:.3f} [{low:.3f}, {high:.3f}]; "
                             f"{entry['median_width']:.2f}x ({entry['widest']:.2f}x)")
            before, after = (summary[side][name][key] for side in SIDES)
            test = summary.get("tests", {}).get(name, {}).get(key)
            p = f"{test['centre_p']:.2f}, {test['width_p']:.2f}" if test else "n/a"
            lines.append(f"| {name} | {NAMES[key]} | {cells[0]} | {cells[1]} | "
                         f"{'yes' if within(before, after) else 'no'} | {p} |")
    return "\n".join(lines) + "\n"


def within(before: dict, after: dict) -> bool:
    """Whether `after` is no worse than the repeats' own spread before: its median centre no
    further from the median before than the centres before spread (their range), and its
    median width no wider than the widest before."""
    if not before["n"] or not after["n"]:
        return False
    low, high = before["centres"]
    return (abs(after["median_centre"] - before["median_centre"]) <= high - low
            and after["median_width"] <= before["widest"])


def pack(folder: Path) -> None:
    """The repeats' folders into one runs.tar.xz (a clone carries one file, not hundreds)."""
    parts = sorted(p for p in folder.iterdir() if p.is_dir())
    with tarfile.open(folder / "runs.tar.xz", "w:xz") as archive:
        for part in parts:
            archive.add(part, arcname=part.name)
    for part in parts:
        shutil.rmtree(part)


def main() -> None:
    args = arguments()
    if args.summarise:
        document = json.loads(args.out.with_suffix(".json").read_text())
        document["summary"] = summarise(document["rows"])
        write(document, args.out)
        return
    checkouts = {"before": args.before, "after": args.after}
    rows = []
    for repeat in range(1, args.repeats + 1):
        for side in order(repeat):
            out = args.out / f"{side}-r{repeat}"
            rows += [{**row, "side": side, "repeat": repeat}
                     for row in run_side(checkouts[side], args.comparisons, out)]
    document = {"machine": common.machine_label(), "date": time.strftime("%Y-%m-%d"),
                "command": "python -m benchmarks.checkout_ab " + " ".join(sys.argv[1:]),
                "before": _commit(args.before), "after": _commit(args.after),
                "repeats": args.repeats, "rows": rows,
                "summary": summarise(rows)}
    write(document, args.out)
    pack(args.out)


def write(document: dict, out: Path) -> None:
    """OUT.json and OUT.md beside the folder OUT, and the tables on the terminal."""
    out.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(document, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(document))
    print(markdown(document))


def _commit(checkout: Path) -> str:
    found = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h"],
                           capture_output=True, text=True)
    return found.stdout.strip() or str(checkout)


if __name__ == "__main__":
    main()
