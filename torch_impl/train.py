"""PyTorch trainer (DataLoader, AMP, channels_last, DDP): the compare.run.interface Trainer that
compare.run.loop's loop and clock drive; run by the CLI as `python -m torch_impl.train CONFIG`."""

from __future__ import annotations

import os
import socket
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from compare import files
from compare.errors import DeviceError
from compare.experiment import networks, stages, strategy, weights
from compare.experiment.config import RunConfig, data_replicas, steps_per_call
from compare.experiment.datasets import Dataset
from compare.machine import cluster, gpu_metrics
from compare.run import shutdown, worker
from compare.run.interface import DeviceChoice
from compare.run.phases import Capture, scope
from compare.run.schedule import Handover
from compare.run.validate import check_split
from torch_impl import data as torch_data
from torch_impl import device as trainer_device
from torch_impl import manifest as trainer_manifest
from torch_impl import own_loop  # noqa: F401 - the protocol's: compare.run.own_loop runs it
from torch_impl import profile as torch_profile
from torch_impl.device import (  # noqa: F401 - the protocol's: compare.run.worker looks here
    FRAMEWORK,
    _pci_bus_ids,
    describe_environment,
    float64_missing,
    select_device,
)
from torch_impl.model import build_model, export_gradients, export_weights, load_weights
from torch_impl.model import describe_model as describe_model  # noqa: PLC0414 - the protocol's
from torch_impl.optimizer import make_optimizer, restorer
from torch_impl.scalars import ScalarWriter

# After one DDP process ends with an error, the others get this long (s) to end on their own
# (an interrupted chief is writing its result) before torch.multiprocessing terminates them.
DDP_STOP_GRACE_S = 30.0
NOT_PROFILING = nullcontext()  # the step's phase ranges when no profiler records them


