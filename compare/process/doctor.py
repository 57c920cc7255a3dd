"""`cnncompare doctor`: can each framework train here, on which device, and can they be
compared on the same one?

For each framework, in its own processes (forked from one server per framework that
imported it): what it sees (versions, GPUs, CUDA/cuDNN it was built with), then one process
per device kind it can use that trains a few real steps of the chosen model in float32 and
in mixed precision, times them, and reads which CUDA, cuBLAS and cuDNN libraries the process
actually loaded (compare.machine.doctor, in that process). When a framework sees no GPU on
a machine that has one, it says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

from compare.errors import FrameworkMissing
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS, recipe_config
from compare.experiment.precision_rule import PrecisionMeasured
from compare.machine import environment, precision_choice
from compare.machine.doctor import DoctorSteps, gpu_diagnosis
from compare.process import runner, warm
from compare.setup.config import interpreter, read
from compare.setup.plan import staleness
from compare.schema import FrameworkEnvironment, Machine

# The interpreter a framework runs in and what chose it (its keys: "from" is a keyword)
InterpreterFound = TypedDict("InterpreterFound", {"python": str, "from": str,
                                                  "stale": NotRequired[list[str]],
                                                  "mended_by": NotRequired[str]})


class FrameworkCheck(TypedDict):
    """What the doctor found of one framework."""

    name: str
    interpreter: InterpreterFound
    installed: NotRequired[bool]
    verdict: NotRequired[str]
    kinds: NotRequired[list[str]]  # the device kinds it trained on
    environment: NotRequired[FrameworkEnvironment]  # as its process said
    gpu_diagnosis: NotRequired[str | None]
    runs: NotRequired[dict[str, DoctorSteps]]  # per device kind


class DoctorReport(TypedDict):
    """`cnncompare doctor`'s findings (its --json)."""

    machine: Machine
    model: str
    frameworks: dict[str, FrameworkCheck]
    verdict: NotRequired[str]
    ready: NotRequired[bool]
    precision_measured: NotRequired[PrecisionMeasured]  # as kept for --precision auto


def examine(model: str, frameworks: tuple[str, ...] = FRAMEWORKS,
            device: str = "auto") -> DoctorReport:
    """The whole check: per framework its environment and trained steps on `device` (auto:
    the GPU where the framework sees one, else the CPU); the verdicts. With one framework,
    its own verdict is the whole one. Each framework is imported once, by its fork server
    (compare.process.warm): the query and the training process are its children."""
    with warm.fork_servers():
        return _examine(model, frameworks, device)


def _examine(model: str, frameworks: tuple[str, ...], device: str) -> DoctorReport:
    machine = environment.machine()
    report: DoctorReport = {"machine": machine, "model": model, "frameworks": {}}
    for framework in (fw for fw in FRAMEWORKS if fw in frameworks):
        entry: FrameworkCheck = {"name": FRAMEWORK_NAMES[framework],
                                 "interpreter": _interpreter(framework)}
        try:
            runner.check_installed(framework)
        except FrameworkMissing as exc:
            entry.update({"installed": False, "verdict": f"not installed: {exc}", "kinds": []})
            report["frameworks"][framework] = entry
            continue
        env = runner.framework_environment(framework)
        entry.update({"installed": True, "environment": env,
                      "gpu_diagnosis": gpu_diagnosis(env, machine)})
        # A framework that sees a GPU is examined on it alone: a GPU machine is leased for
        # its GPU, and every framework can train on a CPU.
        kinds = [device] if device != "auto" else ["gpu"] if env.get("gpus") else ["cpu"]
        entry["runs"] = {kind: _train_in_process(framework, model, kind) for kind in kinds}
        entry["kinds"] = [k for k, r in entry["runs"].items() if r.get("precisions") and all(
            p.get("ok") for p in r["precisions"].values())]
        entry["verdict"] = _framework_verdict(entry)
        report["frameworks"][framework] = entry
    on_cpu = {fw: e["runs"]["cpu"]["precisions"] for fw, e in report["frameworks"].items()
              if "cpu" in e.get("kinds", [])}
    if set(on_cpu) == set(FRAMEWORKS):  # what --precision auto decides by on this CPU
        report["precision_measured"] = precision_choice.record_measurement(model, {
            fw: {p: result["step_ms"] for p, result in done.items()}
            for fw, done in on_cpu.items()})
    if len(report["frameworks"]) == 1:
        (framework, entry), = report["frameworks"].items()
        report["verdict"] = f"{entry['name']} alone: {entry['verdict']}"
        report["ready"] = bool(entry.get("kinds"))
    else:
        report["verdict"], report["ready"] = _pair_verdict(report["frameworks"])
    return report


def _interpreter(framework: str) -> InterpreterFound:
    """The interpreter the framework runs in, what chose it (compare.setup.config), and why
    it is out of date where the set-up built it and it no longer holds what a set-up would
    install (compare.setup.plan.staleness)."""
    chosen = interpreter(framework)
    found: InterpreterFound = {"python": chosen.python, "from": chosen.described}
    recorded = read().environments.get(framework)
    if chosen.source == "setup" and recorded is not None:
        found.update({"stale": staleness(framework), "mended_by": recorded.setup_command})
    return found


