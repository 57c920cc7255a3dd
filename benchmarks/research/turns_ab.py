"""`compare` with its runs side by side, taking turns (the default on a CPU), against
`--no-turns` (each run after the other), or against another commit taking turns its way
(`--baseline REF`, checked out into a temporary git worktree and run from there), or against
timing windows of another length (`--window-s S`, taking turns): how wide each 3-seed
interval comes out.

Each round runs the comparison once each way, the order turned every round, alone on the
host; each comparison goes to DIR/batch<B>-<form>-r<round> (form: turns, no-turns,
baseline or window). The table gives, per comparison, the TF / PyTorch ratio of the training
time, of its first epoch, of the epochs after it and of the median step, and each framework's
shared / own ratio, with the 95% interval and its width (high / low), read from the
comparison's summary.json, and per form the median width and the centres' mean.

    python -m benchmarks.research.turns_ab --batch 32:10000 --batch 4:2000 --rounds 3 --out DIR
    python -m benchmarks.research.turns_ab --batch 32:10000 --rounds 3 --baseline 59fcdf5 --out DIR
    python -m benchmarks.research.turns_ab --batch 32:10000 --rounds 3 --window-s 0.125 --out DIR
    python -m benchmarks.research.turns_ab --summarise DIR   # the table of comparisons already run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(REPO))

from benchmarks.common import comparison_figures, machine_label, ratio_cell, run_and_say
from benchmarks.tool_overhead import LEARNING_RATES  # noqa: E402

FORMS = ("turns", "no-turns")
BASELINE = "baseline"  # the form of a --baseline REF comparison: turns, at that commit
WINDOW = "window"  # the form of a --window-s S comparison: turns, windows of S seconds


def comparison_command(batch: int, images: int, form: str, out: Path, seeds: int,
                       window_s: float | None = None) -> list[str]:
    turns = "--no-turns" if form == "no-turns" else "--turns"
    window = ["--timing-window-s", str(window_s)] if form == WINDOW and window_s else []
    lr = LEARNING_RATES.get(("lenet", batch))  # batch 4 learns at the tutorial's rate
    return [sys.executable, "-m", "compare.cli", "compare", "--model", "lenet", "--dataset",
            "synthetic", "--synthetic-size", str(images), "--batch-size", str(batch),
            *(["--lr", lr] if lr else []), "--epochs", "3", "--precision", "fp32",
            "--seeds", str(seeds), turns, *window, "--out", str(out), "--quiet"]


def form_of(comparison: str) -> str:
    """batch32-no-turns-r2 -> no-turns"""
    return comparison.split("-", 1)[1].rsplit("-r", 1)[0]


def summarise(directory: Path) -> list[dict]:
    """A row per comparison under `directory`, in the order they were run."""
    rows = [{**comparison_figures(path.parent), "form": form_of(path.parent.name)}
            for path in directory.glob("*/summary.json")]
    return sorted(rows, key=lambda row: row["created_at"])


def saved(directory: Path, key: str):
    """What `directory`'s turns_ab.json says of the comparisons already in it (None if it
    says nothing): their `window_s` (--window-s), or the `command` that ran them."""
    path = directory / "turns_ab.json"
    return json.loads(path.read_text()).get(key) if path.exists() else None


def window_of(directory: Path) -> float | None:
    """The --window-s of the comparisons already in `directory`."""
    return saved(directory, "window_s")


def table(rows: list[dict], window_s: float | None = None) -> str:
    keys = ("tf_over_torch_train_time", "tf_over_torch_first_epoch",
            "tf_over_torch_after_first_epoch", "tf_over_torch_steady_step", "tf_shared_over_own",
            "torch_shared_over_own")
    header = ("| comparison | taking turns | TF / PyTorch training time | its first epoch | the "
              "epochs after it | TF / PyTorch median step | TensorFlow/Keras: shared / `fit` | "
              "PyTorch: shared / plain loop |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['comparison']} | {'yes' if r['side_by_side'] else 'no'} | "
              + " | ".join(ratio_cell(r.get(key)) for key in keys) + " |" for r in rows]
    forms = {"turns": "taking turns", "no-turns": "one after the other",
             BASELINE: "taking turns, the baseline commit",
             WINDOW: f"taking turns, windows of {window_s or '?'} s"}
    for form, words in forms.items():
        chosen = [r for r in rows if r.get("form", "turns" if r["side_by_side"] else
                                               "no-turns") == form]
        if not chosen:
            continue
        form = words
        widths = [[r[key]["width"] for r in chosen if r.get(key)] for key in keys]
        lines.append(f"| median width, {len(chosen)} comparisons {form} | | " + " | ".join(
            f"{statistics.median(w):.2f}x" if w else "-" for w in widths) + " |")
        centres = [[r[key]["ratio"] for r in chosen if r.get(key)] for key in keys]
        lines.append(f"| geometric mean of the centres, {form} | | " + " | ".join(
            f"{statistics.geometric_mean(c):.3f}" if c else "-" for c in centres) + " |")
    return "\n".join(lines)


def step_table(rows: list[dict], window_s: float | None = None) -> str:
    """Per batch and form, each framework's median step (ms, the shared loop's): the geometric
    mean of the comparisons' centres, and their range. A form that moves both frameworks'
    steps alike leaves their ratio but not their speed."""
    header = ("| batch | form | comparisons | TensorFlow/Keras median step, ms | PyTorch median "
              "step, ms |")
    lines = [header, "|---|---|---|---|---|"]
    for batch in sorted({r.get("batch") for r in rows if r.get("batch")}, reverse=True):
        for form in sorted({r.get("form", "") for r in rows}):
            chosen = [r for r in rows if r.get("batch") == batch and r.get("form", "") == form]
            cells = []
            for fw in ("tf", "torch"):
                steps = [r[f"{fw}_step_ms"] for r in chosen if r.get(f"{fw}_step_ms")]
                cells.append(f"{statistics.geometric_mean(steps):.3f} ({min(steps):.3f}-"
                             f"{max(steps):.3f})" if steps else "-")
            if chosen:
                name = f"{form}, {window_s} s windows" if form == WINDOW else form
                lines.append(f"| {batch} | {name} | {len(chosen)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", action="append", default=[], metavar="B:IMAGES",
                        help="a batch size and the synthetic images it trains on")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--first-round", type=int, default=1,
                        help="the first round's number (more rounds into a folder that has some)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="where the comparisons go")
    parser.add_argument("--baseline", metavar="REF",
                        help="against this commit taking turns, instead of --no-turns")
    parser.add_argument("--window-s", type=float, metavar="S",
                        help="against timing windows of S seconds, taking turns, instead of "
                             "--no-turns")
    parser.add_argument("--summarise", type=Path, metavar="DIR",
                        help="only write the table of the comparisons already in DIR")
    args = parser.parse_args()
    directory = args.summarise or args.out
    if directory is None:
        parser.error("--out or --summarise is needed")
    if args.summarise is None:
        with tempfile.TemporaryDirectory(prefix="turns-ab-") as scratch:
            checkouts = {form: REPO for form in (*FORMS, WINDOW)}
            if args.baseline:
                checkouts[BASELINE] = Path(scratch) / "baseline"
                subprocess.run(["git", "worktree", "add", "--detach", str(checkouts[BASELINE]),
                                args.baseline], cwd=REPO, check=True, capture_output=True)
            forms = (("turns", BASELINE) if args.baseline else ("turns", WINDOW)
                     if args.window_s else FORMS)
            try:
                for round_ in range(args.first_round, args.first_round + args.rounds):
                    for batch_images in args.batch:
                        batch, images = (int(x) for x in batch_images.split(":"))
                        for form in (forms if round_ % 2 else forms[::-1]):
                            out = directory / f"batch{batch}-{form}-r{round_}"
                            checkout = checkouts[form]
                            run_and_say(out.name, comparison_command(
                                batch, images, form, out.resolve(), args.seeds, args.window_s),
                                checkout,
                                {**os.environ, "PYTHONPATH": str(checkout)})
            finally:
                if args.baseline:
                    subprocess.run(["git", "worktree", "remove", "--force",
                                    str(checkouts[BASELINE])], cwd=REPO, check=False)
    rows = summarise(directory)
    window_s = args.window_s or window_of(directory)
    command = ((args.summarise and saved(directory, "command"))
               or "python -m benchmarks.research.turns_ab " + " ".join(sys.argv[1:]))
    (directory / "turns_ab.json").write_text(json.dumps(
        {"command": command, "machine": machine_label(), "window_s": window_s,
         "rows": rows}, indent=1) + "\n")
    (directory / "turns_ab.md").write_text(
        f"# `compare` taking turns: how wide each comparison's intervals are\n\n"
        f"{machine_label()}\n\n"
        f"    {command}\n\n{table(rows, window_s)}\n\n"
        f"Each framework's median step, the shared loop's, per batch and form:\n\n"
        f"{step_table(rows, window_s)}\n")
    print(table(rows, window_s))
    print(step_table(rows, window_s))


if __name__ == "__main__":
    main()
