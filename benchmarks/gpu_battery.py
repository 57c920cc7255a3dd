"""The GPU battery: one command that checks a GPU machine end to end and writes one summary.

    PYTHONPATH=. python benchmarks/gpu_battery.py --out /tmp/battery [--epochs 2]

1. `cnncompare doctor --json`: versions, the GPUs each framework sees, the CUDA/cuDNN it
   loaded, a few real steps per device kind and precision, the verdict;
2. `pytest -m gpu`: the GPU test suite;
3. a short run of lenet and resnet9 in fp32 and mixed on synthetic data: `compare` (parity
   check, both frameworks) when both frameworks can train on the GPU, otherwise `run` for
   each framework that can (the other is marked missing, with the doctor's reason).

Writes OUT/battery.json and OUT/battery.md (plus each step's own files under OUT/). Runs
from a checkout without `pip install` (PYTHONPATH=.), with one framework or both.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from compare.cli import main; main()"]
MODELS = ("lenet", "resnet9")
PRECISIONS = ("fp32", "mixed")


def _run(argv: list[str], log: Path, timeout: int) -> tuple[int, float, str]:
    """(exit code, seconds, output) of a command, its output also in `log`."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = 124, f"timed out after {timeout} s\n{exc.stdout or ''}{exc.stderr or ''}"
    log.write_text(output)
    return code, time.perf_counter() - start, output


def doctor(out: Path) -> dict:
    code, seconds, output = _run([*CLI, "doctor", "--json"], out / "doctor.log", 1200)
    try:
        report = json.loads(output[output.index("{"):])
    except ValueError:
        report = {"verdict": f"doctor failed (exit {code})", "frameworks": {}, "ready": False}
    (out / "doctor.json").write_text(json.dumps(report, indent=2))
    return {"exit_code": code, "seconds": seconds, "verdict": report.get("verdict"),
            "frameworks": {fw: {"verdict": e.get("verdict"), "kinds": e.get("kinds", [])}
                           for fw, e in report.get("frameworks", {}).items()}}


def gpu_tests(out: Path) -> dict:
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
            "--junitxml", str(out / "pytest-gpu.xml")]
    code, seconds, output = _run(argv, out / "pytest-gpu.log", 1800)
    closing = [ln for ln in output.splitlines() if re.search(r"\d+ (passed|failed|skipped)", ln)]
    return {"exit_code": code, "seconds": seconds,
            "summary": closing[-1] if closing else output[-300:]}


def short_runs(out: Path, doctor_result: dict, epochs: int) -> list[dict]:
    frameworks = doctor_result["frameworks"]
    on_gpu = [fw for fw, e in frameworks.items() if "gpu" in e.get("kinds", [])]
    rows = []
    for model in MODELS:
        for precision in PRECISIONS:
            common = ["--model", model, "--dataset", "synthetic", "--synthetic-size", "5120",
                      "--epochs", str(epochs), "--precision", precision, "--device", "gpu",
                      "--quiet"]
            if len(on_gpu) == 2:
                target = out / f"compare-{model}-{precision}"
                code, seconds, _ = _run([*CLI, "compare", *common, "--out", str(target)],
                                        out / f"compare-{model}-{precision}.log", 1800)
                rows.append(_compare_row(model, precision, code, seconds, target))
                continue
            for framework in ("tf", "torch"):
                if framework not in on_gpu:
                    rows.append({"model": model, "precision": precision, "framework": framework,
                                 "status": "missing", "note": frameworks.get(framework, {}).get(
                                     "verdict", "not installed")})
                    continue
                target = out / f"run-{framework}-{model}-{precision}"
                code, seconds, _ = _run([*CLI, "run", "--framework", framework, *common, "--out",
                                         str(target)], out / f"{target.name}.log", 1800)
                rows.append(_run_row(model, precision, framework, code, seconds,
                                     target / "result.json"))
    return rows


def _run_row(model: str, precision: str, framework: str, code: int, seconds: float,
             path: Path) -> dict:
    row = {"model": model, "precision": precision, "framework": framework, "exit_code": code,
           "seconds": seconds}
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return {**row, "status": "failed", "note": "no result.json"}
    s = result["summary"]
    return {**row, "status": s.get("status"), "images_per_s": s.get("images_per_s"),
            "step_ms": (s.get("steady_step_time_ms") or {}).get("median"),
            "input_wait": s.get("input_wait_fraction"), "mfu": s.get("mfu"),
            "peak_memory_bytes": s.get("peak_device_memory_bytes"),
            "energy_per_image_j": s.get("energy_per_image_j"),
            "accuracy": s.get("final_test_accuracy"), "error": result.get("error")}


def _compare_row(model: str, precision: str, code: int, seconds: float, target: Path) -> dict:
    runs = sorted(target.glob("runs/*/result.json"))
    parity = {}
    try:
        parity = json.loads((target / "summary.json").read_text()).get("parity") or {}
    except (OSError, ValueError):
        pass
    return {"model": model, "precision": precision, "framework": "both", "exit_code": code,
            "seconds": seconds, "status": "completed" if code == 0 else "failed",
            "parity_passed": parity.get("passed"),
            "runs": [_run_row(model, precision, p.parent.name.split("-")[0], code, seconds, p)
                     for p in runs]}


def _cell(value, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def markdown(battery: dict) -> str:
    """battery.md: the doctor's verdicts, the GPU tests' closing line, one row per run."""
    lines = [f"# GPU battery, {battery['date']}", "", f"Machine: {battery['machine']}", "",
             f"**Doctor:** {battery['doctor']['verdict']}", ""]
    for fw, entry in battery["doctor"]["frameworks"].items():
        lines.append(f"- {fw}: {entry['verdict']}")
    lines += ["", f"**pytest -m gpu:** {battery['gpu_tests']['summary']} "
                  f"(exit {battery['gpu_tests']['exit_code']})", "",
              "| model | precision | framework | status | img/s | step ms | input wait | MFU | "
              "peak MiB | J/img | accuracy |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in battery["runs"]:
        for r in row.get("runs") or [row]:
            memory = r.get("peak_memory_bytes")
            cells = [r["model"], r["precision"], r["framework"], str(r.get("status")),
                     _cell(r.get("images_per_s"), "{:,.0f}"), _cell(r.get("step_ms"), "{:.2f}"),
                     _cell(r.get("input_wait"), "{:.1%}"), _cell(r.get("mfu"), "{:.1%}"),
                     _cell(memory / 2**20 if memory else None, "{:,.0f}"),
                     _cell(r.get("energy_per_image_j"), "{:.4f}"),
                     _cell(r.get("accuracy"), "{:.4f}")]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the summary")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each short run")
    parser.add_argument("--skip-tests", action="store_true", help="leave out pytest -m gpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import platform
    battery = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": platform.node(),
               "python": platform.python_version()}
    print("doctor ...", flush=True)
    battery["doctor"] = doctor(args.out)
    print(f"  {battery['doctor']['verdict']}", flush=True)
    battery["gpu_tests"] = ({"exit_code": None, "summary": "skipped (--skip-tests)"}
                            if args.skip_tests else gpu_tests(args.out))
    print(f"pytest -m gpu: {battery['gpu_tests']['summary']}", flush=True)
    battery["runs"] = short_runs(args.out, battery["doctor"], args.epochs)
    (args.out / "battery.json").write_text(json.dumps(battery, indent=2))
    (args.out / "battery.md").write_text(markdown(battery))
    print((args.out / "battery.md").read_text())
    failed = battery["gpu_tests"]["exit_code"] not in (None, 0) or any(
        r.get("status") not in ("completed", "missing") for r in battery["runs"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
