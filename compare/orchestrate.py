"""`cnncompare compare`: parity check, alternating framework runs over seeds, then the report."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from compare import parity as parity_module
from compare import report, runner
from compare.config import RunConfig
from compare.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK


def run_order(seeds: int, first_seed: int) -> list[tuple[str, int]]:
    """tf, torch, torch, tf, tf, torch, ...: each framework goes first equally often, so
    slow drift of the machine (clocks, thermals, caches) hits both alike."""
    order = []
    for i in range(seeds):
        pair = ("tf", "torch") if i % 2 == 0 else ("torch", "tf")
        order.extend((fw, first_seed + i) for fw in pair)
    return order


def replay_command() -> str:
    return "cnncompare " + shlex.join(sys.argv[1:])


def compare_frameworks(config: RunConfig, seeds: int, out: Path, parity_steps: int = 3,
                       ignore_parity: bool = False, command: str | None = None) -> int:
    """Run the whole comparison into `out`; returns the exit code.

    One framework failing does not stop the other; Ctrl-C stops the plan after the run in
    progress has written its partial result, and the report covers what finished.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    console = Console(stderr=True, quiet=False)
    command = command or replay_command()
    out.mkdir(parents=True, exist_ok=True)
    for fw in ("tf", "torch"):
        runner.check_installed(fw)

    console.print(f"parity check: both builds on the first batch, float32, then {parity_steps} SGD steps")
    parity = parity_module.run_parity(config.replace(quiet=True), out / "parity", parity_steps)
    console.print(_parity_line(parity))
    plan = run_order(seeds, config.seed)
    if not parity["passed"] and not ignore_parity:
        not_run = [{"framework": fw, "seed": s, "reason": "parity check failed"} for fw, s in plan]
        paths = report.write(out, [], parity, command, not_run)
        console.print(f"error: the parity check failed ({', '.join(parity.get('failed', []))}): the two "
                      f"builds are not the same experiment; see {paths[1]} (or pass --ignore-parity)")
        return EXIT_FAILED

    outcomes: list[runner.Outcome] = []
    not_run: list[dict] = []
    interrupted = False
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[last]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, disable=config.quiet, transient=False) as progress:
        task = progress.add_task("compare", total=len(plan) * config.epochs, last="")
        for index, (framework, seed) in enumerate(plan):
            if interrupted:
                not_run.append({"framework": framework, "seed": seed, "reason": "interrupted"})
                continue
            run_config = config.replace(framework=framework, seed=seed, quiet=True,
                                        out=str(out / "runs" / f"{framework}-seed{seed}"))
            label = f"{framework} seed {seed} ({index + 1}/{len(plan)})"
            progress.update(task, description=label)
            epochs_before = progress.tasks[0].completed

            def on_line(line: str, label=label) -> None:
                if " epoch " in line and "test_acc" in line:
                    progress.advance(task)
                    progress.update(task, last=line.split("  ", 1)[-1][:70])
                if config.quiet:
                    print(f"{label}: {line}", flush=True)

            outcome = runner.run_framework(run_config, on_line=on_line)
            outcomes.append(outcome)
            progress.update(task, completed=epochs_before + config.epochs)
            if outcome.code == EXIT_INTERRUPTED:
                interrupted = True
            if outcome.status != "completed":
                console.print(f"{label}: {outcome.status}"
                              + (f": {outcome.error}" if outcome.error else ""))

    runs = report.load_runs([o.result_path for o in outcomes if o.result_path.exists()])
    for o in outcomes:  # a run that never wrote a result still shows in the report
        if not o.result_path.exists():
            seed = int(o.out.name.rsplit("seed", 1)[-1])
            not_run.append({"framework": o.framework, "seed": seed,
                            "reason": o.error or f"exit code {o.code}, no result written"})
    paths = report.write(out, runs, parity, command, not_run)
    for p in paths:
        console.print(f"wrote {p}")
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if all(o.status == "completed" for o in outcomes) else EXIT_FAILED


def _parity_line(parity: dict) -> str:
    if parity.get("error"):
        return f"parity: FAILED ({parity['error']})"
    verdict = "passed" if parity["passed"] else "FAILED"
    return (f"parity {verdict}: logits {parity['logits_max_abs_diff']:.2e}, loss {parity['loss_abs_diff']:.2e}, "
            f"gradients {parity['grad_max_rel_diff']:.2e} (rel), updates after {parity['steps']} steps "
            f"{parity['params_rel_update_diff_after_steps']:.2e} (rel), weights "
            f"{parity['params_max_abs_diff_after_steps']:.2e}")
