"""Where a PyTorch process trains and in what numerics: its device (CPU or a GPU per
process), the DDP process group it joins, autocast, TF32, cuDNN autotune and determinism,
and what PyTorch sees of the machine (`cnncompare env`, `doctor`)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from datetime import timedelta

import torch
import torch.distributed as dist

from compare.errors import DeviceError
from compare.experiment import precision_rule, strategy
from compare.experiment.config import RunConfig
from compare.machine import cluster, devices
from compare.run.interface import DeviceChoice, Numerics
from compare.schema import FrameworkEnvironment, FrameworkGpu

FRAMEWORK = "torch"
# After a failure, how long the chief waits for each other process to say why it stopped (s):
# a peer still blocked in a collective answers when that collective times out.
PEER_ANSWER_S = 15.0

TF32_DEFAULT = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                "cudnn": torch.backends.cudnn.allow_tf32}  # before we set them


def select_device(config: RunConfig) -> DeviceChoice:
    """Chosen once, from --device and --devices; the GPU when present under `auto`.

    Under torchrun (or the DDP processes `train` spawns) the process count comes from
    WORLD_SIZE, this process's rank from RANK and its GPU from LOCAL_RANK (compare.machine.cluster).
    """
    launched = cluster.launch(FRAMEWORK)
    processes, rank, local_rank = launched.processes, launched.rank, launched.local_rank
    machines = f" on {launched.nodes} machines" if launched.nodes > 1 else ""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if config.device == "gpu" and gpus == 0:
        raise DeviceError("--device gpu: PyTorch sees no CUDA GPU (torch.cuda.is_available() "
                          "is False); use --device cpu or auto")
    if config.device != "cpu" and gpus:
        shared = config.share_device  # every process, or every stage, on GPU 0
        asked = config.devices if config.parallel == "model" else launched.local_processes
        if asked > gpus and not shared:
            raise DeviceError(f"--devices {asked}: PyTorch sees only {gpus} GPU(s) "
                              f"(--share-device carves them from one)")
        gpu = 0 if shared else local_rank
        name = torch.cuda.get_device_name(gpu)
        names: tuple[str, ...] = (f"cuda:{gpu}",)
        if config.parallel == "model":  # one process, a GPU per stage
            names = tuple(f"cuda:{0 if shared else i}" for i in range(config.devices))
        count = config.devices if config.parallel == "model" else processes
        return DeviceChoice("gpu", names, name, devices.description(
            name, count, config.device, "", machines, shared), rank, processes,
            torch.cuda.get_device_capability(gpu), shared_chip=shared)
    stages = config.devices if config.parallel == "model" else 1
    return DeviceChoice("cpu", ("cpu",), None, devices.description(
        None, processes, config.device, "process(es)", machines), rank, processes,
        shared_chip=processes * stages > 1)


def make_strategy(config: RunConfig, choice: DeviceChoice) -> str | None:
    """PyTorch's counterpart of a tf.distribute strategy (--strategy, experiment.strategy): join
    the process group of the run's DDP processes (NCCL between GPUs, gloo between CPUs) from
    the environment torchrun or `train` set, each collective failing after
    config.collective_timeout_s when a peer does not answer; with `--strategy mirrored` on one
    replica, a group of this process alone, so that DDP wraps it as MirroredStrategy wraps
    TensorFlow's one device. The backend, or None without a wrapper."""
    resolved = strategy.resolve(config.strategy, FRAMEWORK, choice.processes, choice.processes)
    if not resolved.wrapped:
        return None
    # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): processes sharing a chip
    # all-reduce over gloo, which takes CUDA tensors
    backend = "nccl" if choice.on_gpu and not choice.shared_chip else "gloo"
    timeout = timedelta(seconds=config.collective_timeout_s)
    if choice.processes == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
        return backend
    dist.init_process_group(backend, timeout=timeout)
    if not choice.on_gpu:  # share the cores instead of oversubscribing them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // choice.processes))
    return backend


