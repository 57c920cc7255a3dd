"""The parity check: the two builds are the same experiment, to float32 tolerance.

Each framework, in its own subprocess, builds the model with the shared initial weights,
takes the data plan's first batch in float32 (TF32 off), and writes its logits, loss and
gradients, then its weights after a few SGD steps on the plan's first batches (see
`parity_probe` in tf_impl/train.py and torch_impl/train.py). Here the two are compared.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from compare import files
from compare.experiment import precision, specs
from compare.experiment.config import (
    PipelineConfig,
    RunConfig,
    learning_rate,
)
from compare.run.interface import ProbeTrainer


@dataclass(frozen=True)
class Tolerances:
    """Float32 limits, measured (CPU, oneDNN vs MKL-DNN) and justified.

    Both builds sum the same products in different orders and with different algorithms
    (Winograd and direct convolutions), so activations agree to ~1e-5 relative. Where an
    activation sits that close to zero, a ReLU passes it in one build and zeroes it in the
    other, so a few gradient entries differ outright: resnet9's step-0 gradients agree to
    ~4e-3 (relative L2), lenet's to 7e-7. In float64 resnet9's agree to float32 output
    rounding (4e-8), so nothing systematic hides in that gap.

    After a few SGD steps, early ResNet training amplifies that rounding: PyTorch against
    itself with weights perturbed by 1e-7 differs by 1e-4 of the update after 3 steps, and
    TF vs PyTorch by 2-10% of the update at lr 0.05 (batch 16-128); lenet by 5e-6. That
    amplification grows with the learning rate, so the probe's steps use the run's
    schedule scaled to PROBE_PEAK_LR, and are gated on the difference of the weight
    *updates* relative to the update, over all trainable weights; the max absolute
    weight difference is recorded beside it.

    What the gates catch: a wrong conv/dense layout, flatten order or loss gives logit or
    gradient differences of order 0.1-1; a momentum form that mishandles a changing
    learning rate gives update differences of ~30%. The update formula itself is also
    tested exactly on lenet in the test suite, where float noise is 1e-6.
    """

    logits_max_abs_diff: float = 1e-3  # logits are O(1); measured: lenet 5e-8, resnet9 1e-6
    loss_abs_diff: float = 1e-4  # measured: lenet 0, resnet9 2e-7
    # max over weights of |g_tf - g_torch|_2 / |g_torch|_2; measured: resnet9 4e-3,
    # mobilenetv2 (batch 8: depthwise weights summed over few positions, BatchNorm over few
    # values) 1.9e-2; a wrong layout gives 0.1-1
    grad_max_rel_diff: float = 5e-2
    # |dW_tf - dW_torch|_2 / |dW_torch|_2; measured: lenet 5e-6, resnet9 2e-3, and 0.3 for
    # Keras' momentum form under a learning-rate ramp (tests/test_parity.py)
    params_rel_update_diff_after_steps: float = 0.05


# The probe's SGD steps follow the run's learning-rate schedule scaled to this peak. A
# difference in the update rule depends on the schedule's shape (ratios between steps),
# weight decay and Nesterov, not on the scale; the amplification of float32 rounding by
# early training grows with the scale. At this peak the steps stay where the comparison
# sees the update rule.
PROBE_PEAK_LR = 1e-3


def probe_learning_rate(config: RunConfig, step: int, total_steps: int) -> float:
    """The learning rate of the probe's step `step`: the run's schedule, scaled to PROBE_PEAK_LR."""
    return learning_rate(config, step, total_steps) * min(1.0, PROBE_PEAK_LR / config.lr)


def probe_config(config: RunConfig) -> RunConfig:
    """The run's config as the probe runs it: float32, TF32 off, one replica (its stages on
    their devices under --parallel model), whole batches (micro-batches change BatchNorm's
    batch statistics), no compiler, shared initial weights, the naive pipeline."""
    return config.replace(precision="fp32", devices=_probe_devices(config), tf32=False,
                          compile=False, cuda_graphs=False, shared_init=True, micro_batches=1,
                          pipeline=PipelineConfig.preset("naive"))


def timed_config(config: RunConfig) -> RunConfig:
    """The run's config as the timed comparison runs it (precision, TF32, compiler), probed
    in one process on one replica with the shared initial weights and the naive pipeline."""
    return config.replace(devices=_probe_devices(config), shared_init=True, micro_batches=1,
                          pipeline=PipelineConfig.preset("naive"))


def _probe_devices(config: RunConfig) -> int:
    """One replica: one device under --parallel data, the stages' devices under model."""
    return 1 if config.parallel == "data" else config.devices


