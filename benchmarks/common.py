"""What the A/B benchmark scripts share: the `cnncompare run` options each offers, one run in
a fresh process read back, one comparison run and said, its figures read back and its folder
pruned to them, the machine's name for the results' titles, and the main of a script that
tabulates comparisons already run."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from compare.records import OwnLoopRecord

REPO = Path(__file__).resolve().parent.parent


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options every script passes on to each `cnncompare run`."""
    parser.add_argument("--epochs", type=int, default=3,
                        help="epochs per run; the first is left out [default: 3]")
    parser.add_argument("--dataset", default="synthetic", help="[default: synthetic]")
    parser.add_argument("--data-dir", help="cnncompare --data-dir")
    parser.add_argument("--synthetic-size", type=int, default=10_000, help="[default: 10000]")
    parser.add_argument("--option", action="append", default=[],
                        help="another `cnncompare run` option for every run, e.g. "
                             "--option=--precision=fp32 (repeatable)")


def run(framework: str, args: argparse.Namespace, *options: str,
        own_loop: bool = False) -> dict:
    """One `cnncompare run` (with `own_loop`, the framework's own loop) in a fresh process:
    `seconds` (training time of the epochs after the first, or of the only one), `step_ms`
    (the median step time of the synchronised windows after the first epoch; None from an
    own loop that records no windows), `test_accuracy`, `device` and, for a shared-loop run,
    its `fairness` manifest."""
    data = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir else [])
    extra = [part for option in args.option for part in option.split("=", 1)]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", "run",
                        "--framework", framework, *options, "--epochs", str(args.epochs),
                        "--synthetic-size", str(args.synthetic_size), "--profile", "0", *data,
                        *extra, *(["--own-loop"] if own_loop else []), "--quiet", "--out", out],
                       check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        if own_loop:
            record = json.loads((Path(out) / "own-loop.json").read_text())
            times, accuracy = record["epoch_times_s"], record["final_test_accuracy"]
            device, fairness = record["device_used"], None
            step_ms = (record.get("steady_step_time_ms") or {}).get("median")
        else:
            result = json.loads((Path(out) / "result.json").read_text())
            times = [e["train_time_s"] for e in result["epochs"]]
            accuracy = result["summary"]["final_test_accuracy"]
            device, fairness = result["environment"]["device_used"], result["fairness"]
            step_ms = result["summary"]["steady_step_time_ms"]["median"]
    from compare.run.own_loop import steady_seconds  # the report's rule
    return {"seconds": steady_seconds(times), "step_ms": step_ms,
            "test_accuracy": accuracy, "device": device, "fairness": fairness}


def run_and_say(name: str, command: list[str], cwd: Path,
                env: dict[str, str] | None = None) -> int:
    """Run one arm's command (a comparison whose results it writes itself) and say its exit
    status and wall seconds under `name`; its exit status."""
    started = time.time()
    done = subprocess.run(command, cwd=cwd, env=env, check=False)
    print(f"{name}: exit {done.returncode}, {time.time() - started:.0f} s", flush=True)
    return done.returncode


def interval(entry: dict | None) -> dict | None:
    """A summary's ratio entry as {ratio, low, high, width (high / low)}; None without an
    interval."""
    if not entry or entry.get("ratio") is None or entry.get("low") is None:
        return None
    return {"ratio": entry["ratio"], "low": entry["low"], "high": entry["high"],
            "width": entry["high"] / entry["low"]}


def ratio_interval(ratios: list[float]) -> dict | None:
    """The geometric mean of paired ratios and its 95% t interval on the logs, as the report
    computes a paired ratio (compare.report.stats), with its width (high / low); None below
    3 ratios."""
    from compare.report import stats
    entry = stats.positive_interval(ratios)
    if entry["interval"] != "ci95":
        return None
    return {"ratio": entry["centre"], "low": entry["low"], "high": entry["high"],
            "width": entry["high"] / entry["low"], "n": entry["n"]}


def ratio_cell(entry: dict | None) -> str:
    """A ratio_interval (or comparison_figures' interval) as a table shows it: ratio [low,
    high] (width x); "-" without one."""
    if not entry:
        return "-"
    return (f"{entry['ratio']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}] "
            f"({entry['width']:.2f}x)")


def comparison_figures(folder: Path) -> dict:
    """A comparison's timing figures from its summary.json: the TF / PyTorch ratios of the
    training time, of its first epoch and of the epochs after it, and of the median step, and
    each framework's shared / own ratio, each with its interval (None where it has none); and
    each framework's median step in ms (None where the summary has none)."""
    summary = json.loads((folder / "summary.json").read_text())
    own = summary.get("own_loops") or {}
    return {"comparison": folder.name, "created_at": summary["created_at"],
            "batch": summary["config"]["batch_size"],
            "seeds": len(summary.get("seeds") or []),
            "side_by_side": bool(summary.get("side_by_side")),
            "tf_over_torch_train_time": interval(summary["ratios"]["train_time_s"]),
            "tf_over_torch_first_epoch": interval(summary["ratios"].get("warmup_time_s")),
            "tf_over_torch_after_first_epoch": interval(
                summary["ratios"].get("steady_train_time_s")),
            "tf_over_torch_steady_step": interval(summary["ratios"]["steady_step_time_ms"]),
            "tf_shared_over_own": interval((own.get("tf") or {}).get("time_ratio")),
            "torch_shared_over_own": interval((own.get("torch") or {}).get("time_ratio")),
            # each framework's median step, ms (the shared loop; centre over the seeds)
            **{f"{fw}_step_ms": ((summary.get("frameworks") or {}).get(fw, {})
                                 .get("steady_step_time_ms") or {}).get("centre")
               for fw in ("tf", "torch")}}


# What a comparison kept in the results keeps: the figures and what they come from, not the
# models, checkpoints, logs and per-step files
KEPT = ("summary.json", "report.md", "runs/*/result.json", "runs/*/windows.csv",
        "own-loops/*/own-loop.json")


def prune(folder: Path) -> None:
    """Delete what a comparison in `folder` wrote beyond KEPT."""
    kept = {path for pattern in KEPT for path in folder.glob(pattern)}
    for path in sorted(folder.rglob("*"), reverse=True):  # files before their folders
        if path.is_file() and path not in kept:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def own_loop_records(folders: list[Path]) -> list[tuple[Path, OwnLoopRecord]]:
    """Every own loop trained beside its run under `folders` (one with pairs of windows), read
    as its typed record: (its comparison's folder, the record)."""
    from compare import schema
    found = []
    for folder in folders:
        for path in sorted(folder.glob("**/own-loops/*/own-loop.json")):
            record = schema.read_own_loop(path)
            if record.window_pairs:
                found.append((path.parent.parent.parent, record))
    return found


def machine_label() -> str:
    """The CPU kind, e.g. "AMD EPYC, 2 cores, AVX-512, bfloat16 (avx512_bf16)": one results
    file per kind (compare.machine.cpu.cpu_description)."""
    from compare.machine.cpu import cpu_description
    return cpu_description()


def tabulate_folders(description: str, module: str,
                     tabulate: Callable[[list[Path]], list[dict]],
                     markdown: Callable[[list[dict], str], str]) -> None:
    """The main of a script that tabulates comparisons already run: FOLDER... (comparison
    folders, or folders holding them) and --out FILE.md; prints the table and, with --out,
    writes it there and its rows and command beside it (FILE.json)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="also write the table here (and .json)")
    args = parser.parse_args()
    rows = tabulate(args.folders)
    command = f"python -m {module} " + " ".join(sys.argv[1:])
    text = markdown(rows, command)
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(
            json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
