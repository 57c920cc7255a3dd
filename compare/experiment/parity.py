"""The parity check: the two builds are the same experiment, decided by meaning.

Each framework, in its own subprocess, builds the model with the shared initial weights in
float64 on the CPU, takes the data plan's first batch and writes its logits, loss and
gradients, then its weights and BatchNorm running statistics after a few SGD steps on the
plan's first batches (see `parity_probe` in tf_impl/train.py and torch_impl/train.py). Here
the two are compared. In float64 both frameworks' rounding is ~1e-16 of a value and stays
below 1e-9 through the deepest built-in network, while a semantic difference (a layout, an
epsilon, a momentum, a padding side) moves a figure by 1e-4 or more: the gates sit between
(FLOAT64, measured in docs/measurement.md). Where a framework has no float64 kernel for a
layer, the check falls back to float32 and its noise-floor rule, naming the layer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from compare.experiment import precision_rule, specs
from compare.experiment.config import PipelineConfig, RunConfig
from compare.experiment.parity_record import (
    AFTER_STEPS,
    GATED,
    Figure,
    ParityRecord,
    TimedDrift,
    figure,
)
from compare.experiment.recipe import learning_rate


@dataclass(frozen=True)
class Tolerances:
    """Float32 limits (the fallback where float64 cannot run), measured (CPU, oneDNN vs
    MKL-DNN) and justified; FLOAT64 below holds the float64 gate's.

    Both builds sum the same products in different orders and with different algorithms
    (Winograd and direct convolutions), so activations agree to ~1e-5 relative. Where an
    activation sits that close to zero, a ReLU passes it in one build and zeroes it in the
    other, so a few gradient entries differ outright: resnet9's step-0 gradients agree to
    ~4e-3 (relative L2), lenet's to 7e-7.

    After a few SGD steps, early ResNet training amplifies that rounding: PyTorch against
    itself with weights perturbed by 1e-7 differs by 1e-4 of the update after 3 steps, and
    TF vs PyTorch by 2-10% of the update at lr 0.05 (batch 16-128); lenet by 5e-6. That
    amplification grows with the learning rate, so the probe's steps use the run's
    schedule scaled to PROBE_PEAK_LR, and are gated on the difference of the weight
    *updates* relative to the update, over all trainable weights; the max absolute
    weight difference is recorded beside it. In float32 deep networks still amplify
    rounding past these limits on some batches (mobilenetv2 at batch 128: gradients 7.6e-2):
    the reason the gate is float64.
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
    # max over BatchNorm running statistics of |r_tf - r_torch|_2 / |r_torch|_2, PyTorch's
    # running variance mapped to Keras' biased convention (running_stats_in_biased_form);
    # a momentum of 0.01 against 0.1 gives ~0.9
    bn_running_stats_max_rel_diff: float = 0.05


# The float64 gate. Rounding on the built-in networks, at the probe's batch and at their
# recipes' (docs/measurement.md, benchmarks/parity_float64.py), stays within 2e-12 for logits
# and 3e-14 for the loss, and relative to their norms within 5e-10 for gradients, 2e-12 for
# updates and 1e-10 for running statistics (mobilenetv2 the largest: a BatchNorm scale's
# gradient and a running mean are sums that cancel to near zero). The smallest semantic slips
# measured (benchmarks/parity_slips.py on every network, docs/measurement.md) move a figure by
# 0.15 (BatchNorm epsilon 1e-3 for 1e-5: gradients) to 0.9 (momentum 0.01 for 0.1: running
# statistics). Each limit sits over 1000x above the one and 1e5x below the other.
FLOAT64 = Tolerances(logits_max_abs_diff=1e-8, loss_abs_diff=1e-9, grad_max_rel_diff=1e-6,
                     params_rel_update_diff_after_steps=1e-6,
                     bn_running_stats_max_rel_diff=1e-6)

# The probe's SGD steps follow the run's learning-rate schedule scaled to this peak. A
# difference in the update rule depends on the schedule's shape (ratios between steps),
# weight decay and Nesterov, not on the scale; the amplification of float32 rounding by
# early training grows with the scale. At this peak the steps stay where the comparison
# sees the update rule.
PROBE_PEAK_LR = 1e-3


def probe_learning_rate(config: RunConfig, step: int, total_steps: int) -> float:
    """The learning rate of the probe's step `step`: the run's schedule, scaled to PROBE_PEAK_LR."""
    return learning_rate(config, step, total_steps) * min(1.0, PROBE_PEAK_LR / config.lr)


