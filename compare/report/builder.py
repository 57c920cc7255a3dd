"""`cnncompare report` and the report `compare` writes: results read and grouped into
comparisons, summary.json (or combined.json) and the two pages; an earlier, fuller report
is kept aside, never overwritten."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from compare import files, schema
from compare.errors import UserError
from compare.experiment import parity_record
from compare.experiment.frameworks import FRAMEWORKS
from compare.experiment.parity_record import ParityRecord
from compare.records import RunSummary
from compare.report import best, defaults, own_loops, plots, stats
from compare.report.aggregate import summarise
from compare.report.labels import MACHINE_IDENTITY, machine_of, precision_label
from compare.report.render import render
from compare.report.sections import Group
from compare.report.verdict import verdict_sentences

# What writing a report imports at its first use, seconds on a small CPU (scipy.stats the
# most): commands that never write one do not pay it, and `compare` loads them during its
# untimed parity check (preload).
REPORT_IMPORTS = ("scipy.special", "scipy.stats", "scipy.signal", "matplotlib.pyplot", "jinja2",
                  "markdown", "markupsafe")


def preload(background: bool = False) -> None:
    """Import what writing a report needs (REPORT_IMPORTS), matplotlib on its Agg backend.
    `background`: the calling thread first takes the lowest CPU priority (Linux: a thread's
    own nice value), so that the imports use what the processes beside it leave of the CPU,
    and an import that fails is left for the report's own import to raise and report."""
    if background:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):  # not Linux, or not allowed: the same imports
            pass
    try:
        plots.matplotlib_agg()
        for name in REPORT_IMPORTS:
            importlib.import_module(name)
    except Exception:
        if not background:
            raise


def load_runs(paths: list[Path]) -> list[schema.Result]:
    """Every result file at or below `paths`, each with its `path`.

    A file that cannot be used (torn JSON, an unknown schema version, missing fields) becomes
    a placeholder with `unreadable` set to why; summarise() lists it apart, never as a run.
    """
    runs: list[schema.Result] = []
    for root in paths:
        for path in files.results_under(Path(root)):
            try:
                result = schema.read_result(path)
            except schema.SchemaError as exc:
                # a placeholder, not a run: summarise() lists it apart by `unreadable`
                result = cast(schema.Result, {
                    "framework": "tf" if path.parent.name.startswith("tf") else "torch",
                    "unreadable": str(exc).replace(f"{path}: ", "", 1), "epochs": [],
                    "summary": RunSummary(status="unreadable", replicas=0,
                                          train_flops_per_image=0), "config": {}})
            result["path"] = str(path)
            runs.append(result)
    return runs


def write(out_dir: Path, runs: list[schema.Result], parity: ParityRecord | None,
          command: str | None, planned: list[dict] | None = None,
          margin: float = stats.EQUIVALENCE_MARGIN, order_note: str | None = None) -> list[Path]:
    """summary.json, report.md and report.html for these runs (one comparison)."""
    summary = summarise(runs, parity, command, planned, margin, order_note,
                        own_loops.load([out_dir]), best.load(out_dir), defaults.load(out_dir))
    directory = files.ComparisonDir(out_dir)
    keep_a_fuller_report(directory, _completed(summary))
    paths = [files.write_json(directory.summary, summary)]
    return paths + render([Group(summary, runs, str(out_dir))], out_dir)


def _completed(summary: Mapping[str, Any]) -> int:
    return sum(1 for r in summary.get("runs") or [] if r.get("status") == "completed")


def keep_a_fuller_report(directory: files.ComparisonDir, completed_now: int) -> Path | None:
    """Move the report in `directory` to earlier/<when>/ when it counted more completed runs
    than the one about to be written (a rerun that failed early must not erase it)."""
    previous = files.read_json_or_empty(directory.summary)
    if _completed(previous) <= completed_now:
        return None
    target = directory.earlier / time.strftime("%Y%m%d-%H%M%S")
    target.mkdir(parents=True, exist_ok=True)
    for path in (directory.summary, *directory.pages):
        if path.exists():
            path.replace(target / path.name)
    print(f"note: the earlier report in {directory.path} had {_completed(previous)} completed "
          f"run(s), this one {completed_now}: it is kept in {target}", file=sys.stderr,
          flush=True)
    return target


@dataclass
class Built:
    """What `build` wrote, and the files it could not use (path, why)."""

    paths: list[Path]
    groups: list[Group]
    skipped: list[dict[str, str]] = field(default_factory=list)


def _run_key(run: schema.Result) -> tuple:
    """What runs of one comparison share: precision, model, data, and whether they are
    matched, each framework's defaults or each framework's best (compare --best)."""
    return (precision_label(run), (run.get("model") or {}).get("name"),
            (run.get("data") or {}).get("source"),
            (run.get("config") or {}).get("variant", "matched"))