class Trainer:
    """This process's replica: model, optimizer and loaders (rank choice.rank of
    choice.processes)."""

    framework = FRAMEWORK
    unbiased_running_variance = True  # PyTorch averages the unbiased batch variance (parity)

    def __init__(self, config: RunConfig, dataset: Dataset, choice: DeviceChoice):
        self.config, self.choice = config, choice
        self.device = torch.device(choice.names[0])
        if choice.on_gpu:
            torch.cuda.set_device(self.device)
        self.numerics = trainer_device.configure_numerics(config, choice)
        torch.manual_seed(config.seed)
        self.replicas = choice.processes
        self.steps_per_call = steps_per_call(config, choice.on_gpu)
        self.spec = networks.run_spec(config, len(dataset.classes))
        self.initial = weights.for_run(self.spec, config)  # None: the framework's own
        # --parallel model: a device per stage (on a CPU the stages share the one device)
        self.placement = stages.placement(config, choice.names)
        self.model = build_model(self.spec, config.bn_momentum, config.bn_epsilon,
                                 self.placement)
        if self.initial is not None:
            load_weights(self.model, self.initial, self.spec)
        channels_last = choice.on_gpu if config.channels_last is None else config.channels_last
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.model.place(self.device, self.memory_format, self.numerics["dtype"])
        self.train_model: Any = self.model  # DDP and torch.compile wrap it below
        self.wrapper = strategy.resolve(config.strategy, FRAMEWORK, choice.processes,
                                        choice.processes)
        # A trainer made outside train() (the parity probe, tests) joins its own group
        self.owns_group = self.wrapper.wrapped and not dist.is_initialized()
        if self.owns_group:
            trainer_device.make_strategy(config, choice)
        if self.wrapper.wrapped:  # DDP over the process group make_strategy joined
            self.train_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if choice.on_gpu else None)
        if config.cuda_graphs and not choice.on_gpu:
            raise DeviceError("--cuda-graphs: CUDA graphs need a CUDA GPU; this run trains "
                              "on the CPU (use --no-cuda-graphs)")
        if config.compile or config.cuda_graphs:
            # compile(DDP(model)): the compiler sees DDP's bucketed all-reduce. Under
            # reduce-overhead it records the compiled forward and backward as CUDA graphs and
            # replays them: one launch each instead of one per kernel. The loss, the
            # optimizer and the loss scaler stay eager, on the graphs' outputs.
            self.train_model = torch.compile(
                self.train_model, mode="reduce-overhead" if config.cuda_graphs else None)
        # what compiled counts from here (dynamo's counters are the process's)
        self.compile_baseline = trainer_manifest.compile_baseline()
        self.optimizer = make_optimizer(self.model, config, choice)
        self.scaler = torch.amp.GradScaler(
            self.device.type, init_scale=config.loss_scale_initial,
            growth_interval=config.loss_scale_growth_interval,
            enabled=self.numerics["loss_scaling"])
        self._restore_optimizer = restorer(self.optimizer)  # to new, by reset()
        self._new_scaler = self.scaler.state_dict()  # its initial scale
        self.non_blocking = config.pipeline.non_blocking and choice.on_gpu
        self.train_batches = torch_data.train_pipeline(dataset, config, choice)
        self.test_batches = torch_data.test_pipeline(dataset, config, choice)
        self.steps_per_epoch = self.train_batches.steps_per_epoch
        self.epoch_events: tuple[torch.cuda.Event, torch.cuda.Event] | None = None
        self.profiling = False  # a profiler records: the step marks its phases
        # NVML samples every GPU of the run on this machine (DDP's other local processes',
        # every model-parallel stage's; one board if shared), as TF's samples its replicas'.
        local = tuple(dict.fromkeys(
            choice.names if config.parallel == "model" or choice.shared_chip else
            (f"cuda:{i}" for i in range(cluster.launch(FRAMEWORK).local_processes))))
        self.gpu_indices = (gpu_metrics.nvml_indices(_pci_bus_ids(local), local)
                            if choice.on_gpu else None)

    def batches(self, epoch: int):
        self.train_model.train()  # evaluate() switched to eval mode
        if self.choice.on_gpu:  # CUDA events bracket the epoch's device work
            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            events[0].record()
            self.epoch_events = events
        return self.train_batches.epoch(epoch)

    def train_steps(self, batches, lrs: list[float]) -> tuple[torch.Tensor, float]:
        """len(lrs) steps in one call, each on the loader's next batch: (their losses,
        stacked on the device; seconds next() blocked, on the host clock). Each step is
        launched from Python (with --cuda-graphs its forward and backward are graph replays)."""
        losses, waited = [], 0.0
        for lr in lrs:
            before = time.perf_counter()
            with self._phase("input"):
                batch = next(batches)  # blocks only when the loader has nothing ready
            waited += time.perf_counter() - before
            losses.append(self.train_step(batch, lr))
        return torch.stack(losses), waited

    def read_steps(self, pending: list[tuple[torch.Tensor, float]]) -> tuple[list[float], float]:
        return self.losses([losses for losses, _ in pending]), sum(w for _, w in pending)

    def train_step(self, batch, lr: float) -> torch.Tensor:
        with self._phase("host_to_device"):
            images, labels = self._to_device(batch)
        with self._phase("backward"):
            self.optimizer.zero_grad(set_to_none=True)
        parts = self.config.micro_batches
        loss = None
        # --micro-batches: each part's mean loss / parts, its gradients adding up to the
        # global-batch mean's (DDP all-reduces every part's; the update comes once)
        for part_images, part_labels in zip(images.chunk(parts), labels.chunk(parts)):
            with self._phase("forward"), self._autocast():
                logits = self.train_model(part_images)
                # The loss in float32 (the probe's float64), as Keras' from its logits layer.
                part = F.cross_entropy(logits.to(self.numerics["dtype"]), part_labels,
                                       label_smoothing=self.config.label_smoothing)
                part = part / parts if parts > 1 else part
            with self._phase("backward"):  # DDP all-reduces gradient buckets as they are ready
                self.scaler.scale(part).backward()
            loss = part.detach() if loss is None else loss + part.detach()
        with self._phase("update"):
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.scaler.step(self.optimizer)
            self.scaler.update()
        assert loss is not None  # a batch has one part at least
        return loss.detach()

    def _phase(self, name: str):
        """A profiler range marking one phase of the step (compare.run.phases) while a profiler
        records; else a shared no-op (a step's five cost 1 us together, one range several us)."""
        return torch.profiler.record_function(scope(name)) if self.profiling else NOT_PROFILING

    def losses(self, pending: list[torch.Tensor]) -> list[float]:
        stacked = torch.cat([loss.reshape(-1) for loss in pending]).float()
        if self.choice.processes > 1:  # one collective per window: the global-batch mean
            dist.all_reduce(stacked)
            stacked /= self.choice.processes
        return stacked.cpu().tolist()  # one transfer per window

    def sync(self) -> None:
        if self.choice.on_gpu:
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
        total_loss = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.float64)
        count = 0
        for batch in self.test_batches:  # sums stay on the device until the end
            images, labels = self._to_device(batch)
            with self._autocast():
                logits = self.model(images)
            total_loss += F.cross_entropy(logits.float(), labels, reduction="sum")
            correct += (logits.argmax(dim=1) == labels).sum()
            count += len(labels)
        return total_loss.item() / count, correct.item() / count

    def peak_memory(self) -> tuple[int | None, str | None]:
        if self.choice.on_gpu and self.config.cuda_graphs:
            # the graphs' activations stay in their private pool: allocated bytes miss them
            return (int(torch.cuda.max_memory_reserved(self.device)),
                    "torch.cuda.max_memory_reserved (CUDA graphs' private pool included), rank 0")
        if self.choice.on_gpu:
            return (int(torch.cuda.max_memory_allocated(self.device)),
                    "torch.cuda.max_memory_allocated, rank 0")
        return None, "CPU run: no device allocator to read (host peak RSS is in the summary)"

    def reset_peak_memory(self) -> None:
        if self.choice.on_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)

    def save_model(self, directory: Path) -> str:
        state = {"spec": self.spec.name, "num_classes": self.spec.num_classes,
                 "state_dict": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                 "config": self.config.to_dict()}
        files.write_atomic(Path(directory) / "model.pt", lambda f: torch.save(state, f), mode="wb")
        return "model.pt"

    def save_checkpoint(self, directory: Path) -> str:
        """Weights, BatchNorm buffers, the optimizer's state (momentum buffers) and the
        GradScaler's loss scale, as state dicts; the file name written."""
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scaler": self.scaler.state_dict()}
        target = Path(directory) / "torch_state.pt"
        files.write_atomic(target, lambda f: torch.save(state, f), mode="wb")
        return target.name

    def load_checkpoint(self, directory: Path) -> None:
        state = torch.load(Path(directory) / "torch_state.pt", map_location=self.device,
                           weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])

    def is_out_of_memory(self, exc: BaseException) -> bool:
        # torch.OutOfMemoryError (any device) in recent releases; the CUDA one before.
        return isinstance(exc, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError))

    def manifest(self) -> dict:
        """PyTorch's half of the fairness manifest (torch_impl/manifest.py)."""
        return trainer_manifest.describe(self)

    def start_profile(self, directory: Path) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.choice.on_gpu:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profile_directory = Path(directory)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.start()
        self.profiling = True

    def stop_profile(self) -> Capture:
        """A Chrome/Perfetto trace (ui.perfetto.dev opens it) of the recorded steps, read
        back into their phases."""
        self.profiler.stop()
        self.profiling = False
        self.profile_directory.mkdir(parents=True, exist_ok=True)
        path = self.profile_directory / f"trace-rank{self.choice.rank}.json"
        self.profiler.export_chrome_trace(str(path))
        return torch_profile.read_capture(path, self.choice.on_gpu)

    def scalar_writer(self, directory: Path) -> ScalarWriter:
        return ScalarWriter(directory)

    def gather_figures(self, figures: list[float]) -> list[list[float]]:
        if self.choice.processes == 1:
            return [list(figures)]
        rows: list = [None] * self.choice.processes
        dist.all_gather_object(rows, list(figures))  # once per epoch: pickling is no cost
        return rows

    def peer_failures(self, exc: BaseException) -> dict[int, str] | None:
        return trainer_device.peer_failures(self.choice, exc)

    def close(self) -> None:
        self.train_batches = self.test_batches = None  # type: ignore[assignment]  # closed
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False

    # ---- parity probe (compare.run.interface.ProbeTrainer)

    def gradients(self, batch) -> tuple[np.ndarray, float, dict[str, np.ndarray]]:
        """Logits, loss and canonical-layout gradients for one batch, no update."""
        images, labels = self._to_device(batch)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():  # the run's precision: float32 for the parity gate
            logits = self.model(images)
        loss = F.cross_entropy(logits.to(self.numerics["dtype"]), labels,
                               label_smoothing=self.config.label_smoothing)
        loss.backward()
        grads = export_gradients(self.model, {n: p.grad for n, p in self.model.named_parameters()
                                              if p.grad is not None}, self.spec)
        self.optimizer.zero_grad(set_to_none=True)
        return logits.detach().to(self.numerics["dtype"]).cpu().numpy(), float(loss.detach()), grads

    def reset(self) -> None:
        assert self.initial is not None, "a reset needs the shared initial weights"
        load_weights(self.model, self.initial, self.spec)
        self._restore_optimizer()
        self.scaler.load_state_dict(self._new_scaler)

    def loss_scale(self) -> float | None:
        """The dynamic loss scale now (GradScaler's), None without loss scaling."""
        return self.scaler.get_scale() if self.scaler.is_enabled() else None

    def compilation(self) -> dict:
        """What compiled of the training step so far (torch_impl/manifest.py)."""
        return trainer_manifest.compiled(self)

    def weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self.spec)

    # ---- helpers

    def _to_device(self, batch):
        images, labels = batch
        images = images.to(self.device, self.numerics["dtype"], non_blocking=self.non_blocking,
                           memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=self.non_blocking)

    def _autocast(self):
        dtype = self.numerics["autocast_dtype"]
        if dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)


