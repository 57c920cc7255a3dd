"""The `cnncompare` command line. Commands are thin: options -> RunConfig -> one call.

Options default to None and take their shown defaults from compare.config (RunConfig and
the model recipes); every value is checked by compare.validate before any work starts.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click

from compare import errors
from compare.errors import UserError
from compare.experiment import datasets, specs, validate
from compare.experiment.config import (
    DEVICE_CHOICES,
    FRAMEWORKS,
    PIPELINES,
    PRECISIONS,
    SCHEDULES,
    ComparisonConfig,
    PipelineConfig,
    RunConfig,
    recipe_config,
    shown_default,
)
from compare.process import cluster, shutdown

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Errors(click.Group):
    """Every UserError and Ctrl-C as one line and an exit code (compare.errors.report)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (UserError, KeyboardInterrupt) as exc:
            ctx.exit(errors.report(exc, debug="--debug" in sys.argv))


def _option(name: str, field_name: str | None, help_text: str, *, dest: str | None = None,
            **kwargs):
    """A run option whose --help ends with the default compare.config gives it; `dest`
    names the RunConfig field when the option's own name is not it."""
    if field_name is not None:
        help_text = f"{help_text} {shown_default(field_name)}"
    declarations = (name, dest) if dest else (name,)
    return click.option(*declarations, default=None, help=help_text, **kwargs)


