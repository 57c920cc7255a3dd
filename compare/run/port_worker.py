"""Entry point of `cnncompare port`'s framework subprocesses: `python -m tf_impl.port` or
`python -m torch_impl.port`, each calling `run` here with its own port module.

    read SOURCE --dir STAGING [--kwargs JSON] [--input-shape C,H,W] [--name NAME]
        read the source network (framework code: the module's `load` and `read`), write
        STAGING/spec.py and weights.npz, and the source's proof outputs (source.npz, read.json)
    twin --dir STAGING
        build the twin from STAGING/spec.py and weights.npz, write its proof outputs (twin.npz,
        twin.json)

What cannot be ported prints one line and exits 2 (compare.errors); --debug shows tracebacks.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import numpy as np

from compare import errors, files
from compare.experiment import networks, porting, specs
from compare.run import shutdown
from compare.run.worker import leave

SPEC, WEIGHTS = "spec.py", "weights.npz"  # what `--model` and `--init-weights` take


def main(impl: ModuleType, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {impl.__name__}",
                                     description="One framework's side of cnncompare port.")
    parser.add_argument("task", choices=("read", "twin"))
    parser.add_argument("source", nargs="?", help=f"read: {impl.SOURCE_KIND}")
    parser.add_argument("--dir", required=True, type=Path, help="the staging directory")
    parser.add_argument("--kwargs", default="{}", help="read: JSON of the class's arguments")
    parser.add_argument("--input-shape", help="read: C,H,W of one image")
    parser.add_argument("--name", help="read: the spec's name (default: the source's)")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    impl.hide_gpus()  # the proof computes on the CPU
    shutdown.install_trainer()
    try:
        with shutdown.interruptible():  # nothing to keep: stop at once
            if args.task == "read":
                read(impl, args)
            else:
                twin(impl, args.dir)
        return 0
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - one line unless --debug
        return errors.report(exc, args.debug, where=impl.__name__)


def read(impl: ModuleType, args: argparse.Namespace) -> None:
    """The source read, written as the spec file and weights, and its proof outputs; the
    spec file is loaded back (as --model will) and must give the same spec."""
    model = impl.load(args.source, json.loads(args.kwargs))
    shape = tuple(int(n) for n in args.input_shape.split(",")) if args.input_shape else None
    name = args.name or _name(args.source)
    reading = impl.read(model, shape, name)
    spec = reading.spec
    heading = (f"{spec.name}, ported by `cnncompare port` from {args.source} "
               f"({impl.FRAMEWORK}), with its weights in {WEIGHTS}.")
    files.write_atomic(args.dir / SPEC, lambda f: f.write(porting.spec_source(spec, heading)))
    loaded = networks.load_reference(str(args.dir / SPEC), spec.num_classes)
    if loaded != spec:
        raise RuntimeError(f"{SPEC} does not load back as the spec it was written from")
    files.write_atomic(args.dir / WEIGHTS, lambda f: np.savez(f, **reading.weights), mode="wb")
    images, labels = porting.proof_batch(spec.input_shape, spec.num_classes)
    outputs = impl.source_outputs(model, reading, images, labels)
    files.write_atomic(args.dir / "source.npz", lambda f: np.savez(f, **outputs), mode="wb")
    files.write_json(args.dir / "read.json", {
        "framework": impl.FRAMEWORK, "source": args.source, "kwargs": json.loads(args.kwargs),
        "classes": spec.num_classes, "source_parameters": reading.source_parameters,
        "layers": reading.sources, "changes": list(reading.changes)})


def twin(impl: ModuleType, staging: Path) -> None:
    """The twin's proof outputs, built from the written spec file and weights."""
    classes = files.read_json(staging / "read.json")["classes"]
    spec = networks.load_reference(str(staging / SPEC), classes)
    with np.load(staging / WEIGHTS) as found:
        weights = {name: found[name] for name in found.files}
    images, labels = porting.proof_batch(spec.input_shape, spec.num_classes)
    builds = impl.framework_model
    # in float64, as the source's outputs; dropout off, as the source's is in the proof
    model = impl.build_twin(specs.without_dropout(spec))
    builds.load_weights(model, weights, spec)
    logits, loss, grads = impl.outputs(model, images, labels)
    outputs = {"logits": logits, "loss": loss, **{
        f"grad/{name}": value for name, value in builds.export_gradients(model, grads,
                                                                         spec).items()}}
    files.write_atomic(staging / "twin.npz", lambda f: np.savez(f, **outputs), mode="wb")
    files.write_json(staging / "twin.json", {"framework": impl.FRAMEWORK,
                                             "twin_parameters": builds.count_parameters(model)})


def _name(source: str) -> str:
    """A spec name from the source: the class, or the model file's stem."""
    where, _, attribute = source.rpartition(":")
    stem = attribute if attribute.isidentifier() else Path(source).stem
    return "".join(c if c.isalnum() or c == "_" else "_" for c in stem).lower() or "ported"


def run(impl: ModuleType) -> NoReturn:
    """`python -m <package>.port`: `main`, then `leave`."""
    leave(main(impl))