# Images in the probe's batches: the run's batch size, at most this. Every slip the gate exists
# to catch (an epsilon, a padding side, a layout, a momentum form) moves its figure by the same
# orders of magnitude on 8 images as on 16 or on the recipe's 128 or 512, while float64 forward
# and backward passes of a recipe's batch took minutes a network on a 2-core CPU
# (benchmarks/parity_float64.py, docs/benchmarks.md and docs/measurement.md); BatchNorm still
# sees 8 images times the positions of each channel.
PROBE_BATCH = 8

# Images in the timed configuration's probe: the run's batch size, at most this. Its figures
# are judged against a noise floor (one probe with every weight moved by 1 ulp), a single
# draw of the rounding noise, which a batch of 8 images averages too little: ResNet-9's loss
# in bfloat16 then drifted 4.4x its floor (tests/test_parity.py), within it on 16 images.
TIMED_PROBE_BATCH = 16


def probe_batch(config: RunConfig, cap: int | None = None) -> int:
    """The probe's batch size for a run of `config`: its own, at most `cap` (PROBE_BATCH)."""
    return min(config.batch_size, PROBE_BATCH if cap is None else cap)


def probe_config(config: RunConfig, compute: str = precision_rule.PROBE_ONLY) -> RunConfig:
    """The run's config as the gate's probe runs it: float64 (`compute` fp32: the fallback)
    on the CPU, TF32 off, one replica (its stages share the CPU under --parallel model),
    whole batches of at most PROBE_BATCH images (micro-batches change BatchNorm's batch
    statistics), no compiler, shared initial weights, the naive pipeline, dropout off (one
    function, not two frameworks' random masks)."""
    return config.replace(precision=compute, device="cpu", devices=_probe_devices(config),
                          batch_size=probe_batch(config),
                          tf32=False, compile=False, cuda_graphs=False, shared_init=True,
                          micro_batches=1, pipeline=PipelineConfig.preset("naive"),
                          dropout=False)


def timed_config(config: RunConfig) -> RunConfig:
    """The run's config as the timed comparison runs it (precision, TF32, compiler), probed
    in one process on one replica, on batches of at most TIMED_PROBE_BATCH images, with the
    shared initial weights and the naive pipeline, dropout off."""
    return config.replace(devices=_probe_devices(config),
                          batch_size=probe_batch(config, TIMED_PROBE_BATCH), shared_init=True,
                          micro_batches=1, pipeline=PipelineConfig.preset("naive"),
                          dropout=False)


def _probe_devices(config: RunConfig) -> int:
    """One replica: one device under --parallel data, the stages' devices under model."""
    return 1 if config.parallel == "data" else config.devices


def compute_epsilon(manifest: dict) -> float | None:
    """The machine epsilon of the precision a trainer computes in; None for float32."""
    policy = str(manifest.get("precision_policy"))
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


def first_float64_failure(spec: specs.ModelSpec,
                          run_alone: Callable[[specs.LayerSpec, tuple[int, ...]], None]
                          ) -> str | None:
    """The first layer of `spec` that `run_alone(layer, its per-image input shape)` fails on
    (a twin's forward and backward of the layer alone, in float64 on the CPU), as
    "NAME (KIND): the framework's line"; None when every layer runs."""
    for layer in specs.walk(spec.layers):
        try:
            run_alone(layer, specs.input_shape_of(spec, layer.name))
        except Exception as exc:  # noqa: BLE001 - whatever the framework's kernels say
            said = str(exc).strip().splitlines()
            return (f"{layer.name} ({type(layer).__name__}): {exc.__class__.__name__}: "
                    f"{said[0] if said else ''}")[:300]
    return None


RUNNING_VARIANCE = ("BatchNorm's running variance: PyTorch averages the unbiased batch "
                    "variance (x n/(n-1)), Keras the biased one. PyTorch's is mapped exactly "
                    "to the biased form before comparing: r_b = d r0 + (n-1)/n (r - d r0), "
                    "d = (1-m)^steps, n the values per channel in a batch")


def running_stats_in_biased_form(probe: dict[str, np.ndarray], steps: int) -> dict:
    """The probe's BatchNorm running statistics, its running variance in Keras' biased
    convention: PyTorch's after `steps` updates from r0 with momentum m is
    d r0 + n/(n-1) sum_k m (1-m)^(steps-k) v_k (d = (1-m)^steps, v_k the biased batch
    variances), Keras' d r0 + sum_k ... v_k, so r_b = d r0 + (n-1)/n (r - d r0) exactly."""
    stats = {k[len("param/"):]: v for k, v in probe.items()
             if k.startswith("param/") and not specs.trainable(k[len("param/"):])}
    if not bool(probe.get("running_variance_unbiased")):
        return stats
    for name, running in list(stats.items()):
        layer, part = name.rsplit(".", 1)
        if part == "running_var" and f"bn/{layer}" in probe:
            momentum, n = probe[f"bn/{layer}"]
            start = probe[f"init/{name}"].astype(np.float64)
            decay = (1.0 - momentum) ** steps
            stats[name] = decay * start + (n - 1) / n * (running - decay * start)
    return stats


