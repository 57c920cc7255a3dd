"""`cnncompare sweep`: what each setting is worth, per framework, as a measured matrix.

The cartesian product of the `--vary` settings, run for each framework in its own
subprocess (alternating which framework goes first), into DIR/sweep.json, sweep.md and a
self-contained sweep.html. The baseline is the first value of every varied setting; each
row's speed-up is its throughput over the baseline's, within the same framework.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from compare import schema
from compare.errors import UserError
from compare.experiment import specs
from compare.experiment.config import (
    DEVICE_CHOICES,
    FRAMEWORK_NAMES,
    PIPELINES,
    PRECISIONS,
    STRATEGIES,
    PipelineConfig,
    RunConfig,
)
from compare.experiment.validate import check_against_data, check_config
from compare.machine import devices
from compare.process import runner
from compare.process.orchestrate import QueuedRun, run_queue
from compare.report import build as report


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise ValueError("on or off")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("a positive integer")
    return value


def _choice(options) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"one of {', '.join(options)}")
        return text
    return parse


@dataclass(frozen=True)
class Variable:
    parse: Callable[[str], Any]
    apply: Callable[[RunConfig, Any], RunConfig]


VARIABLES: dict[str, Variable] = {
    "precision": Variable(_choice(PRECISIONS), lambda c, v: c.replace(precision=v)),
    "batch-size": Variable(_positive_int, lambda c, v: c.replace(batch_size=v)),
    "pipeline": Variable(_choice(PIPELINES),
                         lambda c, v: c.replace(pipeline=PipelineConfig.preset(v))),
    "compile": Variable(_bool, lambda c, v: c.replace(compile=v)),
    # PyTorch's alone (TensorFlow's rows repeat its baseline)
    "cuda-graphs": Variable(_bool, lambda c, v: c.replace(cuda_graphs=v)),
    "devices": Variable(_positive_int, lambda c, v: c.replace(devices=v)),
    "device": Variable(_choice(DEVICE_CHOICES), lambda c, v: c.replace(device=v)),
    "model": Variable(_choice(tuple(specs.MODELS)), lambda c, v: c.replace(model=v)),
    "lr": Variable(float, lambda c, v: c.replace(lr=v)),
    "epochs": Variable(_positive_int, lambda c, v: c.replace(epochs=v)),
    "workers": Variable(int, lambda c, v: c.replace(
        pipeline=dataclasses.replace(c.pipeline, workers=v))),
    "tf32": Variable(_bool, lambda c, v: c.replace(tf32=v)),
    "steps-per-call": Variable(_positive_int, lambda c, v: c.replace(steps_per_call=v)),
    "strategy": Variable(_choice(STRATEGIES), lambda c, v: c.replace(strategy=v)),
}


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """'precision=fp32,mixed' -> ('precision', ['fp32', 'mixed']); UserError when malformed."""
    if "=" not in text:
        raise UserError(f"--vary {text!r}: expected NAME=V1,V2 (names: {', '.join(VARIABLES)})")
    name, _, values = text.partition("=")
    name = name.strip().replace("_", "-")
    if name not in VARIABLES:
        raise UserError(f"--vary {text!r}: unknown setting {name!r}; "
                        f"choose from {', '.join(VARIABLES)}")
    parsed = []
    for raw in (v.strip() for v in values.split(",") if v.strip()):
        try:
            parsed.append(VARIABLES[name].parse(raw))
        except ValueError as exc:
            raise UserError(f"--vary {name}: {raw!r} is not valid ({exc})") from None
    if not parsed:
        raise UserError(f"--vary {text!r}: no values")
    return name, parsed


def combinations(config: RunConfig, varies: list[tuple[str, list[Any]]],
                 frameworks: list[str],
                 train_size: int | None = None) -> list[tuple[str, dict, RunConfig]]:
    """(framework, settings, config) for every combination, each config validated (against
    a training set of `train_size` images, when given); which framework goes first
    alternates from one combination to the next."""
    names = [n for n, _ in varies]
    rows = []
    for i, values in enumerate(itertools.product(*(v for _, v in varies))):
        settings = dict(zip(names, values))
        changed = config
        for name, value in settings.items():
            changed = VARIABLES[name].apply(changed, value)
        order = frameworks if i % 2 == 0 else frameworks[::-1]
        for framework in order:
            changed = changed.replace(framework=framework)
            try:
                check_config(changed)
                if train_size is not None:
                    check_against_data(changed, train_size)
            except UserError as exc:
                described = ", ".join(f"{k}={v}" for k, v in settings.items())
                raise UserError(f"--vary {described}: {exc}") from None
            rows.append((framework, settings, changed))
    return rows


def _slug(framework: str, settings: dict) -> str:
    text = "-".join(f"{k}_{v}" for k, v in settings.items()) or "baseline"
    return f"{framework}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def run_sweep(config: RunConfig, varies: list[tuple[str, list[Any]]], frameworks: list[str],
              out: Path, command: str, train_size: int | None = None) -> int:
    """Every combination for every framework, then sweep.json/md/html; an exit code."""
    from rich.console import Console
    console = Console(stderr=True)
    for framework in frameworks:
        runner.check_installed(framework)
    todo = combinations(config, varies, frameworks, train_size)  # all valid before any runs
    out.mkdir(parents=True, exist_ok=True)
    devices.check_same_device([run_config for _, _, run_config in todo])
    queue = [QueuedRun(f"{framework} " + " ".join(f"{k}={v}" for k, v in settings.items()),
                       run_config.replace(out=str(out / "runs" / _slug(framework, settings)),
                                          tensorboard_dir=str(out / "tensorboard"
                                                              / _slug(framework, settings))))
             for framework, settings, run_config in todo]
    done = run_queue(queue, "sweep", config.quiet, console)
    rows = [_row(framework, settings, outcome)
            for (framework, settings, _), (_, outcome) in zip(todo, done.outcomes)]
    for path in write(out, rows, varies, command):
        console.print(f"wrote {path}")
    return done.exit_code


def _row(framework: str, settings: dict, outcome: runner.Outcome | None) -> dict:
    """One row of sweep.json: the run's status and summary, or why it did not run."""
    if outcome is None:
        return {"framework": framework, "settings": settings, "status": "not run",
                "summary": None, "path": None, "error": "interrupted"}
    summary = None
    if outcome.result_path.exists():
        try:
            summary = schema.read_result(outcome.result_path)["summary"]
        except schema.SchemaError:
            summary = None
    return {"framework": framework, "settings": settings, "status": outcome.status,
            "summary": summary, "path": str(outcome.result_path), "error": outcome.error}