def configure_numerics(config: RunConfig, choice: DeviceChoice) -> Numerics:
    """Precision (compare.experiment.precision_rule), TF32, cuDNN autotune and determinism;
    returns what was set."""
    torch.backends.cuda.matmul.allow_tf32 = config.tf32
    torch.backends.cudnn.allow_tf32 = config.tf32
    torch.backends.cudnn.benchmark = config.cudnn_benchmark and choice.on_gpu
    if config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    # as the command resolved it before this process started, for the device it uses
    resolved = precision_rule.carried(config, choice.kind)
    dtype, policy = None, resolved.compute_type  # float32, or the parity probe's float64
    if resolved.precision == "mixed":
        dtype = getattr(torch, resolved.compute_type)  # float16 or bfloat16
        policy = f"autocast {str(dtype).replace('torch.', '')}"
        policy += " + GradScaler" if dtype == torch.float16 else ""
    # the weights', inputs', logits' and loss's dtype: float32 (autocast casts inside), or
    # float64 in the parity probe
    weights_dtype = torch.float64 if policy == "float64" else torch.float32
    return {"policy": policy, "loss_scaling": dtype == torch.float16, "autocast_dtype": dtype,
            "resolved": resolved, "dtype": weights_dtype}


def float64_missing(spec) -> str | None:
    """The first layer of `spec` (a specs.ModelSpec) PyTorch cannot compute in float64 on the
    CPU, each built alone and run forward and backward on two random inputs, as
    "NAME (KIND): PyTorch's line"; None when every layer runs."""
    from compare.experiment import parity, specs
    from torch_impl.model import SpecNet

    def run_alone(layer, shape):
        alone = SpecNet(specs.ModelSpec(spec.name, shape, spec.num_classes, (layer,)),
                        0.1, 1e-5).to(torch.float64)
        x = torch.randn((2, *shape), dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0)).requires_grad_()
        alone(x * 1.0).sum().backward()  # x * 1.0: a ReLU may work in place
    return parity.first_float64_failure(spec, run_alone)


def describe_environment() -> FrameworkEnvironment:
    """What PyTorch sees: versions, devices, CUDA/cuDNN, TF32 defaults, precision support."""
    cuda = torch.cuda.is_available()
    gpus: list[FrameworkGpu] = [
        {"name": torch.cuda.get_device_name(i),
         "memory_bytes": torch.cuda.get_device_properties(i).total_memory,
         "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
        for i in range(torch.cuda.device_count())] if cuda else []
    return {"framework": FRAMEWORK, "torch": torch.__version__,
            "torchvision": _version("torchvision"), "python": platform.python_version(),
            "platform": platform.platform(), "cpu_threads": torch.get_num_threads(),
            "cuda_available": cuda, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "gpus": gpus, "tf32_default": TF32_DEFAULT,
            "gpu_libraries": None,  # PyTorch's wheels load their own CUDA libraries
            # set: the GPUs this process may see (none when it names none that exists)
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "bf16_supported": torch.cuda.is_bf16_supported() if cuda else True,
            "mixed_precision": ("float16 autocast + GradScaler" if cuda
                                else "bfloat16 autocast (CPU)")}


def _pci_bus_ids(names: tuple[str, ...]) -> list[str]:
    """PCI bus ids of these CUDA devices, so NVML samples the right boards even under
    CUDA_VISIBLE_DEVICES."""
    ids = []
    for name in names:
        p = torch.cuda.get_device_properties(torch.device(name))
        # read by name: older builds lack them, and torch's stubs list only the bus id
        domain, bus, device = (getattr(p, f"pci_{part}_id", None)
                               for part in ("domain", "bus", "device"))
        ids.append(f"{domain:04x}:{bus:02x}:{device:02x}.0" if bus is not None else "")
    return ids


def _version(package: str) -> str | None:
    """An installed package's version from its metadata: importing torchvision only to read
    it took about 0.2 s in every training process."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def peer_failures(choice: DeviceChoice, exc: BaseException) -> dict[int, str] | None:
    """After a failure in a multi-process run: each process leaves its own error in the
    process group's key-value store (torchrun's, or rank 0's), which outlives a dead
    peer; the chief then reads every other rank's, and a rank that left none in
    PEER_ANSWER_S stopped answering (killed, or its machine lost)."""
    if choice.processes == 1 or not dist.is_initialized():
        return None
    try:
        store = dist.distributed_c10d._get_default_store()  # no public accessor
        store.set(f"cnncompare/failure/{choice.rank}",
                  f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        if not choice.is_chief:
            return None
        failures = {}
        for rank in range(1, choice.processes):
            key = f"cnncompare/failure/{rank}"
            try:
                store.wait([key], timedelta(seconds=PEER_ANSWER_S))
                failures[rank] = store.get(key).decode(errors="replace")[:300]
            except RuntimeError:  # DistStoreError on timeout is one
                failures[rank] = ("no answer: the process was killed or hung, or its "
                                  "machine was lost")
        return failures
    except (RuntimeError, AttributeError, ValueError):  # the store itself is gone
        return None
