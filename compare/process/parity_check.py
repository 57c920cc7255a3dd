"""The parity check run: each framework's probe in its own subprocess (two at a time), the
float64 gate on the CPU (float32 and its noise floor where a framework has no float64 kernel
for a layer), and the timed configuration's drift against its noise floor. The probes and
their comparison are compare.experiment.parity's."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from compare.experiment import networks, specs
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS, ComparisonConfig, RunConfig
from compare.experiment.parity import (
    NOISE_FACTOR,
    Tolerances,
    compare_probes,
    judge_updates_against_noise,
    probe_config,
    timed_config,
)
from compare.experiment.parity_record import AFTER_STEPS, GATED, ParityRecord, TimedDrift, figure
from compare.machine import precision_choice
from compare.process import runner

# The timed configuration (float32, mixed precision, TF32, a compiler, on the run's device)
# rounds differently in the two frameworks' kernels, so its figures are not gated. They are
# recorded beside their noise floor: the same figures for each framework against itself with
# every initial weight moved by one ulp of the compute precision. A TF-vs-PyTorch difference
# within NOISE_FACTOR times the larger floor (or within the float32 tolerance) is rounding.
# The float64 gate catches recipe errors.

# Where both probe on the CPU, TensorFlow's probe of the timed configuration runs in a process
# of its own beside its gate's, on networks of at least APART_FROM_LAYERS layers: TensorFlow
# traces and optimises its step function anew for each configuration (float64, then float32),
# seconds on one core that grow with the layers, and a second process overlaps the two on a
# 2-core CPU for the price of one more import. PyTorch's probes are mostly computation on
# every core: chained in one process. Measured both ways with benchmarks/parity_float64.py
# --check --apart (docs/benchmarks.md): MobileNetV2 (153 layers) gained, ResNet-18 (60) did
# not beyond the machine's noise, VGG-11 (31) and LeNet (12) lost.
TRACED_APART = ("tf",)
APART_FROM_LAYERS = 100


def run_parity(config: RunConfig, directory: Path,
               steps: int = ComparisonConfig.parity_steps,
               tolerances: Tolerances | None = None) -> ParityRecord:
    """The gate (pass/fail: float64 on the CPU, or float32 against its noise floor where a
    framework cannot compute a layer in float64) and the timed configuration's drift
    against its noise floor (recorded, not gated). Probes run in subprocesses; failures are
    recorded with their cause, not raised."""
    directory.mkdir(parents=True, exist_ok=True)
    gate, timed = precision_choice.carry(probe_config(config)), timed_config(config)
    # Where the timed configuration trains on the CPU too, each framework's gate process
    # probes it next: one process start and framework set-up less on the check's critical
    # path. On a GPU it needs a process of its own: the gate's TensorFlow hides the GPUs from
    # its process.
    then = (timed, directory / "timed") if _device_kind(timed) == "cpu" else None
    separate = apart(config.model)
    gated, *followed = _probes(gate, directory, steps, then=then, apart=separate)
    probes, errors = gated
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
        record["timed_configuration"] = _timed_record(
            timed, directory / "timed", steps, followed[0] if followed else None, separate)
    return record


def _float32_gate(config: RunConfig, directory: Path, steps: int,
                  tolerances: Tolerances | None) -> ParityRecord:
    """The float32 gate on the CPU: figures after the steps within NOISE_FACTOR x their noise
    floor (PyTorch against itself moved by 1 ulp) pass where logits, loss and gradients agree."""
    gate = precision_choice.carry(probe_config(config, "fp32"))
    probes, errors = _probes(gate, directory, steps, floors=("torch",))[0]
    if errors:
        return _error_record(errors, gate, steps)
    record = compare_probes(probes["tf"], probes["torch"], steps, tolerances)
    return judge_updates_against_noise(record, compare_probes(
        probes["torch-perturbed"], probes["torch"], steps, tolerances))


class Probed(NamedTuple):
    """The probes of one configuration: arrays by name (tf, torch, NAME-perturbed for a
    floor) and, for a framework whose probe is missing, its error line."""
    probes: dict[str, dict[str, np.ndarray]]
    errors: dict[str, str]


def _probes(config: RunConfig, directory: Path, steps: int, floors: tuple[str, ...] = (),
            then: tuple[RunConfig, Path] | None = None,
            apart: tuple[str, ...] = ()) -> list[Probed]:
    """Each framework's probe of `config` into `directory` (and, for `floors`, a
    1-ulp-perturbed one written by the same process: NAME-perturbed); with `then` (a config
    and its directory), that config's probe next, with both floors: by the same process, or
    for a framework in `apart` by a process of its own (`apart`'s processes start first).
    One Probed per configuration, `config`'s first. A probe counts once its file is written:
    a process that fails in `then`'s probe leaves `config`'s."""
    wanted = [(config, directory, floors)] + ([(*then, FRAMEWORKS)] if then is not None else [])
    for _, folder, floored in wanted:  # no file of an earlier check is read as this one's
        folder.mkdir(parents=True, exist_ok=True)
        for framework in FRAMEWORKS:
            for name in _names(framework, floored):
                (folder / f"{name}.npz").unlink(missing_ok=True)

    def probe(framework: str, first: tuple[RunConfig, Path, tuple[str, ...]],
              follow: tuple[RunConfig, Path] | None) -> tuple[int, str | None]:
        probed, folder, floored = first
        floor = folder / f"{framework}-perturbed.npz" if framework in floored else None
        chained = None
        if follow is not None:
            chained = (follow[0].replace(framework=framework, out=str(follow[1] / framework)),
                       follow[1] / f"{framework}.npz", follow[1] / f"{framework}-perturbed.npz")
        return runner.run_probe(probed.replace(framework=framework, out=str(folder / framework)),
                                folder / f"{framework}.npz", steps, floor=floor, then=chained)
    jobs: list[tuple[int, str, Callable[[], tuple[int, str | None]]]] = []
    for framework in sorted(FRAMEWORKS, key=lambda fw: fw not in apart):
        alone = then is not None and framework in apart
        jobs.append((0, framework, functools.partial(probe, framework, wanted[0],
                                                     None if alone else then)))
        if alone:
            jobs.append((1, framework, functools.partial(probe, framework, wanted[1], None)))
    # Untimed, and mostly process start-up and tracing: two at a time
    done = runner.concurrently([job for _, _, job in jobs])
    outcome = {(index, framework): result
               for (index, framework, _), result in zip(jobs, done)}
    found = []
    for index, (_, folder, floored) in enumerate(wanted):
        probed = Probed({}, {})
        for framework in FRAMEWORKS:
            code, error = outcome.get((index, framework), outcome[0, framework])
            paths = {name: folder / f"{name}.npz" for name in _names(framework, floored)}
            if not all(p.exists() for p in paths.values()):
                probed.errors[framework] = error or runner.exit_reason(code)
                continue
            for name, path in paths.items():
                with np.load(path) as z:
                    probed.probes[name] = {k: z[k] for k in z.files}
        found.append(probed)
    return found


def apart(model: str) -> tuple[str, ...]:
    """The frameworks whose timed probe of `model` on the CPU runs in a process of its own
    (TRACED_APART from APART_FROM_LAYERS layers on). A user's spec that is not built for 10
    classes is not counted: its probes are chained, as for a small network."""
    try:
        layers = len(list(specs.walk(networks.get_spec(model).layers)))
    except ValueError:
        return ()
    return TRACED_APART if layers >= APART_FROM_LAYERS else ()


def _names(framework: str, floors: tuple[str, ...]) -> list[str]:
    """The probes a framework's process writes: its own, and its floor's if it has one."""
    return [framework] + ([f"{framework}-perturbed"] if framework in floors else [])


def _device_kind(config: RunConfig) -> str:
    """gpu or cpu: where a probe of `config` runs."""
    if config.device == "auto":  # the GPU where the driver shows one, as each framework decides
        return "gpu" if precision_choice.nvml_capability() is not None else "cpu"
    return config.device


def where(config: RunConfig) -> str:
    """The device and precision a probe of `config` asked for, in words."""
    device = "the GPU" if _device_kind(config) == "gpu" else "the CPU"
    compute = precision_choice.expected(config.precision, config.device, config.model).compute_type
    return f"{device}, {compute}"


def _error_record(errors: dict[str, str], config: RunConfig, steps: int) -> ParityRecord:
    """A check that could not run: which framework failed, on which device, and its line."""
    return {"passed": False, "steps": steps, "tolerances": None,
            "error": "; ".join(f"{FRAMEWORK_NAMES[fw]} on {where(config)}: {line}"
                               for fw, line in errors.items()),
            "errors": {fw: {"device": where(config), "line": line} for fw, line in errors.items()},
            "logits_max_abs_diff": None, "loss_abs_diff": None, "grad_max_rel_diff": None,
            "params_rel_update_diff_after_steps": None, "bn_running_stats_max_rel_diff": None,
            "params_max_abs_diff_after_steps": None, "failed": ["probe"]}


def _timed_record(timed: RunConfig, directory: Path, steps: int,
                  probed: Probed | None = None, apart: tuple[str, ...] = ()) -> TimedDrift:
    """The timed configuration's TF-vs-PyTorch figures, each framework's noise floor, and
    whether the one is within the other; from `probed` where the gate's processes probed it
    already (but for the frameworks `apart`, whose own processes did), else probed here."""
    described = {"precision": timed.precision, "tf32": timed.tf32, "compile": timed.compile,
                 "cuda_graphs": timed.cuda_graphs, "replicas_probed": 1,
                 "images": timed.batch_size, "device": where(timed),
                 "probed_in": {fw: "its gate's process" if probed is not None and fw not in apart
                               else "a process of its own" for fw in FRAMEWORKS}}
    probes, errors = probed or _probes(timed, directory, steps, floors=FRAMEWORKS)[0]
    if errors:
        return {"configuration": described,
                "error": "; ".join(f"{FRAMEWORK_NAMES[fw]} on {where(timed)}: {e}"
                                   for fw, e in errors.items())}
    limits = asdict(Tolerances())
    versus = compare_probes(probes["tf"], probes["torch"], steps, Tolerances())
    floors = {fw: compare_probes(probes[f"{fw}-perturbed"], probes[fw], steps, Tolerances())
              for fw in FRAMEWORKS}
    noise = {k: max(figure(floors[fw], k) for fw in FRAMEWORKS) for k in GATED}
    within = {k: figure(versus, k) <= max(NOISE_FACTOR * noise[k], limits[k]) for k in GATED}
    return {"configuration": described,
            "figures": {k: figure(versus, k) for k in GATED},
            "noise_floor": noise,
            "noise_floors": {fw: {k: figure(floors[fw], k) for k in GATED} for fw in FRAMEWORKS},
            "within_noise": within, "agrees": all(within.values()),
            "drift_within_own": all(figure(versus, k) <= NOISE_FACTOR * noise[k]
                                    for k in AFTER_STEPS),
            "method": f"the compared precision/TF32/compiler on the run's device, one replica; "
                      f"noise floor: each framework against itself with every initial weight "
                      f"moved by 1 ulp (the larger of the two); agreement: each figure <= "
                      f"max({NOISE_FACTOR:g} x the floor, the float32 tolerance). Measured, "
                      f"not gated: the float64 check gates."}