def with_speedups(rows: list[dict], varies: list[tuple[str, list[Any]]]) -> list[dict]:
    """Each row's throughput and time-to-target relative to its framework's baseline row."""
    baseline_settings = {name: values[0] for name, values in varies}
    baselines = {r["framework"]: r for r in rows
                 if r["settings"] == baseline_settings and r["summary"]}
    out = []
    for r in rows:
        row = dict(r)
        base = baselines.get(r["framework"])
        s, b = r["summary"] or {}, (base or {}).get("summary") or {}
        ips, base_ips = s.get("images_per_s"), b.get("images_per_s")
        row["speedup"] = ips / base_ips if ips and base_ips else None
        tta, base_tta = s.get("time_to_target_s"), b.get("time_to_target_s")
        row["time_to_target_speedup"] = base_tta / tta if tta and base_tta else None
        row["baseline"] = r["settings"] == baseline_settings
        out.append(row)
    return out


def _bars(rows: list[dict]) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.fonttype"] = "none"
    labels = sorted({" ".join(f"{k}={v}" for k, v in r["settings"].items()) for r in rows})
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.55 * len(labels)))
    height = 0.38
    for offset, fw in ((-height / 2, "tf"), (height / 2, "torch")):
        values = []
        for label in labels:
            match = [r for r in rows if r["framework"] == fw
                     and " ".join(f"{k}={v}" for k, v in r["settings"].items()) == label]
            values.append(match[0]["speedup"] or 0.0 if match else 0.0)
        ax.barh([i + offset for i in range(len(labels))], values, height, color=report.COLOURS[fw],
                label=FRAMEWORK_NAMES[fw])
    ax.axvline(1.0, color="#444", linewidth=0.8)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("throughput speed-up over the framework's baseline (x); 0 = failed or not run")
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return report.svg(fig)


def write(out: Path, rows: list[dict], varies: list[tuple[str, list[Any]]],
          command: str) -> list[Path]:
    import jinja2
    rows = with_speedups(rows, varies)
    document = {"schema_version": 1, "command": command, "varied": {n: v for n, v in varies},
                "baseline": {n: v[0] for n, v in varies}, "rows": rows,
                "measurement": {"speedup": "images/s of the row / images/s of the same framework's "
                                           "baseline row (first value of every varied setting)",
                                **schema.MEASUREMENT}}
    paths = [schema.write_json_atomic(out / "sweep.json", document)]
    env = jinja2.Environment(loader=jinja2.PackageLoader("compare.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                             lstrip_blocks=True)
    fmt = report.fmt
    table = [{"framework": FRAMEWORK_NAMES[r["framework"]],
              "settings": ", ".join(f"{k}={v}" for k, v in r["settings"].items())
                          + (" (baseline)" if r["baseline"] else ""),
              "status": r["status"], "error": r["error"] or "",
              "throughput": fmt((r["summary"] or {}).get("images_per_s"), "ips"),
              "speedup": fmt(r["speedup"], "x"),
              "train_time": fmt((r["summary"] or {}).get("train_time_s")
                                if r["summary"] and r["summary"].get("epochs_completed") else None,
                                "s"),
              "step_ms": fmt(((r["summary"] or {}).get("steady_step_time_ms") or {}).get("median"),
                             "ms"),
              "input_wait": fmt((r["summary"] or {}).get("input_wait_fraction"), "pct"),
              "accuracy": fmt((r["summary"] or {}).get("final_test_accuracy"), "acc"),
              "memory": fmt((r["summary"] or {}).get("peak_device_memory_bytes"), "mib"),
              "mfu": fmt((r["summary"] or {}).get("mfu"), "pct"),
              "energy": fmt((r["summary"] or {}).get("energy_per_image_j"), "j"),
              "tta": fmt((r["summary"] or {}).get("time_to_target_s"), "s")} for r in rows]
    context = {"table": table, "command": command, "varied": document["varied"],
               "baseline": document["baseline"], "bars": _bars(rows),
               "target": any((r["summary"] or {}).get("target_accuracy") for r in rows)}
    for name in ("sweep.md", "sweep.html"):
        text = env.get_template(f"{name}.j2").render(**context)
        paths.append(schema.write_atomic(out / name, lambda f, t=text: f.write(t)))
    return paths