def differs_numerically(config: RunConfig) -> bool:
    """Whether the timed configuration computes differently from the float32 gate's."""
    mixed = precision.expected(config.precision, config.device,
                               config.model).precision != "fp32"
    return mixed or config.tf32 or config.compile or config.cuda_graphs


def compute_epsilon(manifest: dict) -> float | None:
    """The machine epsilon of the precision a trainer computes in; None for float32."""
    policy = str(manifest.get("precision_policy", ""))
    if "bfloat16" in policy:
        return 2.0 ** -8  # bfloat16 keeps 8 significand bits (7 stored)
    if "float16" in policy:
        return 2.0 ** -11  # float16 keeps 11 significand bits (10 stored)
    return None


def one_ulp_up(weights: np.ndarray, epsilon: float | None) -> np.ndarray:
    """Every weight moved away from zero by one ulp: of float32 (epsilon None), else of the
    compute precision (relative step `epsilon`)."""
    if epsilon is None:
        return np.nextafter(weights, np.copysign(np.inf, weights)).astype(np.float32)
    return (weights * np.float32(1.0 + epsilon)).astype(np.float32)


def write_probe(trainer: ProbeTrainer, config: RunConfig, path: Path, steps: int,
                perturb: bool = False) -> None:
    """Drive a framework's trainer: logits, loss and gradients on the plan's first batch,
    then the weights after `steps` SGD steps on the plan's first batches; saved as NPZ in
    the canonical layout. `perturb` first moves every initial weight by one ulp of the
    precision the run computes in (float32, or bfloat16/float16 under mixed precision,
    where a float32 ulp would vanish in the cast), to measure how far rounding alone
    carries the same framework."""
    if perturb:
        trainer.initial = {name: one_ulp_up(w, compute_epsilon(trainer.manifest()))
                           for name, w in trainer.initial.items()}
        trainer.reset_weights()
    # the plan's batches in order, into the next epoch's where a tiny training set has
    # fewer batches than the probe takes steps
    batches = (batch for epoch in itertools.count() for batch in trainer.batches(epoch))
    first = next(batches)
    logits, loss, grads = trainer.gradients(first)
    trainer.reset_weights()  # the probe's forward moved BatchNorm statistics
    total = trainer.steps_per_epoch * config.epochs
    for step, batch in zip(range(steps), itertools.chain([first], batches)):
        trainer.train_step(batch, probe_learning_rate(config, step, total))
    out = {"logits": logits, "loss": np.float64(loss)}
    out.update({f"grad/{k}": v for k, v in grads.items()})
    out.update({f"param/{k}": v for k, v in trainer.weights().items()})
    out.update({f"init/{k}": v for k, v in trainer.initial.items()})
    files.write_atomic(path, lambda f: np.savez(f, **out), mode="wb")


GATED = ("logits_max_abs_diff", "loss_abs_diff", "grad_max_rel_diff",
         "params_rel_update_diff_after_steps")
GRADIENT_FLOOR = 1e-5  # of all gradients' L2 norm: below it a layer's gradient is rounding

# Figures within NOISE_FACTOR times their noise floor (PyTorch against itself with every
# initial weight moved by one ulp) are rounding. Measured on CPU, bfloat16, 3 steps
# (tests/test_parity.py): TF vs PyTorch came to 0.07-0.94x the floor over the four figures
# for lenet, 0.33-0.67x for resnet9; 2x leaves room for other kernels.
NOISE_FACTOR = 2.0


def judge_updates_against_noise(record: dict, noise: dict) -> dict:
    """The float32 record whose only failure is the update after the probe's steps, judged
    against that figure's noise floor (`noise`: compare_probes of PyTorch moved by one ulp
    against PyTorch). Deep networks on a small batch amplify rounding chaotically over a few
    steps (mobilenetv2, batch 8: PyTorch against itself 0.21 of the update, TF against
    PyTorch 0.25) while logits, loss and every gradient agree: within NOISE_FACTOR x the
    floor, the update passes, and the record says on what grounds."""
    key = "params_rel_update_diff_after_steps"
    if record["failed"] != [key]:
        return record
    floor = noise[key]
    within = record[key] <= NOISE_FACTOR * floor
    return {**record, "passed": within, "failed": [] if within else [key],
            "update_noise_floor": floor,
            "update_gate": (f"{record[key]:.3g} of the update, within {NOISE_FACTOR:g} x its "
                            f"noise floor {floor:.3g} (PyTorch against itself, weights "
                            f"moved by 1 ulp)" if within else
                            f"{record[key]:.3g} of the update, over {NOISE_FACTOR:g} x its "
                            f"noise floor {floor:.3g}")}