def _groups_from_runs(runs: list[schema.Result], margin: float) -> list[Group]:
    """Runs split into comparisons: by compare directory, then pooled across directories
    whose machine, precision, model and data agree; never across machines."""
    where = {id(r): files.ComparisonDir.of(Path(r["path"])) for r in runs}
    hosts: dict[Path, set] = {}  # a run that failed before recording its host gets its dir's
    for run in runs:
        recorded = (run.get("environment") or {}).get("platform")
        hosts.setdefault(where[id(run)], set()).update({recorded} - {None})
    units: dict[tuple, list[schema.Result]] = {}
    for run in runs:  # one unit per compare directory, precision, model, data and host
        directory = where[id(run)]
        platform = (run.get("environment") or {}).get("platform") or (
            next(iter(hosts[directory])) if len(hosts[directory]) == 1 else None)
        units.setdefault((str(directory), *_run_key(run), platform), []).append(run)
    pooled: dict[tuple, list[list[schema.Result]]] = {}
    for key, unit in units.items():
        environment = {fw: next((r.get("environment") for r in unit if r["framework"] == fw
                                 and r.get("environment")), None) for fw in FRAMEWORKS}
        pooled.setdefault((machine_of(environment)["id"], *key[1:-1]), []).append(unit)
    groups = []
    for units_of_group in pooled.values():
        group_runs = [r for unit in units_of_group for r in unit]
        parity, command, order = None, None, None
        planned: list[dict] = []
        for directory in dict.fromkeys(where[id(r)] for r in group_runs):
            previous = files.read_json_or_empty(files.ComparisonDir(directory).summary)
            if isinstance(previous.get("groups"), list):
                previous = {}
            found = parity_record.from_json(previous.get("parity"))
            if found is not None and (parity is None or not found["passed"]):
                parity = found  # a failed check anywhere in the group is the one to show
            command = command or previous.get("command")
            planned += previous.get("not_run") or []
            order = order or previous.get("order_note")
        directories = list(dict.fromkeys(where[id(r)] for r in group_runs))
        summary = summarise(group_runs, parity, command, planned, margin, order,
                            own_loops.load(directories),
                            next(filter(None, map(best.load, directories)), None),
                            next(filter(None, map(defaults.load, directories)), None))
        groups.append(Group(summary, group_runs,
                            ", ".join(sorted({str(where[id(r)]) for r in group_runs}))))
    return groups


def _summary_file(source: Path) -> Path | None:
    """The summary a source names: the file itself, or a directory's summary.json (else its
    combined.json); None when there is none."""
    if not source.is_dir():
        return source
    directory = files.ComparisonDir(source)
    for candidate in (directory.summary, directory.combined):
        if candidate.exists():
            return candidate
    return None


def build(sources: list[Path], out_dir: Path | None = None,
          margin: float = stats.EQUIVALENCE_MARGIN) -> Built:
    """`cnncompare report`: one report from result directories and shipped summaries.

    Each source is a directory with result files below it, a result file, a directory
    holding a summary.json (and no results), or a summary.json / combined.json file. The
    report goes to `out_dir`, else the first source that is a directory. One comparison
    writes summary.json there; several (machines, precisions) write combined.json and leave
    summary.json alone. Raises UserError when no readable result remains.
    """
    runs: list[schema.Result] = []
    summary_groups: list[Group] = []
    skipped: list[dict[str, str]] = []
    for source in map(Path, sources):
        found = files.results_under(source)
        if found:
            runs += load_runs(found)
            continue
        summary_file = _summary_file(source)
        if summary_file is None:
            continue
        try:
            summary_groups += [Group(s, None, str(summary_file))
                               for s in schema.read_summary(summary_file)]
        except schema.SchemaError as exc:
            skipped.append({"path": str(summary_file), "reason": str(exc)})
    skipped += [{"path": r["path"], "reason": r["unreadable"]} for r in runs if r.get("unreadable")]
    readable = [r for r in runs if not r.get("unreadable")]
    if not readable and not summary_groups:
        where = ", ".join(map(str, sources))
        why = f"; skipped {len(skipped)}: " + "; ".join(
            f"{s['path']} ({s['reason']})" for s in skipped) if skipped else ""
        raise UserError(f"no readable result (result.json or summary.json) under {where}{why}")
    groups = _groups_from_runs(readable, margin) + summary_groups
    for i, g in enumerate(groups):
        g.summary["skipped"] = skipped if i == 0 else []  # listed once, in the first
        g.summary["verdict"] = verdict_sentences(g.summary)
    if out_dir is None:
        out_dir = next((Path(s) for s in sources if Path(s).is_dir()), None)
        if out_dir is None:
            raise UserError("none of the sources is a directory to write the report into: "
                            "pass --out DIR")
    out_dir.mkdir(parents=True, exist_ok=True)
    directory = files.ComparisonDir(out_dir)
    if len(groups) == 1:
        paths = [files.write_json(directory.summary, groups[0].summary)]
    else:
        paths = [files.write_json(directory.combined, {
            "schema_version": schema.SUMMARY_VERSION, "machine_identity": MACHINE_IDENTITY,
            "groups": [g.summary for g in groups]})]
    return Built(paths + render(groups, out_dir), groups, skipped)


def rebuild(out_dir: Path, run_dirs: list[Path]) -> list[Path]:
    """The reports again from the result files under run_dirs, into out_dir; skipped files
    are named on stderr."""
    built = build(list(run_dirs), out_dir)
    for s in built.skipped:
        print(f"skipped {s['path']}: {s['reason']}", file=sys.stderr)
    return built.paths
