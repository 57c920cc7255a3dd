"""The float64 parity gate on the built-in networks, at the probe's batch (parity.PROBE_BATCH,
or --batch-size): the gate's figures as `cnncompare compare` computes them (each framework in
its own process), the whole check's wall time (--check: the gate, then the timed
configuration and its noise floor, as `compare` runs them before any training), and what each
semantic slip of benchmarks/parity_slips.py moves on each network (--slips, both probes in
this process). docs/measurement.md's tables and docs/benchmarks.md's times come from it.

    python -m benchmarks.parity_float64 lenet resnet9 resnet18 vgg11 mobilenetv2
    python -m benchmarks.parity_float64 --check lenet resnet9 resnet18 vgg11 mobilenetv2
    python -m benchmarks.parity_float64 --check --apart never lenet resnet18 mobilenetv2
    python -m benchmarks.parity_float64 --check --recipe-batch lenet vgg11 resnet18
    python -m benchmarks.parity_float64 --slips lenet resnet9 resnet18 vgg11 mobilenetv2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from compare.experiment import networks, parity
from compare.experiment.config import RunConfig, recipe_config
from compare.process import parity_check


def _config(model: str, batch: int | None) -> RunConfig:
    """The recipe of `model` on synthetic data (its probes at parity.PROBE_BATCH)."""
    config = recipe_config(model)
    probed = batch or parity.probe_batch(config)
    return config.replace(dataset="synthetic", synthetic_train_size=max(64, 3 * probed),
                          synthetic_test_size=64, quiet=True)


def _probed(config: RunConfig, batch: int | None) -> RunConfig:
    """The gate's probe config of `config`, at `batch` images where given (the cap lifted)."""
    probed = parity.probe_config(config)
    return probed.replace(batch_size=batch) if batch else probed


def gate(model: str, batch: int | None) -> dict:
    """Both frameworks' float64 probes, each in its own process, compared as the gate does."""
    config = _config(model, batch)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        probes, errors = parity_check._probes(_probed(config, batch), Path(directory),
                                              steps=3)[0]
    if errors:
        return {"model": model, "error": str(errors)}
    record = parity.compare_probes(probes["tf"], probes["torch"], steps=3)
    return {"model": model, "batch": _probed(config, batch).batch_size,
            "seconds": time.perf_counter() - started, "passed": record["passed"],
            **{key: record[key] for key in parity.GATED}}


def check(model: str, batch: int | None) -> dict:
    """The whole parity check `compare` runs before training, timed on the wall clock from
    the start of the frameworks' fork servers (which import each framework once, as in
    `compare`), at the probe's own batch (`batch` is not taken), its precision resolved as
    `compare` resolves it."""
    from compare.machine import precision_choice
    from compare.process import warm
    config = precision_choice.carry(_config(model, None))
    started = time.perf_counter()  # from the frameworks' fork servers' start, as in compare
    with tempfile.TemporaryDirectory() as directory, warm.fork_servers():
        record = parity_check.run_parity(config, Path(directory), 3)
    return {"model": model, "batch": parity.probe_config(config).batch_size,
            "timed_batch": parity.timed_config(config).batch_size,
            "tf_timed_apart": "tf" in parity_check.apart(model),
            "seconds": time.perf_counter() - started, "passed": record["passed"],
            "timed_agrees": (record.get("timed_configuration") or {}).get("agrees")}


def slips(model: str, batch: int | None) -> list[dict]:
    """Each slip that applies to `model`: the figure it moves, against its float64 limit."""
    import torch._dynamo  # noqa: F401 - before TensorFlow: their LLVMs clash the other way
    import keras
    import numpy as np

    from benchmarks.parity_slips import SLIPS, slipped
    from compare.experiment import datasets
    from compare.machine import precision_choice
    from compare.run import worker
    from tf_impl import train as tf_train
    from torch_impl import train as torch_train
    config = precision_choice.carry(_probed(_config(model, batch), batch))
    dataset = datasets.config_dataset(config)
    spec = networks.run_spec(config, len(dataset.classes))

    def probe(module, path: Path) -> dict:
        try:
            worker.probe(module, config, dataset, path, 3)
        finally:
            keras.mixed_precision.set_global_policy("float32")
            keras.config.set_floatx("float32")
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    found = []
    with tempfile.TemporaryDirectory() as directory:
        torch_probe = probe(torch_train, Path(directory) / "torch.npz")
        for name, slip in SLIPS.items():
            if not slip.applies(spec):
                found.append({"model": model, "slip": name, "applies": False})
                continue
            with slipped(name):
                record = parity.compare_probes(probe(tf_train, Path(directory) / f"{name}.npz"),
                                               torch_probe, steps=3)
            limit = getattr(parity.FLOAT64, slip.figure)
            found.append({"model": model, "slip": name, "applies": True,
                          "batch": config.batch_size,
                          "figure": slip.figure, "value": record[slip.figure],
                          "times_limit": record[slip.figure] / limit,
                          "failed": record["failed"]})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", choices=list(networks.MODELS))
    parser.add_argument("--batch-size", type=int, help="probe at this batch instead of the "
                        f"probe's own (at most {parity.PROBE_BATCH} images); not with --check")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="time the whole parity check")
    mode.add_argument("--slips", action="store_true", help="each slip on each network")
    parser.add_argument("--recipe-batch", action="store_true", help="with --check: probe at "
                        "each recipe's own batch, as the check did before PROBE_BATCH and "
                        "TIMED_PROBE_BATCH")
    parser.add_argument("--apart", choices=("rule", "always", "never"), default="rule",
                        help="with --check: TensorFlow's timed probe in a process of its own "
                             "as parity_check.APART_FROM_LAYERS decides, on every network, or "
                             "never (chained after its gate)")
    parser.add_argument("--out", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    if args.apart != "rule":  # run_parity reads it at each call
        parity_check.APART_FROM_LAYERS = 0 if args.apart == "always" else 1 << 30
    if args.recipe_batch:
        # probe_batch reads them at each call: no cap
        parity.PROBE_BATCH = parity.TIMED_PROBE_BATCH = 1 << 30
    rows = []
    for model in args.models:
        if args.slips:
            found = slips(model, args.batch_size)
        else:
            found = [(check if args.check else gate)(model, args.batch_size)]
        for row in found:
            print(json.dumps(row), flush=True)
        rows += found
    if args.out:
        from benchmarks.common import machine_label
        args.out.write_text(json.dumps({
            "measured_by": "python -m benchmarks.parity_float64 " + " ".join(sys.argv[1:]),
            "machine": machine_label(), "date": time.strftime("%Y-%m-%d"), "rows": rows},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