def run_options(f):
    """Options shared by run, compare and sweep (None: the config's or recipe's default)."""
    options = [
        _option("--model", "model", "Network: lenet (the seed's 62k-parameter Net) or resnet9 "
                "(DAWNBench ResNet).", type=click.Choice(list(specs.MODELS))),
        _option("--dataset", "dataset", "Data source: the official CIFAR-10 archive, tfds, "
                "torchvision, an image folder, or generated synthetic images.",
                type=click.Choice(datasets.SOURCES)),
        _option("--data-dir", None, "cifar10: the tar.gz or extracted cifar-10-batches-py/; "
                "folder: the root with train/<class>/; tfds/torchvision: their data root.",
                type=click.Path()),
        _option("--synthetic-size", "synthetic_train_size", "Synthetic training images "
                "(test set: a fifth).", type=int),
        _option("--epochs", "epochs", "Passes over the training set.", type=int),
        _option("--batch-size", "batch_size", "Global batch: images per optimizer step over "
                "all replicas.", type=int),
        _option("--lr", "lr", "Peak learning rate per step.", type=float),
        _option("--schedule", "schedule", "Learning-rate schedule, applied per step.",
                type=click.Choice(SCHEDULES)),
        _option("--momentum", "momentum", "SGD momentum (PyTorch's form in both frameworks).",
                type=float),
        _option("--weight-decay", "weight_decay", "L2 coefficient added to the gradient.",
                type=float),
        _option("--label-smoothing", "label_smoothing", "Label smoothing of the cross-entropy.",
                type=float),
        _option("--augment/--no-augment", "augment", "Random crop (4-pixel zero padding) and "
                "horizontal flip, from the shared data plan."),
        _option("--precision", "precision", "auto: mixed on a GPU with tensor cores and on a "
                "CPU that computes bfloat16 natively (AMX, AVX512-BF16), float32 elsewhere; "
                "mixed: float16 + loss scaling on a GPU, bfloat16 on a CPU; fp32: float32. "
                "The choice and its reason are recorded.", type=click.Choice(PRECISIONS)),
        _option("--device", "device", "auto: the GPU if there is one (and say which); gpu: fail "
                "if there is none.", type=click.Choice(DEVICE_CHOICES)),
        _option("--devices", "devices", "Replicas: GPUs, or on CPU logical devices (tf) / gloo "
                "processes (torch).", type=int),
        _option("--collective-timeout", "collective_timeout_s", "Runs over several processes "
                "or machines: seconds a collective waits for a peer before the run fails "
                "naming it.", dest="collective_timeout_s", type=float),
        _option("--compile/--no-compile", "compile", "XLA jit_compile (tf) and torch.compile "
                "(torch)."),
        _option("--cuda-graphs/--no-cuda-graphs", "cuda_graphs", "PyTorch on a GPU: replay "
                "the model's forward and backward as CUDA graphs (torch.compile mode "
                "reduce-overhead); TensorFlow ignores it."),
        _option("--steps-per-call", "steps_per_call", "Training steps per call of the step "
                "function: TF runs them in one tf.function that reads the iterator inside the "
                "graph (as Keras' steps_per_execution); PyTorch in one trainer call.", type=int),
        _option("--strategy", "strategy", "Both frameworks' distribution wrapper: auto (none "
                "for one replica; MirroredStrategy and DDP for several), none (one replica), "
                "mirrored (the wrapper also on one replica), or tf=CHOICE,torch=CHOICE to set "
                "them apart (the report names it as a caveat).", metavar="auto|none|mirrored"),
        _option("--timing-window-s", "timing_window_s", "Target length of a synchronised "
                "timing window, seconds (windows end on call boundaries).", type=float),
        _option("--pipeline", None, "Input pipeline preset: tuned (parallel map, prefetch, "
                "workers), naive (one synchronous stage) or device (whole training set resident "
                f"on the device). [default: {PipelineConfig().kind}]",
                type=click.Choice(PIPELINES)),
        _option("--workers", None, "DataLoader worker processes (torch). [default: tuned: none "
                "with 2 or fewer cores per process, else half the cores, at most 8]", type=int),
        _option("--tf32/--no-tf32", "tf32", "Allow TensorFloat-32 on Ampere+ GPUs, in both "
                "frameworks alike."),
        _option("--channels-last/--no-channels-last", None, "PyTorch's memory format (Keras "
                "always computes NHWC). [default: channels_last on GPU, contiguous on CPU]"),
        _option("--shared-init/--no-shared-init", "shared_init", "Start both frameworks from the "
                "same numpy-generated weights."),
        _option("--profile", "profile_steps", "After the last epoch, train this many more "
                "steps under each framework's profiler and split a step's time into its "
                "phases (input, copy, forward, backward, all-reduce, update); 0: off. They "
                "count in no other figure.",
                dest="profile_steps", type=int),
        _option("--target-accuracy", "target_accuracy", "Report the training time to reach "
                "this test accuracy (fraction).", type=float),
        _option("--seed", "seed", "Seed of the initial weights and the data plan.", type=int),
        _option("--out", None, "Output directory. [default: runs/<command>-<framework or "
                "'compare'>]", type=click.Path()),
        click.option("--quiet", is_flag=True, help="No progress bar: one line per epoch (for CI "
                     "and logs)."),
        click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def build_config(framework: str, out: str, **options) -> RunConfig:
    """A validated RunConfig from the shared options (None: the model recipe's default)."""
    model = options.pop("model") or RunConfig.model
    pipeline = PipelineConfig.preset(options.pop("pipeline") or PipelineConfig.kind)
    workers = options.pop("workers")
    if workers is not None:
        pipeline = dataclasses.replace(pipeline, workers=workers)
    synthetic = options.pop("synthetic_size")
    if synthetic is not None:
        options.update(synthetic_train_size=synthetic, synthetic_test_size=max(1, synthetic // 5))
    config = recipe_config(model, framework=framework, out=out, pipeline=pipeline, **options)
    return validate.check_config(config)


def prepare_data(config: RunConfig) -> datasets.Dataset:
    """Load (and cache) the dataset once in the parent, so bad data fails before any run."""
    dataset = datasets.config_dataset(config)
    validate.check_against_data(config, len(dataset.train_y))
    for note in dataset.notes:
        click.echo(f"note: {note}", err=True)
    return dataset


def _refuse_options_with_resume(directory: str) -> None:
    """--resume continues a run as it was set up; any other setting would make it another."""
    ctx = click.get_current_context()
    given = [p.opts[0] for p in ctx.command.params
             if p.name not in ("resume_dir", "quiet", "debug", "frameworks")
             and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise UserError(f"--resume {directory} continues with the settings saved there: "
                        f"drop {', '.join(given)}")


def _resumed(config: RunConfig, options: dict) -> RunConfig:
    """A saved config, shown as this invocation asks (--quiet, --debug), checked again."""
    return validate.check_config(config.replace(quiet=options["quiet"], debug=options["debug"]))


@click.group(cls=Errors, context_settings=CONTEXT)
@click.version_option(package_name="cnncompare")
def cli():
    """Train the same CNN in TensorFlow/Keras and PyTorch and compare them fairly.

    \b
    Examples:
      cnncompare compare --dataset synthetic --epochs 2 --seeds 2 --out runs/demo
      cnncompare run --framework torch --dataset cifar10 --data-dir ~/cifar-10-python.tar.gz
      cnncompare report runs/demo
      cnncompare sweep --dataset synthetic --vary precision=fp32,mixed --vary pipeline=naive,tuned
      cnncompare env
      cnncompare doctor
      cnncompare data info --dataset folder --data-dir ~/cifar10-jpeg
    """


@cli.command(context_settings=CONTEXT)
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=None,
              help="tf (TensorFlow/Keras) or torch (PyTorch); required unless --resume.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Continue the interrupted run in DIR from its last "
              "checkpoint, with the settings saved there (DIR/config.json).")
@run_options
def run(framework: str | None, resume_dir: str | None, **options):
    """Train once with one framework, in its own process; write DIR/result.json.

    \b
    Examples:
      cnncompare run --framework tf --dataset synthetic --epochs 1
      cnncompare run --framework torch --model resnet9 --dataset folder --data-dir ~/cifar10-jpeg
      cnncompare run --framework torch --device cpu --devices 2 --precision fp32 --quiet
      cnncompare run --framework tf --device gpu --steps-per-call 16 --strategy mirrored
      cnncompare run --resume runs/run-torch
    """
    from compare.process import lock, orchestrate, runner
    from compare.run import checkpoint
    if resume_dir:
        _refuse_options_with_resume(resume_dir)
        config = _resumed(checkpoint.saved_config(Path(resume_dir)), options)
        if framework not in (None, config.framework):
            raise UserError(f"--resume {resume_dir} is a {config.framework} run, not {framework}")
        if runner.result_status(Path(resume_dir)) == "completed":
            click.echo(f"{resume_dir}: the run has completed; nothing to resume")
            return
    elif framework is None:
        raise click.UsageError("Missing option '--framework'.")
    else:
        out = options.pop("out") or f"runs/run-{framework}"
        config = build_config(framework, out, **options)
    runner.check_installed(config.framework)
    prepare_data(config)
    launched = cluster.launch(config.framework)
    # Under TF_CONFIG or torchrun only rank 0 writes the result; the others keep their
    # config and log apart, so processes sharing a filesystem never write the same file.
    files = Path(config.out)
    if not launched.is_chief:
        files = files / "workers" / f"rank-{launched.rank}"
    with lock.hold(files, orchestrate.replay_command()), shutdown.forwarding() as stop:
        outcome = runner.run_framework(config, resume=resume_dir is not None, files=files)
        if outcome.code != 0:
            kept = (f"what finished is in {outcome.result_path}"
                    if Path(outcome.result_path).exists() else "it trained nothing")
            click.echo(f"{config.framework} run {outcome.status} (exit {outcome.code}); {kept}",
                       err=True)
        elif launched.is_chief:
            click.echo(f"result: {outcome.result_path}")
        else:
            click.echo(f"{launched.describe()}: done; rank 0 wrote the result")
    sys.exit(stop.exit_code(outcome.code))


def _refuse_launchers(command: str) -> None:
    """compare and sweep start their own processes; under a multi-machine launcher each
    framework runs alone (`run`), and `report` puts the two results side by side."""
    for framework in FRAMEWORKS:
        launched = cluster.launch(framework)
        if launched.launcher is not None:
            raise UserError(f"{command} cannot run under {launched.launcher}: run each framework "
                            "with `cnncompare run` there (README: More than one machine), "
                            "then `cnncompare report` on the two output directories")


@cli.command(context_settings=CONTEXT)
@run_options
@click.option("--seeds", type=click.IntRange(min=1), default=ComparisonConfig.seeds,
              show_default=True,
              help="Seeds per framework (seed, seed+1, ...); 2+ gives confidence intervals.")
@click.option("--parity-steps", type=click.IntRange(min=1),
              default=ComparisonConfig.parity_steps, show_default=True,
              help="SGD steps of the parity check before the comparison.")
@click.option("--ignore-parity", is_flag=True,
              help="Run the comparison even when the parity check fails (the report says so).")
@click.option("--allow-mixed-devices", is_flag=True, default=None,
              help="Run even when one framework would train on the GPU and the other on the "
                   "CPU (e.g. TensorFlow without its CUDA libraries); the report says so.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Finish the interrupted comparison in DIR with the settings "
              "saved there: keep its passed parity check and completed runs, continue the "
              "others from their checkpoints.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Run only this framework's runs of the comparison now (repeatable), e.g. "
                   "on a GPU machine whose TensorFlow arrives later; the parity check waits "
                   "for both, and --resume DIR runs the rest. [default: both]")
def compare(seeds: int, parity_steps: int, ignore_parity: bool, resume_dir: str | None,
            frameworks: tuple[str, ...], **options):
    """Parity check, then both frameworks over several seeds, then the side-by-side report.

    Runs alternate tf, torch, torch, tf, ... so machine drift hits both. Writes
    DIR/summary.json, DIR/report.md and DIR/report.html.

    \b
    Examples:
      cnncompare compare --dataset synthetic --epochs 2 --seeds 2 --out runs/demo
      cnncompare compare --model lenet --dataset folder --data-dir ~/cifar10-jpeg --epochs 1
      cnncompare compare --resume runs/demo
    """
    from compare.process import lock, orchestrate
    _refuse_launchers("compare")
    if resume_dir:
        _refuse_options_with_resume(resume_dir)
        config, seeds, parity_steps, ignore_parity = orchestrate.saved_comparison(Path(resume_dir))
        config, out = _resumed(config, options), resume_dir
    else:
        out = options.pop("out") or "runs/compare"
        config = build_config("torch", out, **options)
    prepare_data(config)
    with lock.hold(out, orchestrate.replay_command()), shutdown.forwarding() as stop:
        code = orchestrate.compare_frameworks(config, seeds, Path(out), parity_steps,
                                              ignore_parity, resume=resume_dir is not None,
                                              frameworks=frameworks or FRAMEWORKS)
    sys.exit(stop.exit_code(code))


@cli.command(context_settings=CONTEXT)
@run_options
@click.option("--vary", "varies", multiple=True, required=True, metavar="NAME=V1,V2",
              help="A setting and its values; repeat for a cartesian product. Names: precision, "
                   "batch-size, pipeline (naive/tuned/device), compile (on/off), devices, device "
                   "(cpu/gpu), model, lr, epochs, workers, tf32, steps-per-call, strategy "
                   "(auto/none/mirrored), cuda-graphs (on/off). The first values form the "
                   "baseline.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Frameworks to run (repeatable). [default: both]")
@click.option("--allow-mixed-devices", is_flag=True, default=None,
              help="Run even when one framework would train on the GPU and the other on the "
                   "CPU (e.g. TensorFlow without its CUDA libraries); the report says so.")
def sweep(varies: tuple[str, ...], frameworks: tuple[str, ...], **options):
    """What each setting is worth, per framework: every combination of the --vary values,
    each run in its own process; writes DIR/sweep.json, sweep.md and sweep.html.

    \b
    Examples:
      cnncompare sweep --dataset synthetic --vary precision=fp32,mixed --vary pipeline=naive,tuned
      cnncompare sweep --model resnet9 --vary batch-size=128,512 --vary compile=off,on
      cnncompare sweep --dataset synthetic --vary device=cpu,gpu --target-accuracy 0.8
      cnncompare sweep --framework tf --vary steps-per-call=1,8 --vary strategy=none,mirrored
    """
    from compare.process import lock, orchestrate
    from compare.process import sweep as sweep_module
    _refuse_launchers("sweep")
    out = options.pop("out") or "runs/sweep"
    parsed = [sweep_module.parse_vary(v) for v in varies]
    config = build_config("torch", out, **options)
    train_size = len(prepare_data(config).train_y)
    command = orchestrate.replay_command()
    with lock.hold(out, command), shutdown.forwarding() as stop:
        code = sweep_module.run_sweep(config, parsed, list(frameworks) or list(FRAMEWORKS),
                                      Path(out), command, train_size)
    sys.exit(stop.exit_code(code))


@cli.command(context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write the report here. [default: the first SOURCE that is a directory]")
@click.option("--equivalence-margin", type=click.FloatRange(min=0, min_open=True), default=0.5,
              show_default=True,
              help="Accuracy equivalence margin of the TOST, in percentage points (+-).")
def report(sources: tuple[str, ...], out: str | None, equivalence_margin: float):
    """Rebuild report.md and report.html from saved results alone.

    Each SOURCE is a `compare` output directory (or any directory with result.json files
    below it), a summary.json shipped from another machine, or a directory holding one.
    Results of different machines (device + host platform) or precisions are shown side
    by side, never averaged. One comparison also rewrites summary.json; several write
    combined.json. Unreadable result files are named on stderr and in the report.

    \b
    Examples:
      cnncompare report runs/demo
      cnncompare report benchmarks/results/*/summary.json runs/mine
      cnncompare report runs/h100 runs/cpu --out runs/both
    """
    from compare.report import build as report_module
    built = report_module.build([Path(s) for s in sources], Path(out) if out else None,
                                margin=equivalence_margin / 100)
    for skipped in built.skipped:
        click.echo(f"skipped {skipped['path']}: {skipped['reason']}", err=True)
    for p in built.paths:
        click.echo(f"wrote {p}")


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def env(as_json: bool):
    """What each framework sees: devices, versions, CUDA/cuDNN, TF32, precision support.

    \b
    Examples:
      cnncompare env
      cnncompare env --json > env.json
    """
    from compare.machine import environment
    info = environment.collect()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        environment.print_table(info)


@cli.command(context_settings=CONTEXT)
@click.option("--model", type=click.Choice(list(specs.MODELS)), default=RunConfig.model,
              show_default=True, help="Network to train a few steps of.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Examine only this framework (repeatable); exit 0 when it can train. "
                   "[default: both]")
def doctor(model: str, as_json: bool, frameworks: tuple[str, ...]):
    """Can each framework train here, on which device, and can the two be compared?

    For each framework in its own processes: versions, the GPUs it sees, the CUDA/cuDNN it
    loaded, and a few real training steps of MODEL on each device kind it can use, in
    float32 and mixed precision, with their time; then a verdict per framework and for the
    pair. When a framework sees no GPU on a GPU machine, it says why. Exits 0 only when
    both frameworks can train on the same device kind.

    \b
    Examples:
      cnncompare doctor
      cnncompare doctor --model resnet9 --json > doctor.json
    """
    from compare.machine import doctor as doctor_module
    dropped = cluster.forget_launch()
    if dropped:
        click.echo(f"note: doctor examines this machine alone; ignoring {', '.join(dropped)}",
                   err=True)
    found = doctor_module.examine(model, frameworks or FRAMEWORKS)
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        doctor_module.print_report(found)
    sys.exit(0 if found["ready"] else 1)


@cli.group(context_settings=CONTEXT)
def data_group():
    """Fetch, inspect and cache datasets."""


data_group.name = "data"
cli.add_command(data_group, "data")


@data_group.command("info", context_settings=CONTEXT)
@click.option("--dataset", type=click.Choice(datasets.SOURCES), default=RunConfig.dataset,
              show_default=True,
              help="Data source to inspect.")
@click.option("--data-dir", type=click.Path(), default=None,
              help="Where the data is (see `run --help`).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def data_info(dataset: str, data_dir: str | None, as_json: bool):
    """Splits, sizes, classes, source and cache path of a dataset (decoding it once).

    \b
    Examples:
      cnncompare data info --dataset synthetic
      cnncompare data info --dataset cifar10 --data-dir ~/cifar-10-batches-py --json
    """
    info = datasets.load(dataset, data_dir).info()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"dataset: {dataset}", show_header=False)
    for key in ("source", "origin", "train_size", "test_size", "image_shape", "num_classes",
                "classes",
                "mean", "std", "cache_path"):
        value = info[key]
        table.add_row(key, ", ".join(map(str, value)) if isinstance(value, list) else str(value))
    for note in info["notes"]:
        table.add_row("note", note)
    Console().print(table)


@data_group.command("fetch", context_settings=CONTEXT)
def data_fetch():
    """Download the official CIFAR-10 python archive into the cache (md5-checked).

    \b
    Example:
      CNNCOMPARE_HOME=/data/cnncompare cnncompare data fetch
    """
    path = datasets.fetch_cifar10()
    datasets.load("cifar10")  # decode once, so runs start from the array cache
    click.echo(f"cached {path}")


@data_group.command("cache", context_settings=CONTEXT)
@click.option("--clear", is_flag=True, help="Delete the decoded-array cache (downloads stay).")
def data_cache(clear: bool):
    """Show (or clear) the cache under $CNNCOMPARE_HOME.

    \b
    Example:
      cnncompare data cache
    """
    if clear:
        datasets.clear_cache()
    info = datasets.describe_cache()
    click.echo(f"{info['root']}: {len(info['files'])} file(s), {info['bytes'] / 1e6:.1f} MB")
    for entry in info["files"]:
        click.echo(f"  {entry['bytes'] / 1e6:9.1f} MB  {entry['path']}")


def main() -> None:
    """The console script: click, plus one line for anything unexpected (compare.errors)."""
    try:
        cli.main(prog_name="cnncompare", standalone_mode=True)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: one line unless --debug
        sys.exit(errors.report(exc, debug="--debug" in sys.argv, where="cnncompare"))


if __name__ == "__main__":  # python -m compare.cli, as torchrun starts it
    main()
