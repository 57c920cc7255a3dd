"""PyTorch trainer: DataLoader, AMP, channels_last, DDP; the loop and clock are compare.loop's.

Run by the CLI as `python -m torch_impl.train CONFIG.json`.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from compare import init, loop, parity, results, specs, worker
from compare.config import RunConfig, update_rule
from compare.data import Dataset
from compare.errors import DeviceError
from compare.loop import DeviceChoice
from torch_impl import data as torch_data
from torch_impl.model import build_model, export_gradients, export_weights, load_weights

FRAMEWORK = "torch"
TF32_DEFAULT = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}




def select_device(config: RunConfig) -> DeviceChoice:
    """Chosen once, from --device and --devices; GPU when present under `auto`."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if config.device == "gpu" and gpus == 0:
        raise DeviceError("--device gpu: PyTorch sees no CUDA GPU (torch.cuda.is_available() is False); "
                          "use --device cpu or auto")
    if config.device != "cpu" and gpus:
        if config.devices > gpus:
            raise DeviceError(f"--devices {config.devices}: PyTorch sees only {gpus} GPU(s)")
        names = tuple(f"cuda:{i}" for i in range(config.devices))
        label = ", ".join(torch.cuda.get_device_name(i) for i in range(config.devices))
        return DeviceChoice("gpu", names, f"GPU: {label}")
    names = tuple("cpu" for _ in range(config.devices))
    why = "no CUDA GPU found" if config.device == "auto" else "--device cpu"
    return DeviceChoice("cpu", names, f"CPU ({why}), {config.devices} process(es)")


def configure_numerics(config: RunConfig, choice: DeviceChoice) -> dict:
    """Precision, TF32, cuDNN autotune and determinism; returns what was set."""
    torch.backends.cuda.matmul.allow_tf32 = config.tf32
    torch.backends.cudnn.allow_tf32 = config.tf32
    torch.backends.cudnn.benchmark = config.cudnn_benchmark and choice.kind == "gpu"
    if config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    if config.precision == "mixed":
        dtype = torch.float16 if choice.kind == "gpu" else torch.bfloat16
        policy = f"autocast {str(dtype).replace('torch.', '')}" + (" + GradScaler" if dtype == torch.float16 else "")
    else:
        dtype, policy = None, "float32"
    return {"autocast_dtype": dtype, "policy": policy}


