"""The float64 parity gate's figures for built-in networks at their recipes' batch sizes: both
frameworks' probes as `cnncompare compare` runs them (each in its own process, float64 on the
CPU), compared as the check compares them. docs/measurement.md's table comes from it.

    python -m benchmarks.parity_float64 lenet resnet9 resnet18 vgg11 mobilenetv2
    tests/as_avx2_cpu.sh .venv/bin/python -m benchmarks.parity_float64 mobilenetv2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from compare.experiment import networks, parity
from compare.experiment.config import recipe_config
from compare.process import parity_check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", choices=list(networks.MODELS))
    parser.add_argument("--batch-size", type=int, help="instead of the recipe's")
    args = parser.parse_args()
    for model in args.models:
        config = recipe_config(model)
        batch = args.batch_size or config.batch_size
        config = config.replace(dataset="synthetic", synthetic_train_size=3 * batch,
                                synthetic_test_size=64, batch_size=batch, quiet=True)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as directory:
            probes, errors = parity_check._probes(parity.probe_config(config), Path(directory),
                                                  steps=3)[0]
        if errors:
            print(f"{model} (batch {batch}): could not run: {errors}")
            continue
        record = parity.compare_probes(probes["tf"], probes["torch"], steps=3)
        figures = ", ".join(f"{key} {record[key]:.2g}" for key in parity.GATED)
        print(f"{model} (batch {batch}, {time.perf_counter() - started:.0f} s): "
              f"{'passed' if record['passed'] else 'FAILED ' + str(record['failed'])} in "
              f"{record['precision']}: {figures}", flush=True)


if __name__ == "__main__":
    main()
