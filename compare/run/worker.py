"""Entry point of a framework subprocess: `python -m tf_impl.train CONFIG.json` (or torch_impl).

The parent (`cnncompare run/compare/sweep`) writes the RunConfig as JSON and starts the
framework's train module, which calls `main` here with its own implementation module.
Errors the user can act on print one line and exit non-zero; --debug shows tracebacks.
Stop signals and the parent's death are handled as compare.run.shutdown describes.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from compare import errors
from compare.experiment import datasets
from compare.experiment.config import ComparisonConfig, RunConfig
from compare.experiment.datasets import Dataset
from compare.experiment.frameworks import impl_module
from compare.machine import allocator, devices
from compare.run import compile_cache, progress, shutdown, wall_time
from compare.run.interface import DeviceChoice
from compare.run.schedule import Handover


def main(impl: ModuleType, argv: list[str] | None = None) -> int:
    """Run what the arguments ask of `impl` (a compare.run.interface.FrameworkModule)."""
    parser = _parser(impl)
    args = parser.parse_args(argv)
    _settle_in(args)
    debug = False
    try:
        if args.env or args.describe_models:
            print(json.dumps(_description(impl, args)))  # one line: the answer's last
            return 0
        if not args.config:
            parser.error("a config file is needed")
        config = carried_precision(RunConfig.from_json(Path(args.config).read_text()))
        debug = config.debug
        return _run(impl, config, args)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - one line unless --debug
        return errors.report(exc, debug, where=impl.__name__)


def _parser(impl: ModuleType) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {impl.__name__}",
                                     description="One framework's side of cnncompare "
                                                 "(started by the CLI).")
    parser.add_argument("config", nargs="?", help="RunConfig JSON file")
    parser.add_argument("--parity", metavar="NPZ",
                        help="write the parity probe to NPZ instead of training")
    parser.add_argument("--parity-steps", type=int, default=ComparisonConfig.parity_steps)
    parser.add_argument("--perturb", action="store_true",
                        help="parity probe: move every initial weight by 1 ulp (the noise floor)")
    parser.add_argument("--parity-floor", metavar="NPZ",
                        help="parity probe: then a second, every initial weight moved by 1 ulp")
    parser.add_argument("--then", nargs=3, metavar=("CONFIG", "NPZ", "FLOOR"),
                        help="parity probe: then CONFIG's (a RunConfig JSON file) to NPZ and "
                             "its floor to FLOOR, in this process")
    parser.add_argument("--own-loop", action="store_true",
                        help="train with the framework's own loop instead (compare.run.own_loop)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint in the config's out directory")
    parser.add_argument("--env", action="store_true",
                        help="print what this framework sees, as JSON")
    parser.add_argument("--describe-models", metavar="NAME", nargs="+",
                        help="print each network as this framework builds it, as JSON")
    parser.add_argument("--doctor", metavar="JSON",
                        help="train a few steps per precision and write what happened to JSON")
    parser.add_argument("--window-lines", action="store_true",
                        help="with the config's quiet, also a line per timing window, for a "
                             "parent that shows them live (compare.run.progress)")
    return parser


def _settle_in(args: argparse.Namespace) -> None:
    """What the process does once its framework is imported, before any work."""
    if args.window_lines:
        progress.ask_for_window_lines()
    wall_time.mark("imported")  # the interpreter and the framework: before main runs
    # The imported modules' objects (about 330,000 in a PyTorch process) move out of the
    # cyclic collector's reach: a full collection then scans only what this run made.
    # Otherwise each full pass walks the whole import heap (the pauses:
    # benchmarks/research/gc_pauses.py, docs/research/cpu-timing.md); and, in a child of a
    # fork server, it would copy every page of that heap it touches. Imported modules are
    # never freed anyway.
    gc.freeze()
    # Freed buffers stay in malloc's heap for the next step, in both frameworks and both loops
    # alike, not unmapped and faulted back in (compare.machine.allocator)
    allocator.keep_freed_memory()
    shutdown.install_trainer()  # stops are remembered from here on, and act where it is safe


def _description(impl: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    """--env: what this framework sees; --describe-models: each network as it builds it."""
    if args.env:
        return impl.describe_environment()
    from compare.experiment import networks
    return {name: impl.describe_model(networks.get_spec(name)) for name in args.describe_models}


def _run(impl: ModuleType, config: RunConfig, args: argparse.Namespace) -> int:
    """The work on `config`: the doctor's steps, the parity probes, the own loop or the run."""
    if args.doctor:  # its own small synthetic data: no dataset to load
        from compare import files
        from compare.machine import doctor
        with shutdown.interruptible():  # nothing to keep: stop at once
            found = doctor.train_steps(impl, config)
        files.write_json(Path(args.doctor), found)
        return 0
    handover = None
    if config.turns is not None:  # nothing heavy before this run's first turn
        with shutdown.interruptible():  # a stop while waiting ends the process at once
            handover = Handover.join(config.turns, impl.FRAMEWORK)
        wall_time.mark("first turn")
    dataset = datasets.config_dataset(config)
    wall_time.mark("data")
    if args.parity:
        with shutdown.interruptible():  # nothing to keep: stop at once
            probe(impl, config, dataset, Path(args.parity), args.parity_steps, args.perturb,
                  Path(args.parity_floor) if args.parity_floor else None)
            if args.then:  # the next configuration's probe, without a process of its own
                then = carried_precision(RunConfig.from_json(Path(args.then[0]).read_text()))
                data = (dataset if datasets.same_data(then, config)  # not loaded twice
                        else datasets.config_dataset(then))
                probe(impl, then, data, Path(args.then[1]), args.parity_steps,
                      floor=Path(args.then[2]))
        return 0
    # The framework's compilers read and fill the caches in the state the run asks for
    # (compare.run.compile_cache): before any op, so before anything has compiled
    manifest = importlib.import_module(impl_module(impl.FRAMEWORK, "manifest"))
    gpu = config.device != "cpu" and devices.nvidia_gpus() > 0  # NVML: CUDA not started yet
    with compile_cache.in_place(manifest, config, gpu):
        if args.own_loop:
            from compare.run import own_loop
            return own_loop.run(impl, config, dataset)
        return impl.train(config, dataset, handover, resume=args.resume)