class TorchTrainer:
    """One replica's model, optimizer and loaders (rank `rank` of `world_size`)."""

    framework = FRAMEWORK

    def __init__(self, config: RunConfig, dataset: Dataset, choice: DeviceChoice,
                 rank: int = 0, world_size: int = 1):
        self.config, self.choice = config, choice
        self.rank, self.world_size = rank, world_size
        self.replicas = world_size
        self.is_chief = rank == 0
        self.device = torch.device(choice.names[rank])
        self.on_gpu = choice.kind == "gpu"
        if self.on_gpu:
            torch.cuda.set_device(self.device)
        self.numerics = configure_numerics(config, choice)
        torch.manual_seed(config.seed)
        self.spec = specs.get_spec(config.model, len(dataset.classes))
        self.initial = init.initial_weights(self.spec, config.seed) if config.shared_init else None
        self.model = build_model(self.spec, config.bn_momentum, config.bn_epsilon)
        if self.initial is not None:
            load_weights(self.model, self.initial)
        self.memory_format = torch.channels_last if self.on_gpu else torch.contiguous_format
        self.model.to(self.device, memory_format=self.memory_format)
        self.train_model = torch.compile(self.model) if config.compile else self.model
        if world_size > 1:
            self.train_model = torch.nn.parallel.DistributedDataParallel(
                self.train_model, device_ids=[self.device.index] if self.on_gpu else None)
        self.optimizer = make_optimizer(self.model, config)
        dtype = self.numerics["autocast_dtype"]
        self.scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
        self.non_blocking = config.pipeline.non_blocking and self.on_gpu
        mean, std = dataset.mean, dataset.std
        self.loader = torch_data.train_pipeline(dataset.train_x, dataset.train_y, mean, std, config,
                                              self.on_gpu, rank, world_size, self.device)
        self.test_loader = torch_data.test_pipeline(dataset.test_x, dataset.test_y, mean, std, config,
                                                  self.on_gpu)
        self.steps_per_epoch = len(self.loader.batch_sampler)
        self.epoch_events = None
        self.gpu_indices = [torch.device(n).index for n in choice.names] if self.on_gpu else None
        self.device_name = torch.cuda.get_device_name(self.device) if self.on_gpu else None

    def autocast(self):
        dtype = self.numerics["autocast_dtype"]
        if dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _to_device(self, batch):
        images, labels = batch
        images = images.to(self.device, non_blocking=self.non_blocking, memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=self.non_blocking)

    def batches(self, epoch: int):
        self.loader.batch_sampler.set_epoch(epoch)
        self.train_model.train()  # evaluate() switched to eval mode
        if self.on_gpu:  # CUDA events bracket the epoch's device work
            self.epoch_events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.epoch_events[0].record()
        return iter(self.loader)

    def train_step(self, batch, lr: float) -> torch.Tensor:
        images, labels = self._to_device(batch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with self.autocast():
            logits = self.train_model(images)
        # The loss in float32, as Keras computes it from its float32 logits layer.
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.config.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def losses(self, pending: list[torch.Tensor]) -> list[float]:
        stacked = torch.stack(pending).float()
        if self.world_size > 1:  # one collective per window: the global-batch mean
            dist.all_reduce(stacked)
            stacked /= self.world_size
        return stacked.cpu().tolist()

    def sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def epoch_device_time(self) -> float | None:
        """Seconds of device time for the epoch's training, from CUDA events; None on CPU."""
        if self.epoch_events is None:
            return None
        self.epoch_events[1].record()
        self.epoch_events[1].synchronize()
        return self.epoch_events[0].elapsed_time(self.epoch_events[1]) / 1000.0

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        self.model.eval()
        total_loss = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.int64)
        count = 0
        for batch in self.test_loader:
            images, labels = self._to_device(batch)
            with self.autocast():
                logits = self.model(images)
            total_loss += F.cross_entropy(logits.float(), labels, reduction="sum")
            correct += (logits.argmax(dim=1) == labels).sum()
            count += len(labels)
        return total_loss.item() / count, correct.item() / count

    def peak_memory(self) -> tuple[int | None, str | None]:
        if self.on_gpu:
            return int(torch.cuda.max_memory_allocated(self.device)), "torch.cuda.max_memory_allocated, rank 0"
        return None, "CPU run: no device allocator to read (host peak RSS is in the summary)"

    def save_model(self, directory: Path) -> str:
        state = {"spec": self.spec.name, "num_classes": self.spec.num_classes,
                 "state_dict": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                 "config": self.config.to_dict()}
        results.write_atomic(Path(directory) / "model.pt", lambda f: torch.save(state, f), mode="wb")
        return "model.pt"

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, torch.OutOfMemoryError)

    def close(self) -> None:
        self.loader = self.test_loader = None

    # ---- parity probe

    def gradients(self, batch) -> tuple[np.ndarray, float, dict[str, np.ndarray]]:
        """Logits, loss and canonical-layout gradients for one batch, no update."""
        images, labels = self._to_device(batch)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(images)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.config.label_smoothing)
        loss.backward()
        grads = export_gradients(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        return logits.detach().float().cpu().numpy(), float(loss.detach()), grads

    def reset_weights(self) -> None:
        load_weights(self.model, self.initial)

    def weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model)


def make_optimizer(model: torch.nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    """SGD in PyTorch's form (the one both frameworks use): g += wd * p; v = mu * v + g;
    p -= lr * (g + mu * v if nesterov else v)."""
    return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                           nesterov=config.nesterov, weight_decay=config.weight_decay)