def _train_in_process(framework: str, model: str, kind: str) -> DoctorSteps:
    import json
    import tempfile
    config = recipe_config(model, framework=framework, device=kind, quiet=True,
                           batch_size=min(recipe_config(model).batch_size, 64))
    with tempfile.TemporaryDirectory(prefix="cnncompare-doctor-") as tmp:
        out = Path(tmp) / "doctor.json"
        outcome = runner.run_framework(config.replace(out=tmp), on_line=lambda line: None,
                                       extra=("--doctor", str(out)))
        if outcome.code != 0 or not out.exists():
            return {"framework": framework, "device": kind, "device_kind": kind,
                    "device_name": None, "model": model, "batch_size": config.batch_size,
                    "precisions": {}, "error": outcome.error or f"exit code {outcome.code}"}
        found: DoctorSteps = json.loads(out.read_text())  # written by train_steps
        return found


def _framework_verdict(entry: FrameworkCheck) -> str:
    if "gpu" in entry["kinds"]:
        return f"can train on GPU: {entry['runs']['gpu']['device_name']}"
    if "cpu" in entry["kinds"]:
        why = entry.get("gpu_diagnosis")
        return "can train on CPU only" + (f" (no GPU: {why})" if why else "")
    failures = [r.get("error") or "a step failed" for r in entry.get("runs", {}).values()]
    return "cannot train: " + "; ".join(failures)


def _pair_verdict(frameworks: dict[str, FrameworkCheck]) -> tuple[str, bool]:
    tf_kinds, torch_kinds = (set(frameworks[fw].get("kinds", [])) for fw in FRAMEWORKS)
    if "gpu" in tf_kinds and "gpu" in torch_kinds:
        name = frameworks["torch"]["runs"]["gpu"]["device_name"]
        return f"ready to compare on GPU: {name}", True
    if "cpu" in tf_kinds and "cpu" in torch_kinds:
        return "ready to compare on CPU", True
    on_gpu = [fw for fw in FRAMEWORKS if "gpu" in frameworks[fw].get("kinds", [])]
    on_cpu = [fw for fw in FRAMEWORKS if "cpu" in frameworks[fw].get("kinds", [])]
    if on_gpu and on_cpu:  # one sees the GPU, the other only the CPU
        gpu_name, cpu_name = FRAMEWORK_NAMES[on_gpu[0]], FRAMEWORK_NAMES[on_cpu[0]]
        return (f"not ready on the GPU: {gpu_name} trains on it, {cpu_name} cannot "
                f"({frameworks[on_cpu[0]].get('gpu_diagnosis') or 'it sees no GPU'}); "
                "compare on the CPU with --device cpu, or give both the GPU"), False
    missing = [FRAMEWORK_NAMES[fw] for fw in FRAMEWORKS if not frameworks[fw].get("kinds")]
    return f"not ready: {', '.join(missing)} cannot train here", False


def print_report(report: DoctorReport) -> None:
    """The doctor's findings as rich tables, ending with the verdict."""
    from rich.table import Table

    from compare.console import console as make_console
    console = make_console()
    for framework, entry in report["frameworks"].items():
        table = Table(title=f"{entry['name']}: {entry['verdict']}", show_header=True)
        for column in ("device", "precision", "step", "result"):
            table.add_column(column)
        ran = entry.get("interpreter") or {}
        if ran.get("from") and ran["from"] != "cnncompare's own":
            console.print(f"{entry['name']} runs in {ran['python']} ({ran['from']})")
        if ran.get("stale"):
            console.print(f"[yellow]{entry['name']}'s environment is out of date: "
                          f"{'; '.join(ran['stale'])}: run `{ran['mended_by']}` again[/yellow]")
        env = entry.get("environment", {})
        if env:
            version = env.get("tensorflow") or env.get("torch")
            console.print(f"{entry['name']} {version}: CUDA {env.get('cuda')}, cuDNN "
                          f"{env.get('cudnn')}, GPUs: "
                          f"{', '.join(str(g['name']) for g in env.get('gpus', [])) or 'none'}")
        for kind, run in entry.get("runs", {}).items():
            if "error" in run:
                table.add_row(kind, "", "", run["error"])
                continue
            for mode, result in run["precisions"].items():
                step = f"{result['step_ms']:.2f} ms" if "step_ms" in result else ""
                outcome = (f"ok ({result['policy']})" if result.get("ok")
                           else result.get("error", "non-finite loss"))
                table.add_row(run["device"], mode, step, outcome)
            libraries = ", ".join(run.get("libraries") or {}) or "none"
            table.add_row(run["device"], "libraries", "", libraries)
        console.print(table)
    if report.get("precision_measured"):
        chosen = precision_choice.resolve("auto", False, model=report["model"])
        console.print(f"--precision auto on this CPU for {report['model']}: "
                      f"{chosen.describe()}")
    console.print(f"[bold]{report['verdict']}[/bold]")
