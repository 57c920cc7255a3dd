"""How long Python's cyclic garbage collector pauses a framework process with its full
passes: with the imported objects frozen out of its reach, as every framework process does
(compare.run.worker), and without (gc.freeze made a no-op in the process). Each framework
trains the README quickstart's recipe (LeNet, 5,000 synthetic images, 2 epochs, float32 on
the CPU, TensorBoard scalars and the phase profile, as `compare` runs its first seed), each
run in a process of its own, the two forms alternated round by round. Only the passes after
the framework's import count: those during it are the same in both forms.

    python -m benchmarks.research.gc_pauses [--rounds 3] [--json FILE]

Prints, per framework and form, each run's full collections: how many, their summed and
longest seconds, and how many began inside a training epoch (the shared loop's clock).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run by path (python benchmarks/research/gc_pauses.py): the checkout
    # on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import REPO, machine_label
from compare.experiment.config import RunConfig

FORMS = ("frozen", "not frozen")

# Runs in the framework process: records each full collection (generation 2) and each
# epoch's span on one clock, from the end of the framework's import (where the worker
# freezes), then writes them as JSON where the run leaves.
CHILD = """
import gc, json, sys, time
module, config, record, freeze = sys.argv[1:5]
passes, epochs = [], []
def watch(phase, info, began=[0.0]):
    if info["generation"] != 2:
        return
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        passes.append((began[0], time.perf_counter()))
gc.callbacks.append(watch)
if freeze == "no":
    gc.freeze = lambda: None
import importlib
impl = importlib.import_module(module)
imported = time.perf_counter()
from compare.run import loop, worker
train_epoch = loop._train_epoch
def timed_epoch(*args, **kwargs):
    began = time.perf_counter()
    try:
        return train_epoch(*args, **kwargs)
    finally:
        epochs.append((began, time.perf_counter()))
loop._train_epoch = timed_epoch
leave = worker.leave
def leave_after_writing(code):
    with open(record, "w") as f:
        json.dump({"passes": [p for p in passes if p[0] >= imported], "epochs": epochs}, f)
    leave(code)
worker.leave = leave_after_writing
sys.argv = [module, config]
worker.run(impl)
"""
MODULES = {"tf": "tf_impl.train", "torch": "torch_impl.train"}


def one_run(framework: str, frozen: bool, folder: Path) -> dict:
    """The full collections of one run in a process of its own: count, seconds summed and
    longest, and how many began inside an epoch."""
    config = RunConfig(framework=framework, seed=0, dataset="synthetic", epochs=2,
                       device="cpu", precision="fp32", quiet=True, out=str(folder / "run"),
                       tensorboard_dir=str(folder / "tensorboard"))
    config_path, record = folder / "config.json", folder / "record.json"
    config_path.write_text(config.to_json())
    subprocess.run([sys.executable, "-c", CHILD, MODULES[framework], str(config_path),
                    str(record), "yes" if frozen else "no"], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = json.loads(record.read_text())
    pauses = [end - start for start, end in seen["passes"]]
    inside = sum(any(a <= start < b for a, b in seen["epochs"]) for start, _ in seen["passes"])
    return {"count": len(pauses), "total_s": sum(pauses), "longest_s": max(pauses, default=0.0),
            "in_epochs": inside}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs per framework and form")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    runs: dict[str, dict[str, list[dict]]] = {fw: {f: [] for f in FORMS} for fw in MODULES}
    for round_index in range(args.rounds):
        order = FORMS if round_index % 2 == 0 else FORMS[::-1]
        for form in order:
            for framework in MODULES:
                with tempfile.TemporaryDirectory() as folder:
                    found = one_run(framework, form == "frozen", Path(folder))
                runs[framework][form].append(found)
                print(f"round {round_index + 1}: {framework} {form}: {found}", flush=True)
    print(f"\nFull collections of the cyclic garbage collector per run, {machine_label()}, "
          f"{args.rounds} runs each (median, and min-max over the runs)")
    print("| framework | form | passes | summed | longest | inside an epoch |")
    print("|---|---|---|---|---|---|")
    for framework, forms in runs.items():
        for form, found in forms.items():
            cells = []
            for key, unit in (("count", ""), ("total_s", " s"), ("longest_s", " s"),
                              ("in_epochs", "")):
                values = [r[key] for r in found]
                digits = 3 if unit else 0
                cells.append(f"{statistics.median(values):.{digits}f}{unit} "
                             f"({min(values):.{digits}f}-{max(values):.{digits}f})")
            print(f"| {framework} | {form} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({
            "measured_by": "python -m benchmarks.research.gc_pauses " + " ".join(sys.argv[1:]),
            "machine": machine_label(), "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
