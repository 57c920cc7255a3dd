"""`cnncompare port`: a network read in its framework's process, its twin built in the other
framework's, the two compared on one batch, and the spec, weights and proof written to --out
whole or not at all.

Each framework runs in its own subprocess (tf_impl/port.py, torch_impl/port.py, driven by
compare.run.port_worker), so this module imports neither.
"""

from __future__ import annotations

import datetime
import json
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from compare import files, schema
from compare.errors import UserError
from compare.experiment import networks, porting, specs, weights
from compare.experiment.config import FRAMEWORK_NAMES
from compare.experiment.frameworks import FRAMEWORKS, impl_module
from compare.process import runner

PORT_MODULES = {framework: impl_module(framework, "port") for framework in FRAMEWORKS}
TIMEOUT_S = 1800  # one side's read or twin: a big network's trace, build and proof on a CPU


def check_out(out: Path) -> None:
    """--out is new, or an empty directory: a port never mixes with other files."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} exists and is not an empty directory: choose a new one")


def port(kind: str, source: str, out: Path, kwargs: dict | None = None,
         input_shape: tuple[int, int, int] | None = None, name: str | None = None,
         say: Callable[[str], None] = print) -> dict:
    """Read `source` (`kind`: a key of porting.SOURCES), build and prove its twin, write
    --out; the record written (compare.schema.PortRecord). A refusal is a UserError (one
    line, exit 2) and a proof that fails a RuntimeError, both with nothing in --out."""
    out = Path(out)
    check_out(out)
    reader, builder = porting.SOURCES[kind]
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.port-", dir=out.parent))
    staging.chmod(0o777 & ~files.UMASK)  # as mkdir would make it (mkdtemp's are private)
    try:
        args = ["read", source, "--dir", str(staging), "--kwargs", json.dumps(kwargs or {})]
        args += ["--input-shape", ",".join(map(str, input_shape))] if input_shape else []
        args += ["--name", name] if name else []
        say(f"reading {source} in {FRAMEWORK_NAMES[reader]}")
        _call(reader, args)
        say(f"building its twin in {FRAMEWORK_NAMES[builder]} and comparing the two")
        _call(builder, ["twin", "--dir", str(staging)])
        record = _record(kind, source, staging, out)
        files.write_json(staging / "port.json", record)
        if not record["proof"]["passed"]:
            raise RuntimeError(f"the twin does not compute what the source does: "
                               f"{porting.describe(record['proof'])}")
        for scratch in staging.iterdir():
            if scratch.name not in files.PortDir.kept:
                scratch.unlink()
        if out.exists():
            out.rmdir()  # empty (check_out): the staging takes its place whole
        staging.rename(out)
        return record
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _call(framework: str, args: list[str]) -> None:
    proc = runner.framework_call(framework, PORT_MODULES[framework], args, TIMEOUT_S)
    said = runner.last_error(proc).removeprefix("error: ")  # the child's compare.errors line
    if proc.returncode == 2:
        raise UserError(said)
    if proc.returncode != 0:
        raise RuntimeError(f"{FRAMEWORK_NAMES[framework]}: {said}")


def _record(kind: str, source: str, staging: Path, out: Path) -> dict:
    read = files.read_json(staging / "read.json")
    built = files.read_json(staging / "twin.json")
    spec = networks.load_reference(str(staging / "spec.py"), read["classes"])
    with np.load(staging / "source.npz") as a, np.load(staging / "twin.npz") as b:
        proof = porting.compare_outputs(dict(a), dict(b))
    saved = files.PortDir(out)
    command = ["cnncompare", "compare", "--model", str(saved.spec), "--init-weights",
               str(saved.weights), "--dataset", "cifar10" if spec.num_classes == 10 else "folder"]
    return {
        "schema_version": schema.PORT_VERSION,
        "source": {"kind": kind, "framework": read["framework"], "reference": source,
                   "kwargs": read["kwargs"], "parameters": read["source_parameters"],
                   "layers": read["layers"], "left_out": read.get("changes", [])},
        "twin": {"framework": built["framework"], "parameters": built["twin_parameters"]},
        "spec": {"file": saved.spec.name, "name": spec.name,
                 "input_shape": list(spec.input_shape), "num_classes": spec.num_classes,
                 "parameters": specs.parameter_count(spec),
                 "layers": sum(1 for _ in specs.walk(spec.layers))},
        "weights": {"file": saved.weights.name,
                    "sha256": weights.digest(staging / saved.weights.name),
                    "tensors": len(specs.parameter_shapes(spec))},
        "proof": proof,
        "dropout": {"rates": porting.dropout_rates(spec),
                    "proof": "each at rate 0 in the source and the twin: one function "
                             "compared, not two frameworks' random masks"},
        "compare_command": shlex.join(command),
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
