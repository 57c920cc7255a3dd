"""The parity check: the two builds are the same experiment, to float32 tolerance.

Each framework, in its own subprocess, builds the model with the shared initial weights,
takes the data plan's first batch in float32 (TF32 off), and writes its logits, loss and
gradients, then its weights after a few SGD steps on the plan's first batches (see
`parity_probe` in tf_impl/train.py and torch_impl/train.py). Here the two are compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from compare import runner, specs
from compare.config import RunConfig


@dataclass(frozen=True)
class Tolerances:
    """Float32 limits. Both builds sum the same products in different orders (oneDNN,
    cuDNN and MKL pick different algorithms), so activations agree to ~1e-5 relative.
    Where such an activation sits within ~1e-5 of zero, a ReLU can pass it in one build
    and zero it in the other: a few gradient entries then differ outright, and BatchNorm's
    backward spreads that over the channel. Measured on CPU: lenet gradients agree to
    7e-7 (relative L2), resnet9's to 4e-3; a real mistake (a wrong layout, flatten order,
    update rule or BatchNorm convention) gives differences of order 1e-1 to 1."""

    logits_max_abs_diff: float = 1e-3  # logits are O(1); measured: lenet 5e-8, resnet9 1e-6
    loss_abs_diff: float = 1e-4  # measured: lenet 0, resnet9 2e-7
    grad_max_rel_diff: float = 1e-2  # max over weights of |g_tf - g_torch|_2 / |g_torch|_2
    params_max_abs_diff_after_steps: float = 1e-3  # trainable weights are O(0.05); measured 7e-9 / 4e-4


def compare_probes(tf_probe: dict[str, np.ndarray], torch_probe: dict[str, np.ndarray],
                   steps: int, tolerances: Tolerances = Tolerances()) -> dict:
    """The parity record for two probes (as written by each framework's parity_probe)."""
    grad_names = sorted(k[len("grad/"):] for k in torch_probe if k.startswith("grad/"))
    param_names = sorted(k[len("param/"):] for k in torch_probe if k.startswith("param/"))
    missing = [n for n in grad_names if f"grad/{n}" not in tf_probe]
    if missing:
        raise ValueError(f"the TensorFlow probe lacks gradients for {', '.join(missing)}")
    per_layer = {}
    for name in grad_names:  # relative L2: robust to the odd ReLU-mask flip (see Tolerances)
        a, b = tf_probe[f"grad/{name}"], torch_probe[f"grad/{name}"]
        per_layer[name] = float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-12))
    params = {n: float(np.abs(tf_probe[f"param/{n}"] - torch_probe[f"param/{n}"]).max())
              for n in param_names}
    trainable = {n: v for n, v in params.items() if specs.trainable(n)}
    # BatchNorm running statistics are reported, not gated: torch keeps the unbiased batch
    # variance, Keras the biased one (a factor n/(n-1) per update, by convention).
    running = {n: v for n, v in params.items() if not specs.trainable(n)}
    figures = {
        "logits_max_abs_diff": float(np.abs(tf_probe["logits"] - torch_probe["logits"]).max()),
        "loss_abs_diff": float(abs(float(tf_probe["loss"]) - float(torch_probe["loss"]))),
        "grad_max_rel_diff": max(per_layer.values()),
        "params_max_abs_diff_after_steps": max(trainable.values()),
    }
    limits = asdict(tolerances)
    failed = [k for k, v in figures.items() if not v <= limits[k]]  # NaN fails too
    return {"passed": not failed, **figures, "steps": steps, "tolerances": limits,
            "failed": failed, "loss": {"tf": float(tf_probe["loss"]), "torch": float(torch_probe["loss"])},
            "grad_rel_diff_per_layer": per_layer, "param_abs_diff_per_weight": trainable,
            "bn_running_stats_max_abs_diff": max(running.values()) if running else None,
            "method": "float32, TF32 off, shared initial weights, the data plan's first batch; "
                      f"then {steps} SGD steps on the plan's first batches"}


def run_parity(config: RunConfig, directory: Path, steps: int = 5,
               tolerances: Tolerances = Tolerances()) -> dict:
    """Run both probes in subprocesses and compare them; failures are recorded, not raised."""
    directory.mkdir(parents=True, exist_ok=True)
    probes, errors = {}, {}
    for framework in ("tf", "torch"):
        path = directory / f"{framework}.npz"
        code, error = runner.run_probe(config.replace(framework=framework, out=str(directory / framework)),
                                       path, steps)
        if code != 0 or not path.exists():
            errors[framework] = error or f"exit code {code}"
            continue
        with np.load(path) as z:
            probes[framework] = {k: z[k] for k in z.files}
    if errors:
        return {"passed": False, "steps": steps, "tolerances": asdict(tolerances),
                "error": "; ".join(f"{fw}: {e}" for fw, e in errors.items()),
                "logits_max_abs_diff": None, "loss_abs_diff": None, "grad_max_rel_diff": None,
                "params_max_abs_diff_after_steps": None, "failed": ["probe"]}
    return compare_probes(probes["tf"], probes["torch"], steps, tolerances)
