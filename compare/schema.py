"""What each file the tool writes holds, declared once: the run result (its epochs, summary,
fairness manifest and environment) and the comparison summary; their versions, the
migration of older files, and the one-line refusal of a file that cannot be used. Readers
and writers go through `read_result`, `read_summary` and the TypedDicts here; where the files
live is compare.files's.
"""

import dataclasses
import math  # no `from __future__ import annotations`: TypedDict reads NotRequired from them
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from compare import figures, files
from compare.experiment.frameworks import FRAMEWORKS
from compare.experiment.parity_record import ParityRecord
from compare.experiment.porting import PortProof
from compare.records import ClockWindow, OwnLoopRecord, RecordError, RunSummary

RESULT_VERSION = 2  # 2: fairness.strategy and fairness.precision are records
SUMMARY_VERSION = 4  # 4: own_loops; 3: intervals as low/high (v1: ci95_low/high), order_note
OWN_LOOP_VERSION = 2  # 2: windows, steady_step_time_ms
STATUSES = ("running", "completed", "interrupted", "diverged", "failed")


class SchemaError(files.Unreadable):
    """A result or summary that does not follow its schema (one line, naming the file)."""


class GpuEpoch(TypedDict):
    """An epoch's NVML figures over its training part (compare.machine.gpu_metrics)."""

    energy_j: float | None
    samples: NotRequired[int]
    interval_s: NotRequired[float]  # s between samples
    gpus: NotRequired[int]
    utilisation_pct_mean: NotRequired[float | None]  # per GPU
    memory_used_bytes_max: NotRequired[float | None]
    power_w_mean: NotRequired[float | None]
    energy_source: NotRequired[str]
    note: NotRequired[str]  # why a figure is missing (no NVML, no counter)
    unavailable: NotRequired[dict[str, str]]  # field: NVML's reason


class Window(ClockWindow):
    """One synchronised timing window of a run (a row of windows.csv)."""

    first_step: int
    input_wait_s: float


class Session(TypedDict):
    """One process that trained a run (a resumed run has one more per resume)."""

    session: int
    pid: int
    host: str
    started_at: str
    first_epoch: int  # 1-based, the first it trained


class RecordsSoFar(TypedDict):
    """What a resumed run restores of its records (the chief's, kept with its checkpoint)."""

    epochs: list["Epoch"]
    steps: list[list[Any]]  # [global step, epoch, lr, loss], one per step
    windows: list[Window]
    sessions: list[Session]
    started_at: str
    files: dict[str, str]  # the run's files, by role


class Checkpoint(RecordsSoFar):
    """checkpoint.json: where a run stopped, its weights' state file and its records."""

    schema_version: int
    framework: str
    next_epoch: int  # 0-based index of the epoch to train next
    state: str  # the Trainer's state file, relative to the run's directory
    config: dict[str, Any]  # the RunConfig, as JSON


class GpuDevice(TypedDict):
    index: int
    name: str | None
    memory_bytes: int | None
    power_limit_w: float | None


class Nvml(TypedDict):
    """GPUs and driver as NVML reports them (compare.machine.environment.nvml_devices)."""

    available: bool
    reason: NotRequired[str]  # without NVML: why
    driver: NotRequired[str | None]
    cuda_driver_version: NotRequired[str | None]  # the newest CUDA the driver runs, "12.4"
    devices: NotRequired[list[GpuDevice]]
    unavailable: NotRequired[dict[str, str]]  # field: NVML's reason


class Machine(TypedDict):
    """The host as the tool's own process sees it (compare.machine.environment.machine)."""

    python: str
    platform: str
    processor: str
    cpu_count: int | None
    memory_bytes: int | None
    nvml: Nvml


class MachineIdentity(TypedDict):
    """Where a comparison ran (compare.report.labels.machine_of)."""

    id: str  # device | host
    device: str
    host: str
    named: str  # the device as a reader knows it


class Epoch(TypedDict):
    """One epoch of a run (compare.run.loop), figures as compare.schema.MEASUREMENT says."""

    epoch: int  # 1-based
    train_loss: float
    test_loss: float
    test_accuracy: float  # fraction
    train_time_s: float
    eval_time_s: float
    images_per_s: float
    images: NotRequired[int]
    steps: NotRequired[int]
    input_wait_s: NotRequired[float]
    device_time_s: NotRequired[float | None]  # CUDA events (PyTorch on a GPU)
    peak_device_memory_bytes: NotRequired[int | None]
    host_rss_bytes: NotRequired[int | None]
    gpu: NotRequired[GpuEpoch]
    session: NotRequired[int]  # the process that trained it (a resume starts another)
    processes: NotRequired[list[dict]]  # each process's own clock (several processes)
    loss_scale: NotRequired[float | None]  # the dynamic loss scale at the epoch's end (float16)


