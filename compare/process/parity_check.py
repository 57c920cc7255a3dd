"""The parity check run: each framework's probe in its own subprocess (two at a time), the
float32 gate, and the timed configuration against its noise floor. The probes and their
comparison are compare.experiment.parity's."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from compare.experiment.config import FRAMEWORKS, ComparisonConfig, RunConfig
from compare.experiment.parity import (
    GATED,
    NOISE_FACTOR,
    Tolerances,
    compare_probes,
    differs_numerically,
    judge_updates_against_noise,
    probe_config,
    timed_config,
)
from compare.process import runner

# The timed configuration (mixed precision, TF32, a compiler) rounds differently in the two
# frameworks' kernels, so its figures are not gated on the float32 tolerances. They are
# recorded beside the noise floor of that configuration: the same figures for PyTorch
# against itself with every initial weight moved by one ulp of the compute precision. A
# TF-vs-PyTorch difference within NOISE_FACTOR times that floor (or within the float32
# tolerance) is rounding (compare.experiment.parity). The float32 gate catches recipe errors.


def run_parity(config: RunConfig, directory: Path,
               steps: int = ComparisonConfig.parity_steps,
               tolerances: Tolerances = Tolerances()) -> dict:
    """The float32 gate (pass/fail) and, when the compared configuration computes
    differently, its figures against their noise floor (recorded, not gated). Probes run
    in subprocesses; failures are recorded, not raised."""
    directory.mkdir(parents=True, exist_ok=True)
    probes, errors = _probes(probe_config(config), directory, steps)
    if errors:
        return {"passed": False, "steps": steps, "tolerances": asdict(tolerances),
                "error": "; ".join(f"{fw}: {e}" for fw, e in errors.items()),
                **{k: None for k in GATED}, "params_max_abs_diff_after_steps": None,
                "failed": ["probe"]}
    record = compare_probes(probes["tf"], probes["torch"], steps, tolerances)
    if record["failed"] == ["params_rel_update_diff_after_steps"]:  # chaos, or a real gap?
        floor, errors = _probes(probe_config(config), directory / "floor", steps,
                                perturbed=("torch",), frameworks=("torch",))
        if not errors:
            record = judge_updates_against_noise(record, compare_probes(
                floor["torch-perturbed"], floor["torch"], steps, tolerances))
    if differs_numerically(config):
        record["timed_configuration"] = _timed_record(config, directory / "timed", steps,
                                                      tolerances)
    return record


def _probes(config: RunConfig, directory: Path, steps: int,
            perturbed: tuple[str, ...] = (),
            frameworks: tuple[str, ...] = FRAMEWORKS) -> tuple[dict, dict]:
    """Each of `frameworks`' probe of `config` (and a 1-ulp-perturbed one for `perturbed`)."""
    probes, errors = {}, {}
    jobs = [(fw, False) for fw in frameworks] + [(fw, True) for fw in perturbed]

    def probe(framework: str, perturb: bool, name: str):
        return runner.run_probe(config.replace(framework=framework, out=str(directory / name)),
                                directory / f"{name}.npz", steps, perturb)
    names = [f"{fw}-perturbed" if perturb else fw for fw, perturb in jobs]
    # Untimed, and mostly process start-up: two at a time
    done = runner.concurrently([lambda fw=fw, p=p, n=n: probe(fw, p, n)
                                for (fw, p), n in zip(jobs, names)])
    for name, (code, error) in zip(names, done):
        path = directory / f"{name}.npz"
        if code != 0 or not path.exists():
            errors[name] = error or f"exit code {code}"
            continue
        with np.load(path) as z:
            probes[name] = {k: z[k] for k in z.files}
    return probes, errors


def _timed_record(config: RunConfig, directory: Path, steps: int,
                  tolerances: Tolerances) -> dict:
    """The timed configuration's TF-vs-PyTorch figures, its noise floor, and the verdict."""
    timed = timed_config(config)
    described = {"precision": timed.precision, "tf32": timed.tf32, "compile": timed.compile,
                 "cuda_graphs": timed.cuda_graphs, "replicas_probed": 1}
    probes, errors = _probes(timed, directory, steps, perturbed=("torch",))
    if errors:
        return {"configuration": described,
                "error": "; ".join(f"{fw}: {e}" for fw, e in errors.items())}
    versus = compare_probes(probes["tf"], probes["torch"], steps, tolerances)
    noise = compare_probes(probes["torch-perturbed"], probes["torch"], steps, tolerances)
    limits = asdict(tolerances)
    within = {k: versus[k] <= max(NOISE_FACTOR * noise[k], limits[k]) for k in GATED}
    return {"configuration": described,
            "figures": {k: versus[k] for k in GATED},
            "noise_floor": {k: noise[k] for k in GATED},
            "within_noise": within, "agrees": all(within.values()),
            "method": f"the compared precision/TF32/compiler on one replica; noise floor: "
                      f"PyTorch against itself with every initial weight moved by 1 ulp; "
                      f"agreement: each figure <= max({NOISE_FACTOR:g} x the floor, the "
                      f"float32 tolerance). Recorded, not gated: the float32 check gates."}