def train(config: RunConfig, dataset: Dataset, handover: Handover | None = None,
          resume: bool = False) -> int:
    """Train as `config` says, one DDP process per replica, taking turns through `handover`
    (one process only); an exit code.
    With `resume`, continue from the checkpoint in config.out (compare.run.checkpoint)."""
    check_split(config)
    # a process torchrun started, or the only one (one replica; --parallel model's stages)
    if cluster.launch(FRAMEWORK).launcher is not None or data_replicas(config) == 1:
        return _train_process(config, dataset, handover, resume)
    import torch.multiprocessing as mp
    # This process only launches the DDP processes: it passes stop signals on to them and
    # waits while they write their results (compare.run.shutdown).
    with shutdown.forwarding() as forwarder:
        context = mp.spawn(_spawned_process, args=(config, _free_port(), resume, os.getpid()),
                           nprocs=config.devices, join=False)
        for process in context.processes:
            forwarder.watch(process)
        try:
            while not context.join(grace_period=DDP_STOP_GRACE_S):
                pass
        except mp.ProcessExitedException as exc:
            return exc.exit_code if exc.exit_code and exc.exit_code > 0 else 1
    return 0


def _train_process(config: RunConfig, dataset: Dataset, handover: Handover | None,
                   resume: bool) -> int:
    """Train this process's replica (joining the process group when there are several)."""
    choice = select_device(config)
    grouped = trainer_device.make_strategy(config, choice) is not None
    code = None
    try:
        code = worker.train_process(sys.modules[__name__], config, dataset, choice, handover,
                                    resume)
        return code
    finally:
        if grouped:
            if code == 0:  # every process got here: leave together, with no collective or
                dist.barrier()  # gloo thread of a peer still running (an abort at exit)
            dist.destroy_process_group()


def _spawned_process(rank: int, config: RunConfig, port: int, resume: bool,
                     launcher_pid: int) -> None:
    """One DDP process started by `train` (as torchrun would: the same variables)."""
    shutdown.install_trainer(launcher_pid)  # as compare.run.worker does for the launcher
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": str(config.devices),
                       "LOCAL_WORLD_SIZE": str(config.devices), cluster.SPAWNED_ENV: "1"})
    from compare.experiment import datasets
    worker.leave(_train_process(config, datasets.config_dataset(config), None, resume))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    worker.run(sys.modules[__name__])