GRADIENT_FLOOR = 1e-5  # of all gradients' L2 norm: below it a layer's gradient is rounding

# Float32 figures within NOISE_FACTOR times their noise floor (PyTorch against itself with
# every initial weight moved by one ulp) are rounding. Measured on CPU, bfloat16, 3 steps
# (tests/test_parity.py): TF vs PyTorch came to 0.07-0.94x the floor over the four figures
# for lenet, 0.33-0.67x for resnet9; 2x leaves room for other kernels.
NOISE_FACTOR = 2.0


def judge_updates_against_noise(record: ParityRecord, noise: ParityRecord) -> ParityRecord:
    """The float32 record whose only failures come after the probe's steps (the update, the
    running statistics), judged against those figures' noise floors (`noise`: compare_probes
    of PyTorch moved by one ulp against PyTorch). Deep networks on a small batch amplify
    rounding chaotically over a few steps (mobilenetv2, batch 8: PyTorch against itself 0.21
    of the update, TF against PyTorch 0.25) while logits, loss and every gradient agree:
    within NOISE_FACTOR x the floor, they pass, and the record says on what grounds."""
    if not record["failed"] or not set(record["failed"]) <= set(AFTER_STEPS):
        return record
    failed: list[str] = [k for k in AFTER_STEPS if k in record["failed"]
                         and not figure(record, k) <= NOISE_FACTOR * figure(noise, k)]
    update, floor = (figure(r, "params_rel_update_diff_after_steps") for r in (record, noise))
    return {**record, "passed": not failed, "failed": failed,
            "update_noise_floor": floor,
            "noise_floors": {k: figure(noise, k) for k in AFTER_STEPS},
            "update_gate": (f"{update:.3g} of the update, "
                            f"{'within' if update <= NOISE_FACTOR * floor else 'over'} "
                            f"{NOISE_FACTOR:g} x its noise floor {floor:.3g} (PyTorch against "
                            f"itself, weights moved by 1 ulp)")}


def relative_differences(values: dict[str, np.ndarray],
                         reference: dict[str, np.ndarray]) -> dict[str, float]:
    """Each tensor against the reference's: relative L2, robust to the odd ReLU-mask flip
    (see Tolerances). A gradient the network makes zero by construction (a bias or BatchNorm
    shift before a BatchNorm: measured 1e-8..1e-6 against all gradients' 34 in mobilenetv2)
    is rounding of a zero in both builds; against its own norm it would differ by ~100%. So
    each difference is taken relative to the reference's norm, or to GRADIENT_FLOOR of all
    the reference's tensors' norm where that is larger."""
    total = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in reference.values())))
    return {name: float(np.linalg.norm(values[name].astype(np.float64) - b)
                        / max(float(np.linalg.norm(b)), GRADIENT_FLOOR * total, 1e-300))
            for name, b in reference.items()}


gradient_differences = relative_differences  # port's proof and the tests call it so


def _float64(probe: dict[str, np.ndarray]) -> bool:
    return probe["logits"].dtype == np.float64


