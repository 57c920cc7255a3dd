"""The parity check run: each framework's probe in its own subprocess (two at a time), the
float64 gate on the CPU (float32 and its noise floor where a framework has no float64 kernel
for a layer), and the timed configuration's drift against its noise floor. The probes and
their comparison are compare.experiment.parity's."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS, ComparisonConfig, RunConfig
from compare.experiment.parity import (
    AFTER_STEPS,
    GATED,
    NOISE_FACTOR,
    Tolerances,
    compare_probes,
    judge_updates_against_noise,
    probe_config,
    timed_config,
)
from compare.machine import precision
from compare.process import runner

# The timed configuration (float32, mixed precision, TF32, a compiler, on the run's device)
# rounds differently in the two frameworks' kernels, so its figures are not gated. They are
# recorded beside their noise floor: the same figures for each framework against itself with
# every initial weight moved by one ulp of the compute precision. A TF-vs-PyTorch difference
# within NOISE_FACTOR times the larger floor (or within the float32 tolerance) is rounding.
# The float64 gate catches recipe errors.


def run_parity(config: RunConfig, directory: Path,
               steps: int = ComparisonConfig.parity_steps,
               tolerances: Tolerances | None = None) -> dict:
    """The gate (pass/fail: float64 on the CPU, or float32 against its noise floor where a
    framework cannot compute a layer in float64) and the timed configuration's drift
    against its noise floor (recorded, not gated). Probes run in subprocesses; failures are
    recorded with their cause, not raised."""
    directory.mkdir(parents=True, exist_ok=True)
    gate = precision.carry(probe_config(config))
    probes, errors = _probes(gate, directory, steps)
    if errors:
        return _error_record(errors, gate, steps)
    missing = {fw: str(p["float64_unsupported"]) for fw, p in probes.items()
               if "float64_unsupported" in p}
    if missing:
        record = _float32_gate(config, directory / "float32", steps, tolerances)
        record["float64_unsupported"] = "; ".join(
            f"{FRAMEWORK_NAMES[fw]} has no float64 kernel for layer {layer}"
            for fw, layer in missing.items())
    else:
        record = compare_probes(probes["tf"], probes["torch"], steps, tolerances)
    if not record.get("error"):
        record["timed_configuration"] = _timed_record(config, directory / "timed", steps)
    return record


def _float32_gate(config: RunConfig, directory: Path, steps: int,
                  tolerances: Tolerances | None) -> dict:
    """The float32 gate on the CPU: figures after the steps within NOISE_FACTOR x their noise
    floor (PyTorch against itself moved by 1 ulp) pass where logits, loss and gradients agree."""
    gate = precision.carry(probe_config(config, "fp32"))
    probes, errors = _probes(gate, directory, steps, floors=("torch",))
    if errors:
        return _error_record(errors, gate, steps)
    record = compare_probes(probes["tf"], probes["torch"], steps, tolerances)
    return judge_updates_against_noise(record, compare_probes(
        probes["torch-perturbed"], probes["torch"], steps, tolerances))


def _probes(config: RunConfig, directory: Path, steps: int,
            floors: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """Each framework's probe of `config` (and, for `floors`, a 1-ulp-perturbed one written
    by the same process: NAME-perturbed); (probes by name, errors by framework)."""
    probes, errors = {}, {}

    def probe(framework: str):
        floor = directory / f"{framework}-perturbed.npz" if framework in floors else None
        return runner.run_probe(config.replace(framework=framework,
                                               out=str(directory / framework)),
                                directory / f"{framework}.npz", steps, floor=floor)
    # Untimed, and mostly process start-up: two at a time
    done = runner.concurrently([lambda fw=fw: probe(fw) for fw in FRAMEWORKS])
    for framework, (code, error) in zip(FRAMEWORKS, done):
        names = [framework] + ([f"{framework}-perturbed"] if framework in floors else [])
        paths = [directory / f"{name}.npz" for name in names]
        if code != 0 or not all(p.exists() for p in paths):
            errors[framework] = error or runner.exit_reason(code)
            continue
        for name, path in zip(names, paths):
            with np.load(path) as z:
                probes[name] = {k: z[k] for k in z.files}
    return probes, errors


def where(config: RunConfig) -> str:
    """The device and precision a probe of `config` asked for, in words."""
    kind = config.device
    if kind == "auto":  # the GPU where the driver shows one, as each framework decides
        kind = "gpu" if precision.nvml_capability() is not None else "cpu"
    device = "the GPU" if kind == "gpu" else "the CPU"
    compute = precision.expected(config.precision, config.device, config.model).compute_type
    return f"{device}, {compute}"


def _error_record(errors: dict[str, str], config: RunConfig, steps: int) -> dict:
    """A check that could not run: which framework failed, on which device, and its line."""
    return {"passed": False, "steps": steps, "tolerances": None,
            "error": "; ".join(f"{FRAMEWORK_NAMES[fw]} on {where(config)}: {line}"
                               for fw, line in errors.items()),
            "errors": {fw: {"device": where(config), "line": line} for fw, line in errors.items()},
            **{k: None for k in GATED}, "params_max_abs_diff_after_steps": None,
            "failed": ["probe"]}


def _timed_record(config: RunConfig, directory: Path, steps: int) -> dict:
    """The timed configuration's TF-vs-PyTorch figures, each framework's noise floor, and
    whether the one is within the other."""
    timed = timed_config(config)  # the run's own precision, as the command resolved it
    described = {"precision": timed.precision, "tf32": timed.tf32, "compile": timed.compile,
                 "cuda_graphs": timed.cuda_graphs, "replicas_probed": 1,
                 "device": where(timed)}
    probes, errors = _probes(timed, directory, steps, floors=FRAMEWORKS)
    if errors:
        return {"configuration": described,
                "error": "; ".join(f"{FRAMEWORK_NAMES[fw]} on {where(timed)}: {e}"
                                   for fw, e in errors.items())}
    limits = asdict(Tolerances())
    versus = compare_probes(probes["tf"], probes["torch"], steps, Tolerances())
    floors = {fw: compare_probes(probes[f"{fw}-perturbed"], probes[fw], steps, Tolerances())
              for fw in FRAMEWORKS}
    noise = {k: max(floors[fw][k] for fw in FRAMEWORKS) for k in GATED}
    within = {k: versus[k] <= max(NOISE_FACTOR * noise[k], limits[k]) for k in GATED}
    return {"configuration": described,
            "figures": {k: versus[k] for k in GATED},
            "noise_floor": noise,
            "noise_floors": {fw: {k: floors[fw][k] for k in GATED} for fw in FRAMEWORKS},
            "within_noise": within, "agrees": all(within.values()),
            "drift_within_own": all(versus[k] <= NOISE_FACTOR * noise[k] for k in AFTER_STEPS),
            "method": f"the compared precision/TF32/compiler on the run's device, one replica; "
                      f"noise floor: each framework against itself with every initial weight "
                      f"moved by 1 ulp (the larger of the two); agreement: each figure <= "
                      f"max({NOISE_FACTOR:g} x the floor, the float32 tolerance). Measured, "
                      f"not gated: the float64 check gates."}