def fairness_manifest(config: RunConfig, trainer: TorchTrainer) -> dict:
    """Every setting DESIGN.md lists, as this framework ran it."""
    return {
        "precision_policy": trainer.numerics["policy"],
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32},
        "cudnn_autotune": torch.backends.cudnn.benchmark,
        "deterministic": config.deterministic,
        "loss_scaling": "dynamic (torch.amp.GradScaler)" if trainer.scaler.is_enabled() else None,
        "bn_momentum": {"torch_convention": config.bn_momentum, "as_set": config.bn_momentum},
        "bn_epsilon": config.bn_epsilon,
        "bn_running_variance": "unbiased (n/(n-1)) batch variance",
        "bn_statistics": "per replica" if trainer.replicas > 1 else "single replica",
        "update_rule": update_rule(config),
        "optimizer_implementation": "torch.optim.SGD (dampening 0)",
        "weight_decay_form": f"L2 {config.weight_decay} added to the gradient before momentum",
        "loss": f"mean cross-entropy, label smoothing {config.label_smoothing}",
        "lr_schedule": f"{config.schedule}, peak {config.lr}, set every step",
        "global_batch": config.batch_size, "per_replica_batch": config.per_replica_batch,
        "replicas": trainer.replicas,
        "distribution": "DistributedDataParallel (gloo)" if trainer.replicas > 1 and not trainer.on_gpu
        else "DistributedDataParallel (nccl)" if trainer.replicas > 1 else "single process",
        "compile": "torch.compile" if config.compile else "off",
        "channels_last": trainer.memory_format == torch.channels_last,
        "pipeline": torch_data.pipeline_settings(config, trainer.on_gpu),
        "init_source": f"compare.init numpy weights, seed {config.seed}" if config.shared_init
        else "PyTorch default initialisers",
        "data_plan_seed": config.seed,
        "device_kind": trainer.choice.kind,
        "device": trainer.choice.description,
    }


def describe_environment() -> dict:
    """What PyTorch sees: versions, devices, CUDA/cuDNN, TF32 defaults, precision support."""
    cuda = torch.cuda.is_available()
    gpus = [{"name": torch.cuda.get_device_name(i),
             "memory_bytes": torch.cuda.get_device_properties(i).total_memory,
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
            for i in range(torch.cuda.device_count())] if cuda else []
    return {"framework": FRAMEWORK, "torch": torch.__version__,
            "torchvision": _version("torchvision"), "python": platform.python_version(),
            "platform": platform.platform(), "cpu_threads": torch.get_num_threads(),
            "cuda_available": cuda, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None,
            "gpus": gpus, "tf32_default": TF32_DEFAULT,
            "bf16_supported": torch.cuda.is_bf16_supported() if cuda else True,
            "mixed_precision": "float16 autocast + GradScaler" if cuda else "bfloat16 autocast (CPU)"}


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def parity_probe(config: RunConfig, dataset: Dataset, path: Path, steps: int = 3) -> None:
    """This framework's side of the parity check (compare.parity.write_probe)."""
    config = parity.probe_config(config)
    parity.write_probe(TorchTrainer(config, dataset, select_device(config)), config, path, steps)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _replica(rank: int, config: RunConfig, world_size: int, port: int) -> None:
    """One DDP process (spawned); exits with the loop's code."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    choice = select_device(config)
    backend = "nccl" if choice.kind == "gpu" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    if choice.kind == "cpu":  # share the cores instead of oversubscribing them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        from compare import data
        code = _train_replica(config, data.config_dataset(config), choice, rank, world_size)
    finally:
        dist.destroy_process_group()
    if code:
        sys.exit(code)


def _train_replica(config: RunConfig, dataset: Dataset, choice: DeviceChoice, rank: int,
                   world_size: int) -> int:
    trainer = TorchTrainer(config, dataset, choice, rank, world_size)
    environment = {**describe_environment(), "device_used": choice.description}
    return loop.train_and_record(trainer, config, trainer.spec, environment,
                                 fairness_manifest(config, trainer), dataset.info())


def train(config: RunConfig, dataset: Dataset) -> int:
    """Train as `config` says; several replicas run as DDP processes. Returns an exit code."""
    choice = select_device(config)
    loop.check_split(config)
    if not config.quiet:
        print(f"torch: training on {choice.description}", flush=True)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun
        world_size = int(os.environ["WORLD_SIZE"])
        dist.init_process_group("nccl" if choice.kind == "gpu" else "gloo")
        try:
            return _train_replica(config.replace(devices=world_size), dataset, choice,
                                  int(os.environ["RANK"]), world_size)
        finally:
            dist.destroy_process_group()
    if config.devices == 1:
        return _train_replica(config, dataset, choice, 0, 1)
    import torch.multiprocessing as mp
    try:
        mp.spawn(_replica, args=(config, config.devices, _free_port()), nprocs=config.devices)
    except mp.ProcessExitedException as exc:
        return exc.exit_code if exc.exit_code and exc.exit_code > 0 else 1
    return 0


if __name__ == "__main__":
    sys.exit(worker.main(sys.modules[__name__]))