def compare_probes(tf_probe: dict[str, np.ndarray], torch_probe: dict[str, np.ndarray],
                   steps: int, tolerances: Tolerances | None = None) -> ParityRecord:
    """The parity record for two probes (as written by each framework's parity_probe), gated
    by `tolerances` (default: FLOAT64 for float64 probes, else the float32 Tolerances())."""
    wide = _float64(tf_probe) and _float64(torch_probe)
    tolerances = tolerances or (FLOAT64 if wide else Tolerances())
    grad_names = sorted(k[len("grad/"):] for k in torch_probe if k.startswith("grad/"))
    param_names = sorted(k[len("param/"):] for k in torch_probe if k.startswith("param/"))
    missing = [n for n in grad_names if f"grad/{n}" not in tf_probe]
    if missing:
        raise ValueError(f"the TensorFlow probe lacks gradients for {', '.join(missing)}")
    per_layer = relative_differences({n: tf_probe[f"grad/{n}"] for n in grad_names},
                                     {n: torch_probe[f"grad/{n}"] for n in grad_names})
    params = {n: float(np.abs(tf_probe[f"param/{n}"].astype(np.float64)
                              - torch_probe[f"param/{n}"]).max()) for n in param_names}
    trainable = [n for n in param_names if specs.trainable(n)]
    running = relative_differences(running_stats_in_biased_form(tf_probe, steps),
                                   running_stats_in_biased_form(torch_probe, steps))
    # Updates, not weights: a probe started from perturbed weights (the noise floor) must
    # not count its perturbation as a difference. With equal starts the two are the same.
    difference = np.sqrt(sum(np.sum(((tf_probe[f"param/{n}"] - tf_probe[f"init/{n}"])
                                     - (torch_probe[f"param/{n}"] - torch_probe[f"init/{n}"]))
                                    .astype(np.float64) ** 2) for n in trainable))
    update = np.sqrt(sum(np.sum((torch_probe[f"param/{n}"] - torch_probe[f"init/{n}"])
                                .astype(np.float64) ** 2) for n in trainable))
    figures: dict[Figure, float] = {
        "logits_max_abs_diff": float(np.abs(tf_probe["logits"].astype(np.float64)
                                            - torch_probe["logits"]).max()),
        "loss_abs_diff": float(abs(float(tf_probe["loss"]) - float(torch_probe["loss"]))),
        "grad_max_rel_diff": max(per_layer.values()),
        "params_rel_update_diff_after_steps": float(difference / max(update, 1e-300)),
        "bn_running_stats_max_rel_diff": max(running.values()) if running else 0.0,
    }
    limits = asdict(tolerances)
    failed: list[str] = [k for k in GATED if not figures[k] <= limits[k]]  # NaN fails too
    compute = "float64" if wide else "float32"
    return {
        "passed": not failed,
        "logits_max_abs_diff": figures["logits_max_abs_diff"],
        "loss_abs_diff": figures["loss_abs_diff"],
        "grad_max_rel_diff": figures["grad_max_rel_diff"],
        "params_rel_update_diff_after_steps": figures["params_rel_update_diff_after_steps"],
        "bn_running_stats_max_rel_diff": figures["bn_running_stats_max_rel_diff"],
        "precision": compute,
        "params_max_abs_diff_after_steps": max(params[n] for n in trainable),
        "steps": steps, "tolerances": limits, "failed": failed,
        "loss": {"tf": float(tf_probe["loss"]), "torch": float(torch_probe["loss"])},
        "grad_rel_diff_per_layer": per_layer,
        "bn_running_stats_rel_diff": running,
        "param_abs_diff_per_weight": {n: params[n] for n in trainable},
        "conventions": [RUNNING_VARIANCE] if running else [],
        "method": f"{compute} on the CPU, TF32 off, shared initial weights, the data plan's "
                  f"first batch ({len(torch_probe['logits'])} images): logits, loss, every "
                  f"gradient; then {steps} SGD steps on the plan's first batches, the run's "
                  f"learning-rate schedule scaled to peak {PROBE_PEAK_LR}: the weight "
                  f"updates and BatchNorm's running statistics"}


def for_runs_beside(record: ParityRecord | None, runs: str) -> ParityRecord | None:
    """The comparison's parity record, for a report of its `runs` other than the matched ones
    (each framework at its defaults; at its best): the check ran once, on the matched runs'
    settings. Its float64 gate checks the model, the loss and the update, which the compile
    state and the other settings a run changes leave as they are; its timed configuration is
    the matched runs'. `runs` in the record says whose report holds it."""
    return None if record is None else {**record, "runs": runs}


def describe(record: ParityRecord) -> str:
    """One line for the terminal: the verdict and every gated figure, and beside it the
    float32 drift of the timed configuration against its noise floor."""
    if record.get("error"):
        return f"parity check could not run: {record['error']}"
    verdict = "passed" if record["passed"] else "FAILED"
    fallback = (f" (float32: {record['float64_unsupported']})"
                if record.get("float64_unsupported") else "")
    line = (f"parity {verdict} in {record.get('precision', 'float32')}{fallback}: logits "
            f"{record['logits_max_abs_diff']:.2e}, loss {record['loss_abs_diff']:.2e}, "
            f"gradients {record['grad_max_rel_diff']:.2e} (rel), updates after "
            f"{record['steps']} steps {record['params_rel_update_diff_after_steps']:.2e} (rel), "
            f"running statistics {record.get('bn_running_stats_max_rel_diff') or 0:.2e} (rel)")
    timed = record.get("timed_configuration")
    if timed:
        line += "\n" + describe_drift(timed)
    return line


def describe_drift(timed: TimedDrift) -> str:
    """The timed configuration's TF-vs-PyTorch drift against its noise floor, in one line."""
    where = timed.get("configuration", {}).get("device", "")
    if timed.get("error"):
        return f"  the timed configuration's drift ({where}) not measured: {timed['error']}"
    key: Figure = "params_rel_update_diff_after_steps"
    floor = timed["noise_floor"][key]
    return (f"  timed configuration ({where}), measured, not gated: updates differ by "
            f"{timed['figures'][key]:.2e} (rel) against a noise floor of {floor:.2e}, "
            f"gradients {timed['figures']['grad_max_rel_diff']:.2e}: "
            f"{'within' if timed['agrees'] else 'OUTSIDE'} the frameworks' own drift")
