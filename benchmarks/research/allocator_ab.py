"""What the host allocator's setting is worth to the shared loop against each framework's own
loop: one framework's run with its own loop beside it in its process (as `compare` trains
them, a timing window of each in turn), alone, with glibc's malloc as cnncompare sets it
(freed memory kept in the heap, compare.machine.allocator) and as glibc leaves it
(`GLIBC_TUNABLES=` set empty: the user's, so left alone), alternated in fresh processes.

Each run gives the report's shared / own ratio (compare.report.own_loops.pairs_ratio: the
median over its pairs of adjacent windows, both orders), each loop's median window step
after the first epoch, and the process's minor page faults (the whole process, imports
included) over the steps both loops trained. For each setting: the geometric mean of the
runs' shared / own with its 95% t interval and width (high / low); and the paired ratio of
each kept run's median step against the glibc-default run beside it in time.

    python -m benchmarks.research.allocator_ab --framework torch --batch 32:10000 --batch 4:6000 \\
        --repeats 6 --out DIR

Writes DIR/allocator_ab.json and DIR/allocator_ab.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common
from benchmarks.tool_overhead import LEARNING_RATES

# The two settings: cnncompare's (nothing in the environment) and glibc's own (an empty
# GLIBC_TUNABLES, which compare.machine.allocator leaves as the user's)
SETTINGS = {"kept": {}, "glibc-default": {"GLIBC_TUNABLES": ""}}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="torch", choices=("tf", "torch"))
    parser.add_argument("--batch", action="append", metavar="B:IMAGES",
                        help="a batch size and the synthetic images it trains on (repeatable) "
                             "[default: 32:10000]")
    parser.add_argument("--epochs", type=int, default=3, help="[default: 3]")
    parser.add_argument("--repeats", type=int, default=6,
                        help="runs of each setting, alternating which goes first [default: 6]")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args()


def one_run(framework: str, batch: int, images: int, epochs: int, seed: int,
            setting: str) -> dict:
    """One run with its own loop beside, alone, in a fresh process under `setting`."""
    from compare.experiment.config import recipe_config
    from compare.machine import precision_choice
    from compare.report.own_loops import pairs_ratio
    from compare.run import validate
    lr = LEARNING_RATES.get(("lenet", batch))
    with tempfile.TemporaryDirectory() as scratch:
        config = precision_choice.carry(validate.check_config(recipe_config(
            "lenet", framework=framework, out=f"{scratch}/run", dataset="synthetic",
            synthetic_train_size=images, batch_size=batch, epochs=epochs, precision="fp32",
            device="cpu", profile_steps=0, quiet=True, seed=seed,
            own_loop_beside=f"{scratch}/own", **({"lr": float(lr)} if lr else {}))))
        path = Path(scratch) / "config.json"
        path.write_text(config.to_json())
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        environment = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
        subprocess.run([sys.executable, "-m", f"{framework}_impl.train", str(path)],
                       check=True, cwd=common.REPO, env={**environment, **SETTINGS[setting]},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before
        result = json.loads((Path(scratch) / "run" / "result.json").read_text())
        own = json.loads((Path(scratch) / "own" / "own-loop.json").read_text())
    steps = result["epochs"][0]["steps"]  # a loop's steps an epoch
    return {"setting": setting, "seed": seed,
            "host_allocator": result["fairness"]["host_allocator"]["set_by"],
            "shared_over_own": pairs_ratio(own["window_pairs"], own["own_first"]),
            "shared_step_ms": result["summary"]["steady_step_time_ms"]["median"],
            "own_step_ms": own["steady_step_time_ms"]["median"],
            "minor_faults_per_step": faults / (2 * steps * epochs)}


def summarise(runs: list[dict]) -> dict:
    """Per setting, the shared / own ratios' interval and the medians; then kept against
    glibc's default, run beside run."""
    found: dict = {}
    for setting in SETTINGS:
        mine = [r for r in runs if r["setting"] == setting]
        found[setting] = {
            "shared_over_own": common.ratio_interval([r["shared_over_own"] for r in mine]),
            **{key: statistics.median(r[key] for r in mine)
               for key in ("shared_step_ms", "own_step_ms", "minor_faults_per_step")}}
    kept = [r for r in runs if r["setting"] == "kept"]
    default = [r for r in runs if r["setting"] == "glibc-default"]
    for loop in ("shared", "own"):
        found[f"kept_over_default_{loop}_step"] = common.ratio_interval(
            [k[f"{loop}_step_ms"] / d[f"{loop}_step_ms"] for k, d in zip(kept, default)])
    return found


def markdown(document: dict) -> str:
    title = (f"# The host allocator's setting, {document['framework']} with its own loop "
             f"beside ({document['cpu']}, {document['date']})")
    header = ("| batch | setting | shared / own (runs) | shared step, ms | own step, ms | "
              "minor page faults a step (whole process) |")
    lines = [title, "", f"    {document['command']}", "", header, "|---|---|---|---|---|---|"]
    cell = common.ratio_cell
    for entry in document["batches"]:
        for setting in SETTINGS:
            s = entry["summary"][setting]
            lines.append(f"| {entry['batch']} | {setting} | {cell(s['shared_over_own'])} | "
                         f"{s['shared_step_ms']:.3f} | {s['own_step_ms']:.3f} | "
                         f"{s['minor_faults_per_step']:.1f} |")
    lines += ["", "Kept against glibc's default, each run against the one beside it in time:", "",
              "| batch | shared loop's step | own loop's step |", "|---|---|---|"]
    lines += [f"| {e['batch']} | {cell(e['summary']['kept_over_default_shared_step'])} | "
              f"{cell(e['summary']['kept_over_default_own_step'])} |"
              for e in document["batches"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = arguments()
    document: dict = {"command": ("python -m benchmarks.research.allocator_ab "
                                  + " ".join(sys.argv[1:])),
                      "cpu": common.machine_label(), "date": time.strftime("%Y-%m-%d"),
                      "framework": args.framework, "batches": []}
    for spec in args.batch or ["32:10000"]:
        batch, images = (int(part) for part in spec.split(":"))
        runs = []
        for i in range(args.repeats):
            for setting in (list(SETTINGS) if i % 2 == 0 else list(SETTINGS)[::-1]):
                runs.append(one_run(args.framework, batch, images, args.epochs, i, setting))
                print(f"batch {batch} {setting} run {i + 1}: shared / own "
                      f"{runs[-1]['shared_over_own']:.3f}, "
                      f"{runs[-1]['minor_faults_per_step']:.1f} faults a step", flush=True)
        document["batches"].append({"batch": batch, "images": images, "runs": runs,
                                    "summary": summarise(runs)})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "allocator_ab.json").write_text(json.dumps(document, indent=1) + "\n")
    text = markdown(document)
    (args.out / "allocator_ab.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