class FrameworkGpu(TypedDict):
    name: str | None
    capability: str | None  # "9.0"
    memory_bytes: NotRequired[int]


class FrameworkEnvironment(TypedDict):
    """What a framework's process sees (its describe_environment; `cnncompare env`)."""

    framework: str
    python: NotRequired[str]
    platform: NotRequired[str]
    error: NotRequired[str]  # the process could not say (not installed, failed)
    cuda_available: NotRequired[bool]
    cuda: NotRequired[str | None]  # the CUDA it was built with
    cudnn: NotRequired[str | int | None]
    gpus: NotRequired[list[FrameworkGpu]]
    gpu_libraries: NotRequired[dict[str, str | None] | None]  # TensorFlow seeing no GPU
    cuda_visible_devices: NotRequired[str | None]
    tf32_default: NotRequired[bool | dict[str, bool]]
    mixed_precision: NotRequired[str]  # what its mixed precision is here, in words
    tensorflow: NotRequired[str]
    keras: NotRequired[str]
    torch: NotRequired[str]
    torchvision: NotRequired[str | None]
    cpu_threads: NotRequired[int]
    bf16_supported: NotRequired[bool]


class Environment(FrameworkEnvironment):
    """What the framework's process saw (its describe_environment) and trained on."""

    device_used: str  # the framework's own words
    hardware: NotRequired[dict]  # compare.machine.devices.hardware: how reports group runs


class Result(TypedDict):
    """result.json: one run of one framework."""

    schema_version: int
    framework: str  # "tf" or "torch"
    model: dict  # the spec described: name, parameters, FLOPs
    config: dict  # the RunConfig
    environment: Environment
    fairness: dict  # the manifest: MANIFEST's fields
    measurement: dict  # MEASUREMENT, as the run used it
    epochs: list[Epoch]
    summary: RunSummary  # a record (compare.records); its JSON form in the file
    data: NotRequired[dict]
    files: NotRequired[dict]  # the run's other files, by role
    started_at: NotRequired[str]
    finished_at: NotRequired[str]
    updated_at: NotRequired[str]
    sessions: NotRequired[list[Session]]
    error: NotRequired[str | None]
    exit: NotRequired[dict]  # how a process that wrote no end ended (compare.process.runner)
    peer_failures: NotRequired[dict]
    profile: NotRequired[dict]  # the phase split (compare.run.phases)
    compilation: NotRequired[dict]  # what compiled of the step, read from the compiler
    # set by the report's reader (compare.report.builder.load_runs), not in the file: where
    # the result was read, and why it could not be (then it is a placeholder, not a run)
    path: NotRequired[str]
    unreadable: NotRequired[str]


class Summary(TypedDict):
    """summary.json: one comparison (compare.report.aggregate)."""

    schema_version: int
    frameworks: dict  # per framework: runs, completed, each figure over the seeds
    ratios: dict  # TF / PyTorch, paired by seed
    accuracy_difference: dict
    environment: dict
    fairness: dict  # per framework, the manifest of its first run
    config: dict
    seeds: NotRequired[list[int]]
    parity: NotRequired[ParityRecord | None]
    accuracy_equivalence: NotRequired[dict]
    runs: NotRequired[list[dict]]
    not_run: NotRequired[list[dict]]
    skipped: NotRequired[list[dict]]
    machine: NotRequired[MachineIdentity]
    model: NotRequired[dict | None]
    data: NotRequired[dict | None]
    measurement: NotRequired[dict]
    verdict: NotRequired[list[str]]
    own_loops: NotRequired[dict | None]  # per framework: the shared loop against its own
    # per framework: compiled or eager, and whether that is its own default
    # (compare.experiment.compile_state.CompileState.to_dict)
    compile_states: NotRequired[dict]
    defaults: NotRequired[dict | None]  # each framework at its own defaults (report.defaults)
    best: NotRequired[dict | None]  # each framework at its own best (report.best)
    order_note: NotRequired[str | None]
    # every run took turns, window by window, with the other framework's run of its seed
    # (compare.process.turns)
    side_by_side: NotRequired[bool]
    command: NotRequired[str | None]
    created_at: NotRequired[str]