def carried_precision(config: RunConfig) -> RunConfig:
    """The config with the precision its command resolved; one this process was started on
    without (`python -m tf_impl.train CONFIG.json` by hand, or by a test) is resolved here,
    once, before the framework sees it: never inside the framework's own modules."""
    if config.precision_resolved is not None:
        return config
    from compare.machine import precision_choice
    return precision_choice.carry(config)


def probe(impl: ModuleType, config: RunConfig, dataset: Dataset, path: Path, steps: int,
          perturb: bool = False, floor: Path | None = None) -> None:
    """This framework's side of the parity check, in the config it is given (the parent
    chooses: parity.probe_config or timed_config); see compare.run.parity_probe.write_probe.
    With `floor`, a second probe from the same trainer, reset, its initial weights moved by
    1 ulp (a new trainer would trace TensorFlow's steps again, on the parity check's critical
    path).
    A float64 probe that fails where the framework has no float64 kernel for a layer writes
    only `float64_unsupported` (the layer, its kind and the framework's line) instead."""
    import numpy as np

    from compare import files
    from compare.experiment import networks, precision_rule
    from compare.run import parity_probe
    try:
        trainer = impl.Trainer(config, dataset, impl.select_device(config))
        shared = trainer.initial  # the floor moves these, whether or not the first moved them
        parity_probe.write_probe(trainer, config, path, steps, perturb)
    except Exception:
        if config.precision != precision_rule.PROBE_ONLY:
            raise
        missing = impl.float64_missing(networks.get_spec(config.model, len(dataset.classes)))
        if missing is None:  # every layer runs alone in float64: a failure of its own
            raise
        files.write_atomic(path, lambda f: np.savez(f, float64_unsupported=np.str_(missing)),
                           mode="wb")
        return
    if floor is not None:
        trainer.initial = shared
        parity_probe.write_probe(trainer, config, floor, steps, perturb=True)


def train_process(impl: ModuleType, config: RunConfig, dataset: Dataset, choice: DeviceChoice,
                  handover: Handover | None, resume: bool) -> int:
    """Train this process's replicas with `impl`'s Trainer on the run's schedule (its turns
    through `handover`, its own-loop twin beside it) and record the run; an exit code.
    The chief says where it trains and in what precision (and warns of emulated bfloat16)."""
    from compare.run import loop, own_loop
    from compare.run.schedule import Schedule
    trainer = impl.Trainer(config, dataset, choice)
    twin = (own_loop.Twin(impl, config, dataset, choice)
            if config.own_loop_beside and choice.is_chief else None)
    schedule = Schedule(config, trainer, handover, twin)
    wall_time.mark("built")
    resolved = trainer.numerics["resolved"]  # the config's, as the framework applied it
    if choice.is_chief:
        if not config.quiet:
            print(f"{impl.FRAMEWORK}: training on {choice.description}, {resolved.describe()}",
                  flush=True)
        if resolved.warning:
            print(f"warning: {resolved.warning}", file=sys.stderr, flush=True)
    environment = {**impl.describe_environment(), "device_used": choice.description}
    return loop.train_and_record(trainer, config, environment, dataset.info(), schedule, resume)


def leave(code: int) -> NoReturn:
    """End a framework process whose work is written: flush, then exit at once. The
    frameworks' own exit-time teardown can abort or hold a finished process (Kineto's
    profiler threads ended one with "terminate called without an active exception" after its
    result was complete, so the run counted as failed; a tf.data iterator's worker waiting for
    the GIL of a finalising interpreter held one for minutes). Every file the run writes is
    written atomically and closed before this."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    os._exit(code)


def run(impl: ModuleType) -> NoReturn:
    """`python -m <package>.train`: `main`, its wall time's marks, then `leave`."""
    code = main(impl)
    wall_time.report()
    leave(code)