def gradient_differences(gradients: dict[str, np.ndarray],
                         reference: dict[str, np.ndarray]) -> dict[str, float]:
    """Each weight's gradient against the reference's: relative L2, robust to the odd
    ReLU-mask flip (see Tolerances). A gradient the network makes zero by construction (a
    bias or BatchNorm shift before a BatchNorm: measured 1e-8..1e-6 against all gradients'
    34 in mobilenetv2) is rounding of a zero in both builds; against its own norm it would
    differ by ~100%. So each difference is taken relative to the reference's norm, or to
    GRADIENT_FLOOR of all the reference's gradients' norm where that is larger."""
    total = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in reference.values())))
    return {name: float(np.linalg.norm(gradients[name] - b)
                        / max(float(np.linalg.norm(b)), GRADIENT_FLOOR * total, 1e-12))
            for name, b in reference.items()}


def compare_probes(tf_probe: dict[str, np.ndarray], torch_probe: dict[str, np.ndarray],
                   steps: int, tolerances: Tolerances = Tolerances()) -> dict:
    """The parity record for two probes (as written by each framework's parity_probe)."""
    grad_names = sorted(k[len("grad/"):] for k in torch_probe if k.startswith("grad/"))
    param_names = sorted(k[len("param/"):] for k in torch_probe if k.startswith("param/"))
    missing = [n for n in grad_names if f"grad/{n}" not in tf_probe]
    if missing:
        raise ValueError(f"the TensorFlow probe lacks gradients for {', '.join(missing)}")
    per_layer = gradient_differences({n: tf_probe[f"grad/{n}"] for n in grad_names},
                                     {n: torch_probe[f"grad/{n}"] for n in grad_names})
    params = {n: float(np.abs(tf_probe[f"param/{n}"] - torch_probe[f"param/{n}"]).max())
              for n in param_names}
    trainable = [n for n in param_names if specs.trainable(n)]
    # BatchNorm running statistics are reported, not gated: torch keeps the unbiased batch
    # variance, Keras the biased one (a factor n/(n-1) per update, by convention).
    running = [n for n in param_names if not specs.trainable(n)]
    # Updates, not weights: a probe started from perturbed weights (the noise floor) must
    # not count its perturbation as a difference. With equal starts the two are the same.
    difference = np.sqrt(sum(np.sum(((tf_probe[f"param/{n}"] - tf_probe[f"init/{n}"])
                                     - (torch_probe[f"param/{n}"] - torch_probe[f"init/{n}"]))
                                    ** 2) for n in trainable))
    update = np.sqrt(sum(np.sum((torch_probe[f"param/{n}"] - torch_probe[f"init/{n}"]) ** 2)
                         for n in trainable))
    figures = {
        "logits_max_abs_diff": float(np.abs(tf_probe["logits"] - torch_probe["logits"]).max()),
        "loss_abs_diff": float(abs(float(tf_probe["loss"]) - float(torch_probe["loss"]))),
        "grad_max_rel_diff": max(per_layer.values()),
        "params_rel_update_diff_after_steps": float(difference / max(update, 1e-12)),
    }
    limits = asdict(tolerances)
    failed = [k for k, v in figures.items() if not v <= limits[k]]  # NaN fails too
    return {"passed": not failed, **figures,
            "params_max_abs_diff_after_steps": max(params[n] for n in trainable),
            "bn_running_stats_max_abs_diff": max(params[n] for n in running) if running else None,
            "steps": steps, "tolerances": limits, "failed": failed,
            "loss": {"tf": float(tf_probe["loss"]), "torch": float(torch_probe["loss"])},
            "grad_rel_diff_per_layer": per_layer,
            "param_abs_diff_per_weight": {n: params[n] for n in trainable},
            "method": "float32, TF32 off, shared initial weights, the data plan's first batch; "
                      f"then {steps} SGD steps on the plan's first batches, "
                      "the run's learning-rate "
                      f"schedule scaled to peak {PROBE_PEAK_LR}"}


def describe(record: dict) -> str:
    """One line for the terminal: the verdict and every gated figure."""
    if record.get("error"):
        return f"parity: FAILED ({record['error']})"
    verdict = "passed" if record["passed"] else "FAILED"
    return (f"parity {verdict}: logits {record['logits_max_abs_diff']:.2e}, "
            f"loss {record['loss_abs_diff']:.2e}, gradients {record['grad_max_rel_diff']:.2e} "
            f"(rel), updates after {record['steps']} steps "
            f"{record['params_rel_update_diff_after_steps']:.2e} (rel), weights "
            f"{record['params_max_abs_diff_after_steps']:.2e}")
