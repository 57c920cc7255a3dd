"""The data's ceiling: a public reference trainer on the same CIFAR-10 copy the product trains on.

airbench94 (Keller Jordan's `airbench` package, 0.1.8) reaches 94.01% mean test accuracy on
the original CIFAR-10 in under 4 s of an A100. Run on our data (any source `cnncompare`
reads, decoded by the same code the product's runs use), its mean tells what this copy of
CIFAR-10 allows: a JPEG re-encoding that costs airbench a point costs our ResNet-9 too.

    python -m benchmarks.reference_trainer --dataset folder --data-dir /tmp/cifar10-jpeg \\
        --runs 5 --out runs/reference

Writes OUT/reference.json: each run's test accuracy without and with airbench's test-time
augmentation (mirror + 1-pixel translations, its `tta_level=2`, which its 94% counts), their
mean, sample standard deviation and range, and the trainer's own GPU-clock training time per
run. The times are context only: this benchmark is an accuracy reference and may run beside
other work (a GPU rental gives it the minutes while TensorFlow's bundle arrives). Needs a
CUDA GPU and the airbench package (on PYTHONPATH); it trains in float16, as airbench does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

AIRBENCH_VERSION = "0.1.8"
AIRBENCH_TTA_LEVEL = 2  # mirror + translate: the level airbench94's published 94.01% uses


def write_airbench_data(dataset, folder: Path) -> None:
    """`dataset` as airbench's CifarLoader reads it: FOLDER/train.pt and FOLDER/test.pt, each
    {'images': uint8 (N, 32, 32, 3), 'labels': int64 (N,), 'classes': [names]}."""
    import torch
    folder.mkdir(parents=True, exist_ok=True)
    for split, images, labels in (("train", dataset.train_x, dataset.train_y),
                                  ("test", dataset.test_x, dataset.test_y)):
        torch.save({"images": torch.from_numpy(images.copy()),
                    "labels": torch.from_numpy(labels.astype("int64")),
                    "classes": list(dataset.classes)}, folder / f"{split}.pt")


def summary(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values), "max": max(values), "runs": len(values)}


def run_airbench(folder: Path, runs: int) -> list[dict]:
    """`runs` trainings of airbench94 on FOLDER's data after its warm-up, each evaluated
    without and with test-time augmentation; airbench reads ./cifar10/{train,test}.pt."""
    import airbench
    import torch
    from airbench import lib_airbench94

    os.chdir(folder.parent)  # airbench's loaders open 'cifar10/train.pt' relative to here
    hyp = lib_airbench94.hyp
    test_loader = airbench.CifarLoader("cifar10", train=False, batch_size=2000)
    airbench.warmup94(verbose=False)
    rows = []
    for run in range(runs):
        torch.manual_seed(run)
        train_loader = airbench.CifarLoader("cifar10", train=True,
                                            batch_size=hyp["opt"]["batch_size"],
                                            aug=hyp["aug"], altflip=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model = airbench.train94(train_loader, run=run, verbose=False)
        end.record()
        torch.cuda.synchronize()
        rows.append({"run": run, "seed": run,
                     "accuracy": airbench.evaluate(model, test_loader, tta_level=0),
                     "accuracy_tta": airbench.evaluate(model, test_loader,
                                                       tta_level=AIRBENCH_TTA_LEVEL),
                     "train_s_gpu_clock": start.elapsed_time(end) / 1000})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="folder", help="a cnncompare --dataset source")
    parser.add_argument("--data-dir", help="cnncompare --data-dir of that source")
    parser.add_argument("--runs", type=int, default=5, help="trainings after the warm-up")
    parser.add_argument("--out", type=Path, default=Path("runs/reference"))
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    from compare.experiment import datasets
    started = time.perf_counter()
    dataset = datasets.load(args.dataset, args.data_dir)
    write_airbench_data(dataset, out / "cifar10")
    decoded_s = time.perf_counter() - started
    try:
        import airbench
    except ImportError:
        sys.exit("reference_trainer.py: the airbench package is not importable (pip install "
                 f"airbench=={AIRBENCH_VERSION}, or its folder on PYTHONPATH)")
    version = getattr(airbench, "__version__", AIRBENCH_VERSION)
    rows = run_airbench(out / "cifar10", args.runs)
    import torch
    record = {
        "trainer": f"airbench94 (airbench {version})",
        "data": {"dataset": args.dataset, "data_dir": args.data_dir,
                 "origin": dataset.origin, "train_images": int(len(dataset.train_y)),
                 "test_images": int(len(dataset.test_y)), "decoded_s": round(decoded_s, 1)},
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "tta_level": AIRBENCH_TTA_LEVEL, "runs": rows,
        "accuracy": summary([r["accuracy"] for r in rows]),
        "accuracy_tta": summary([r["accuracy_tta"] for r in rows]),
        "train_s_gpu_clock": summary([r["train_s_gpu_clock"] for r in rows]),
        "times_note": "context only: the runs may share the host with other work",
    }
    (out / "reference.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("trainer", "gpu", "accuracy", "accuracy_tta")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