class PortRecord(TypedDict):
    """port.json: a network ported by `cnncompare port` (compare.process.port) and the proof
    that its twin computes what the source does (compare.experiment.porting.compare_outputs)."""

    schema_version: int
    source: dict  # framework, reference, kwargs, parameters (as the source framework counts)
    twin: dict  # framework, parameters (as the twin's framework builds the spec)
    spec: dict  # file, name, input_shape, num_classes, parameters, layers (spec layer count)
    weights: dict  # file, sha256, tensors
    proof: PortProof  # passed, figures, tolerances, per-layer gradient differences, method
    dropout: dict  # rates: each Dropout layer's rate as read; proof: how the proof ran them
    compare_command: str  # the comparison of the two from the source's weights
    created_at: str


PORT_VERSION = 1


@dataclass(frozen=True)
class ManifestField:
    """A setting the fairness manifest records: `comparable` ones must agree between the
    frameworks (the report flags those that differ); the others name each framework's own
    machinery and are expected to read differently."""

    comparable: bool
    meaning: str


_C, _I = True, False
MANIFEST: dict[str, ManifestField] = {
    "precision": ManifestField(_C, "the precision resolved on the device, and why"),
    "precision_policy": ManifestField(_I, "the framework's mixed-precision mechanism"),
    "tf32": ManifestField(_C, "TensorFloat-32 for matmuls and convolutions"),
    "cudnn_autotune": ManifestField(_C, "cuDNN picks its algorithms by timing them"),
    "deterministic": ManifestField(_C, "the frameworks' determinism flags"),
    "loss_scaling": ManifestField(_C, "dynamic loss scaling under float16"),
    "bn_momentum": ManifestField(_C, "BatchNorm momentum, compared in PyTorch's convention"),
    "bn_epsilon": ManifestField(_C, "BatchNorm epsilon"),
    "dropout": ManifestField(_C, "the network's dropout and stochastic depth (masks: each "
                                 "framework's own)"),
    "bn_running_variance": ManifestField(_C, "how the running variance is updated"),
    "bn_statistics": ManifestField(_C, "BatchNorm statistics per replica or global"),
    "update_rule": ManifestField(_C, "the SGD update both apply (PyTorch's form)"),
    "optimizer_implementation": ManifestField(_I, "the optimizer's code"),
    "weight_decay_form": ManifestField(_C, "how weight decay enters the update"),
    "loss": ManifestField(_C, "the loss"),
    "lr_schedule": ManifestField(_C, "the learning-rate schedule"),
    "global_batch": ManifestField(_C, "images per step over all replicas"),
    "per_replica_batch": ManifestField(_C, "images per step per replica"),
    "replicas": ManifestField(_C, "model copies in sync"),
    "processes": ManifestField(_C, "operating-system processes training together"),
    "launcher": ManifestField(_I, "what started the processes"),
    "nodes": ManifestField(_C, "machines"),
    "distribution": ManifestField(_I, "the distribution machinery"),
    "parallel": ManifestField(_C, "data (replicas) or model (stages), the cut, micro-batches"),
    "placement": ManifestField(_I, "each stage's device, in the framework's words"),
    "weights_on": ManifestField(_I, "the devices holding each replica's (or stage's) weights, "
                                    "read from the framework's variables"),
    "strategy": ManifestField(_I, "the distribution wrapper --strategy chose, and why"),
    "steps_per_call": ManifestField(_C, "training steps per call of the step function"),
    "steps_per_call_from": ManifestField(_C, "where steps_per_call came from"),
    "step_batching": ManifestField(_I, "how the framework runs a call's steps"),
    "input_wait": ManifestField(_I, "where the input wait is timed"),
    "compile": ManifestField(_C, "the compiler (XLA, torch.compile)"),
    "compile_state": ManifestField(_I, "compiled or eager, and whether that is the framework's "
                                       "own default on this device (Keras' jit_compile=\"auto\"; "
                                       "PyTorch eager)"),
    "compile_cache": ManifestField(_C, "the compilers' caches on disk at the run's start: "
                                       "cold (empty, the run's own) or warm (filled by an "
                                       "untimed run of the same configuration)"),
    "channels_last": ManifestField(_C, "the memory format of activations"),
    "pipeline": ManifestField(_I, "the input pipeline the framework built"),
    "loss_scale_check": ManifestField(_I, "the framework's own overflow check (no setting)"),
    "batchnorm_kernel": ManifestField(_I, "the framework's own BatchNorm kernels (no setting)"),
    "init_source": ManifestField(_C, "where the initial weights came from"),
    "data_plan_seed": ManifestField(_C, "the seed of the shared data plan"),
    "device_kind": ManifestField(_C, "gpu or cpu"),
    "device": ManifestField(_I, "the device in the framework's words"),
    "host_allocator": ManifestField(_C, "the C library's malloc in the framework's process: who "
                                        "set its thresholds, and to what"),
    "interpreter": ManifestField(_I, "the Python the framework's process ran in, and what "
                                     "chose it ($CNNCOMPARE_TF_PYTHON, `cnncompare setup gpu`, "
                                     "cnncompare's own)"),
    "cuda_libraries": ManifestField(_I, "the CUDA runtime, cuBLAS, cuDNN and NCCL files the "
                                        "framework's process had loaded when the run ended, and "
                                        "which cuDNN the TensorFlow bundle chose "
                                        "(CNNCOMPARE_TF_CUDNN), where set"),
}


