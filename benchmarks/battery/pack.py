"""The battery's summary (battery.json, battery.md) and the pack of at most PACK_FILES files
that comes back from a device command."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

from benchmarks.battery.commands import CLI
from benchmarks.battery.running import run_command
from benchmarks.battery.stages import PACK_FILES, PACK_TAR_BYTES


def markdown(battery: dict) -> str:
    lines = [f"# GPU battery, {battery['started_at']}", "",
             f"Machine: {battery['machine']}; device: {battery['device']}"
             + (" (tiny plumbing run: {images} synthetic images, batch {batch}, {epochs} "
                "epoch, {seeds} seed, each stage's limit {limit_s} s; precision: {precision})"
                .format(**battery["tiny"]) if battery["tiny"] else ""), "",
             "| stage | framework | status | seconds | estimate | limit | figures |",
             "|---|---|---|---|---|---|---|"]
    for s in battery["stages"]:
        # a timed stage that shared its host says so in its row, which a rental's poll shows
        status = s["status"] + (f"; host not quiet ({s['host']['sightings']} sightings)"
                                if s.get("host_note") else "")
        lines.append(f"| {s['stage']} | {s['framework']} | {status} | "
                     f"{s.get('seconds', 0):.0f} | {s['estimate_s']} | {s['limit_s']} | "
                     f"{_brief(s)} |")
    for s in battery["stages"]:
        if s.get("host_note"):
            lines.append(f"- {s['stage']} ({s['framework']}): {s['host_note']}")
    latest = {s["stage"]: s for s in battery["stages"] if s.get("comparison")}
    for s in latest.values():  # a comparison's figures once, as its latest part left them
        for fw, f in ((s.get("figures") or {}).get("frameworks") or {}).items():
            lines.append(f"- {s['stage']} {fw}: " + ", ".join(
                f"{k} {v:.4g}" for k, v in f.items() if isinstance(v, (int, float))))
    return "\n".join(lines) + "\n"


def _brief(stage: dict) -> str:
    f = stage.get("figures") or {}
    if "verdict" in f and isinstance(f["verdict"], str):
        return f["verdict"].replace("|", "/")[:120]
    if "summary" in f:
        return str(f["summary"])[:120]
    if "parity_passed" in f:
        return f"parity {'passed' if f['parity_passed'] else f['parity_passed']}"
    if "rows" in f:
        return "; ".join(f"{r.get('settings')} {r.get('status')}" for r in f["rows"])[:120]
    if "ratios" in f:
        return "; ".join(f"{k}: tool/bare {v:.3f}" if v else f"{k}: n/a"
                         for k, v in f["ratios"].items())
    return ""


def write_summary(battery: dict, out: Path) -> None:
    (out / "battery.json").write_text(json.dumps(battery, indent=2))
    (out / "battery.md").write_text(markdown(battery))


def pack(out: Path, target: Path) -> list[Path]:
    """At most PACK_FILES files directly in `target`: the summary, one report over every
    comparison, and a tar.gz of logs and results (no models, checkpoints or traces). Built
    beside `target` and moved in file by file (each move atomic), then the previous pack's
    other files removed: a command killed while packing leaves the previous pack whole."""
    building = target.parent / f".{target.name}.partial"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    files = _build_pack(out, building)
    target.mkdir(parents=True, exist_ok=True)
    moved = []
    for path in files:
        os.replace(path, target / path.name)
        moved.append(target / path.name)
    for old in target.iterdir():  # the previous pack's files this one does not replace
        if old.is_file() and old not in moved:
            old.unlink()
    shutil.rmtree(building, ignore_errors=True)
    return moved


def _build_pack(out: Path, target: Path) -> list[Path]:
    written = [shutil.copy(out / name, target / name) for name in ("battery.json", "battery.md")]
    comparisons = sorted(p.parent for p in out.glob("*/compare.json"))
    if comparisons:
        report_dir = out / "report"
        shutil.rmtree(report_dir, ignore_errors=True)  # one report of what is there now
        run_command([*CLI, "report", *map(str, comparisons), "--out", str(report_dir)],
                    out / "logs" / "report.log", 300)
        for name in ("summary.json", "combined.json", "report.md", "report.html"):
            if (report_dir / name).exists():
                written.append(shutil.copy(report_dir / name, target / name))
    archive = target / "battery-results.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and _packed(path.relative_to(out)):
                tar.add(path, arcname=str(path.relative_to(out)))
    if archive.stat().st_size > PACK_TAR_BYTES:  # the logs and summaries alone
        with tarfile.open(archive, "w:gz") as tar:
            for path in sorted(out.rglob("*")):
                if path.is_file() and path.suffix in (".log", ".json", ".md", ".xml"):
                    tar.add(path, arcname=str(path.relative_to(out)))
    written.append(archive)
    return [Path(p) for p in written][:PACK_FILES]


def _packed(relative: Path) -> bool:
    parts = set(relative.parts)
    return not (parts & {"checkpoint", "tensorboard", "profile", "parity", "report"}
                or relative.suffix in (".pt", ".keras", ".npz", ".pb")
                or relative.name.startswith(".cnncompare"))
