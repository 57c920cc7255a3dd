"""Which of the CNNs people have `cnncompare port` reads: torchvision's classifiers and Keras
Applications', each ported from its own framework into the other at CIFAR-10's input size
(3x32x32, 10 classes, random weights) and its twin ported back (the Keras twin saved as a
.keras file, the PyTorch twin as a function returning the module). docs/porting.md's coverage
table comes from it.

    python -m benchmarks.port_coverage                      # every model: about 30 minutes
    python -m benchmarks.port_coverage resnet18 MobileNetV2 # some
    python -m benchmarks.port_coverage --write-docs         # the table into docs/porting.md

Each port runs as a user's would (compare.process.port: the reader and the twin each in their
framework's process); the seconds are the whole port's wall time, both processes included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare.errors import UserError
from compare.process import port as port_command

# torchvision's builders and the keyword arguments that make them CIFAR-10 classifiers
TORCHVISION = {name: {"num_classes": 10} for name in (
    "resnet18", "resnet50", "vgg11_bn", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
    "densenet121", "squeezenet1_1", "googlenet", "regnet_y_400mf", "mnasnet0_5",
    "shufflenet_v2_x0_5", "convnext_tiny")}
TORCHVISION["googlenet"].update(aux_logits=False, init_weights=True)
KERAS_APPLICATIONS = ("ResNet50", "VGG16", "MobileNetV2", "MobileNetV3Small", "DenseNet121",
                      "EfficientNetB0", "ConvNeXtTiny", "NASNetMobile")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "port_coverage.json"
DOCS = ROOT / "docs" / "porting.md"
BEGIN = "<!-- coverage: written by python -m benchmarks.port_coverage --write-docs -->"
END = "<!-- end of coverage -->"

TORCH_TWIN = '''"""The PyTorch twin of a ported network, as a function returning the module."""
import numpy as np

from compare.experiment import networks
from torch_impl import model


def twin():
    spec = networks.load_reference({spec!r})
    built = model.build_model(spec)
    with np.load({weights!r}) as found:
        model.load_weights(built, {{name: found[name] for name in found.files}}, spec)
    return built
'''


def _python(code: str) -> None:
    """Run `code` in a fresh interpreter of this environment (a framework's own process)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])


def save_keras_application(name: str, path: Path) -> None:
    _python(f"import keras; keras.applications.{name}(weights=None, input_shape=(32, 32, 3), "
            f"classes=10).save({str(path)!r})")


def save_keras_twin(ported: Path, path: Path) -> None:
    _python("import numpy as np\n"
            "from compare.experiment import networks\n"
            "from tf_impl import model\n"
            f"spec = networks.load_reference({str(ported / 'spec.py')!r})\n"
            "built = model.build_model(spec)\n"
            f"with np.load({str(ported / 'weights.npz')!r}) as found:\n"
            "    model.load_weights(built, {n: found[n] for n in found.files}, spec)\n"
            f"built.save({str(path)!r})\n")


def _port(kind: str, source: str, out: Path, kwargs: dict | None = None) -> dict:
    """One port: its record's figures, or the refusal's line."""
    started = time.perf_counter()
    try:
        record = port_command.port(kind, source, out, kwargs, say=lambda line: None)
    except (UserError, RuntimeError) as exc:
        return {"ported": False, "line": str(exc), "seconds": time.perf_counter() - started}
    proof = record["proof"]
    return {"ported": True, "seconds": time.perf_counter() - started,
            "logits_max_abs_diff": proof["logits_max_abs_diff"],
            "grad_max_rel_diff": proof["grad_max_rel_diff"],
            "loss_abs_diff": proof["loss_abs_diff"],
            "source_parameters": record["source"]["parameters"],
            "twin_parameters": record["twin"]["parameters"],
            "layers": record["spec"]["layers"], "notes": record.get("notes", [])}


def cover(framework: str, name: str, work: Path) -> dict:
    """`name` ported from `framework` ("torch": torchvision, "keras": Keras Applications) and
    its twin ported back."""
    ported = work / f"{name}-twin"
    if framework == "torch":
        there = _port("torch", f"torchvision.models:{name}", ported, TORCHVISION[name])
    else:
        saved = work / f"{name}.keras"
        save_keras_application(name, saved)
        there = _port("keras", str(saved), ported)
    found = {"framework": framework, "model": name, "there": there}
    if there["ported"]:
        if framework == "torch":
            back_source = work / f"{name}-twin.keras"
            save_keras_twin(ported, back_source)
            found["back"] = _port("keras", str(back_source), work / f"{name}-back")
        else:
            module = work / f"{name.lower()}_twin.py"
            module.write_text(TORCH_TWIN.format(spec=str(ported / "spec.py"),
                                                weights=str(ported / "weights.npz")))
            found["back"] = _port("torch", f"{module}:twin", work / f"{name}-back")
    return found


def _row(entry: dict) -> str:
    origin = "torchvision" if entry["framework"] == "torch" else "Keras Applications"
    there, back = entry["there"], entry.get("back")
    if not there["ported"]:
        return f"| {origin} | `{entry['model']}` | refused: {there['line']} | | | |"
    figures = (f"logits {there['logits_max_abs_diff']:.1e}, gradients "
               f"{there['grad_max_rel_diff']:.1e}")
    if back and back["ported"]:  # the twin's twin: proven equal, with every parameter
        back_text = (f"equal, logits {back['logits_max_abs_diff']:.1e}" if round_trip(entry)
                     else "proven, but its parameter count differs")
    else:
        back_text = f"refused: {back['line']}" if back else ""
    return (f"| {origin} | `{entry['model']}` | ported: {figures} | "
            f"{there['source_parameters']:,} / {there['twin_parameters']:,} | "
            f"{there['seconds']:.0f} s | {back_text} |")


def round_trip(entry: dict) -> bool:
    """Ported with proof, and its twin ported back with proof and every parameter."""
    there, back = entry["there"], entry.get("back") or {}
    return bool(there["ported"] and back.get("ported")
                and back["twin_parameters"] == there["source_parameters"])


def table(entries: list[dict]) -> str:
    ported = sum(round_trip(e) for e in entries)
    rows = [f"{ported} of {len(entries)} port with proof and back.", "",
            "| from | model | port (float64 proof: max abs logits, max relative gradient) | "
            "parameters (source / twin) | port time | the twin ported back |",
            "|---|---|---|---|---|---|"]
    return "\n".join(rows + [_row(e) for e in entries])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="some of the models (default: every one)")
    parser.add_argument("--write-docs", action="store_true",
                        help="write the last results' table into docs/porting.md")
    args = parser.parse_args()
    if args.write_docs:
        found = json.loads(RESULTS.read_text())
        text = DOCS.read_text()
        before, rest = text.split(BEGIN)
        note = (f"Measured by `python -m benchmarks.port_coverage` on {found['machine']}, "
                f"{found['date']}: each port once, its time the whole command's (both "
                f"frameworks' processes; not a benchmark).\n\n")
        DOCS.write_text(f"{before}{BEGIN}\n{note}{table(found['entries'])}\n{END}"
                        f"{rest.split(END)[1]}")
        return
    chosen = [("torch", n) for n in TORCHVISION] + [("keras", n) for n in KERAS_APPLICATIONS]
    if args.models:
        chosen = [(fw, n) for fw, n in chosen if n in args.models]
    entries = []
    with tempfile.TemporaryDirectory() as directory:
        for framework, name in chosen:
            entry = cover(framework, name, Path(directory))
            entries.append(entry)
            print(_row(entry), flush=True)
    if not args.models:  # the whole list: the results the docs table is written from
        RESULTS.write_text(json.dumps({
            "machine": f"a 2-core {_cpu_name()}" if os.cpu_count() == 2 else _cpu_name(),
            "date": time.strftime("%Y-%m-%d"),
            "entries": entries}, indent=1))
    print(table(entries))


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