# How each figure and each epoch's record is measured; copied into every result so a report
# can quote it. The reported figures' definitions are declared with them (compare.figures).
MEASUREMENT = {
    **figures.DEFINITIONS,
    "test_loss": "mean cross-entropy on the test set, without label smoothing",
    "train_loss": "mean of the epoch's per-step training losses (with label smoothing)",
}


def validate_result(result: dict[str, Any], where: str = "result") -> Result:
    """`result`, its summary read into a record (compare.records.RunSummary), if it follows
    Result; else SchemaError saying what is wrong."""
    _require(result, Result, where)
    if result["framework"] not in FRAMEWORKS:
        raise SchemaError(f"{where}: unknown framework {result['framework']!r}")
    for i, epoch in enumerate(result["epochs"]):
        _require(epoch, Epoch, f"{where}: epoch {i + 1}")
        _fraction(epoch["test_accuracy"], f"{where}: epoch {i + 1} test_accuracy")
    summary = result["summary"]
    if not isinstance(summary, RunSummary):
        try:
            summary = RunSummary.from_dict(summary, f"{where}: summary")
        except RecordError as exc:
            raise SchemaError(str(exc)) from None
    if summary.status not in STATUSES:
        raise SchemaError(f"{where}: summary.status {summary.status!r} is not one of "
                          f"{', '.join(STATUSES)}")
    for key, value in (("final_test_accuracy", summary.final_test_accuracy),
                       ("best_test_accuracy", summary.best_test_accuracy)):
        if value is not None:
            _fraction(value, f"{where}: summary.{key}")
    return cast(Result, {**result, "summary": summary})


def epoch_seconds(result: Result) -> list[float]:
    """Each epoch's training seconds, in order."""
    return [e["train_time_s"] for e in result["epochs"]]


def epoch_parts(result: Result) -> list[tuple[float, float, float]]:
    """Each epoch's (training, input wait within it, evaluation) seconds, in order."""
    return [(e["train_time_s"], e.get("input_wait_s", 0.0), e["eval_time_s"])
            for e in result["epochs"]]


def _require(record: Any, kind: type, where: str) -> None:
    if not isinstance(record, dict):
        raise SchemaError(f"{where}: not a JSON object")
    required: frozenset[str] = getattr(kind, "__required_keys__")  # a TypedDict's
    missing = [k for k in required if k not in record]
    if missing:
        raise SchemaError(f"{where} lacks {', '.join(sorted(missing))}")


def _fraction(value: Any, what: str) -> None:
    if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise SchemaError(f"{what} must be a fraction in [0, 1], got {value!r}")


def read_result(path: str | Path) -> Result:
    """A result file, migrated to RESULT_VERSION and validated; SchemaError (one line, naming
    the file) when it cannot be used."""
    try:
        data = files.read_json(path)
    except files.Unreadable as exc:
        raise SchemaError(str(exc)) from None
    return validate_result(migrate_result(data, path), str(path))


def migrate_result(data: dict[str, Any], path: str | Path = "result") -> dict[str, Any]:
    """An older result as RESULT_VERSION writes it; SchemaError for a version this
    cnncompare does not know (a newer one)."""
    version = data.get("schema_version")
    if version == RESULT_VERSION:
        return data
    if version != 1:
        raise SchemaError(f"{path}: result schema version {version!r}; this cnncompare reads "
                          f"versions 1 to {RESULT_VERSION}")
    for manifest in [data.get("fairness") or {}]:
        old = manifest.get("strategy")
        if isinstance(old, str):  # v1: TensorFlow's --strategy name, or "not applicable"
            distribution = str(manifest.get("distribution", ""))
            wrapped = distribution.startswith(("MirroredStrategy", "MultiWorker",
                                               "DistributedDataParallel"))
            wrapper = (None if not wrapped else "DistributedDataParallel"
                       if distribution.startswith("Distributed") else "MirroredStrategy")
            manifest["strategy"] = {"choice": old, "wrapper": wrapper,
                                    "reason": "recorded before --strategy applied to both"}
    return {**data, "schema_version": RESULT_VERSION}


def read_own_loop(path: str | Path) -> OwnLoopRecord:
    """An own-loop file as its record, validated; SchemaError (one line, naming the file)
    otherwise."""
    try:
        data = files.read_json(path)
    except files.Unreadable as exc:
        raise SchemaError(str(exc)) from None
    if data.get("schema_version") == 1:  # before the windows: its epochs' times alone
        data = {**data, "schema_version": OWN_LOOP_VERSION}
    if data.get("schema_version") != OWN_LOOP_VERSION:
        raise SchemaError(f"{path}: own-loop schema version {data.get('schema_version')!r}; "
                          f"this cnncompare reads versions 1 to {OWN_LOOP_VERSION}")
    try:
        return OwnLoopRecord.from_dict(data, str(path))
    except RecordError as exc:
        raise SchemaError(str(exc)) from None


def read_summary(path: str | Path) -> list[Summary]:
    """The comparisons in a summary file (one) or a combined file (several), migrated to
    SUMMARY_VERSION; SchemaError (one line) when torn, of an unknown version, or lacking the
    figures."""
    try:
        data = files.read_json(path)
    except files.Unreadable as exc:
        raise SchemaError(str(exc)) from None
    summaries = data["groups"] if isinstance(data.get("groups"), list) else [data]
    return [migrate_summary(s, path) for s in summaries]


def read_summary_if_any(path: str | Path) -> Summary | None:
    """The comparison in a summary file, or None where there is none or it cannot be read
    (a comparison beside another, e.g. DIR/best, that the other's report quotes if it can)."""
    try:
        return read_summary(path)[0] if Path(path).exists() else None
    except SchemaError:
        return None


def migrate_summary(summary: dict[str, Any], path: str | Path = "summary") -> Summary:
    version = summary.get("schema_version")
    if version not in (1, 2, 3, SUMMARY_VERSION):
        raise SchemaError(f"{path}: summary schema version {version!r}; this cnncompare reads "
                          f"versions 1 to {SUMMARY_VERSION}")
    _require(summary, Summary, str(path))
    if version == 1:  # intervals were ci95_low/ci95_high
        for entry in _interval_entries(summary):
            if "ci95_low" in entry:
                entry.setdefault("low", entry.pop("ci95_low"))
                entry.setdefault("high", entry.pop("ci95_high", None))
    for key, empty in (("not_run", []), ("skipped", []), ("order_note", None)):
        summary.setdefault(key, empty)
    summary["schema_version"] = SUMMARY_VERSION
    return cast(Summary, summary)


def _interval_entries(summary: dict) -> list[dict]:
    entries = [e for e in (summary.get("ratios") or {}).values() if isinstance(e, dict)]
    entries += [summary.get("accuracy_difference") or {}]
    for fw in (summary.get("frameworks") or {}).values():
        entries += [e for e in fw.values() if isinstance(e, dict)]
    return entries


def mark_failed(path: str | Path, error: str, exit_record: dict[str, Any]) -> None:
    """Rewrite a result its trainer left 'running' as failed: the error, and how the process
    ended (`exit`: code, reason, the last lines of its log). Its epochs stay as written."""
    result = read_result(path)
    if result["summary"].status != "running":
        return
    failed = dataclasses.replace(result["summary"], status="failed")
    files.write_json(path, {**result, "summary": failed.to_dict(), "exit": exit_record,
                            "error": f"{result['error']}; {error}" if result.get("error")
                            else error})
