"""A short rental's queue (benchmarks/battery/rental.sh) laid out in device time: the machine's
start, the bundle's parts carried one a call while untimed stages run, then the timed stages
in the queue's order up to its deadline, as the battery starts, skips or cuts them; what fits,
and what is left for the next rental."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks.battery.bundle import parts as bundle_parts
from benchmarks.battery.calls import estimate_of
from benchmarks.battery.estimates import Context
from benchmarks.battery.stages import SPARE_S, STAGES

RENTAL_SH = Path(__file__).with_name("rental.sh")


@dataclass(frozen=True)
class RentalTimes:
    """A rental's device time, every start, call and wait counted (seconds)."""

    device_s: float = 15 * 60  # what a rental lends, the machine's start included
    # the machine's start before the first call runs: 39 s (the H200's third rental), 36 s
    # (the H100's sixth); once 190 s (the H100's fifth), which leaves less for the timed stages
    machine_start_s: float = 40.0
    # `rental.sh start`: the data unpacked and the checkout copied before the queue starts
    # (the H200's first part call came 18 s after it)
    start_call_s: float = 20.0
    # one call carrying one part of the bundle: 9.6 s apart on the H200 (12 parts, c00 at
    # +18 s, c11 at +124 s), 7.5 s on the H100's sixth rental
    part_call_s: float = 10.0
    # after the last part: the core's last bytes and the fallback cuDNN (its 7 parts) unpacked
    # (assumed: each part is streamed into xz as it comes; the fallback unpacks after the core)
    unpack_s: float = 20.0
    stage_start_s: float = 3.0  # each stage's battery process starting (queue.log: 1-4 s)
    return_s: float = 15.0  # the last call's reply with the pack, and the hand-back


TIMES = RentalTimes()
# The bundle's parts where no --bundle is given to count them from its SHA256SUMS: the build of
# 2026-12-02 (../shared/tools/tf-gpu-bundle/README.md): 15 of the core, 7 of the CUDA 12 cuDNN
BUNDLE_PARTS = {"c": 15, "f": 7}


def queue_items(script: Path = RENTAL_SH) -> tuple[list[str], list[str]]:
    """rental.sh's queue as it runs it without RENTAL_ORDER: its untimed items (run while the
    bundle arrives) and its timed ones, each framework:stage:seeds."""
    text = script.read_text()
    lists = {}
    for name in ("untimed", "timed"):
        found = re.search(rf"local {name}=\(([^)]*)\)", text)
        if found is None:
            raise SystemExit(f"gpu_battery.py: {script}: no `local {name}=(...)` list")
        lists[name] = found.group(1).split()
    return lists["untimed"], lists["timed"]


def part_counts(bundle: Path | None) -> dict[str, int]:
    """The bundle's parts by family (c: the core, f: the CUDA 12 cuDNN), read from its
    SHA256SUMS where given."""
    if bundle is None:
        return dict(BUNDLE_PARTS)
    return {family: len(listed) for family, listed in bundle_parts(bundle).items()}


def _item(item: str, ctx: Context) -> dict:
    framework, name, seeds = (item.split(":") + ["", ""])[:3]
    stage = next((s for s in STAGES if s.name == name), None)
    if stage is None or framework not in stage.frameworks:
        raise SystemExit(f"gpu_battery.py: rental.sh's queue names {item}: no such stage")
    seconds, _, least = estimate_of(stage, framework,
                                    replace(ctx, seeds=int(seeds)) if seeds else ctx)
    return {"item": item, "timed": stage.timed, "estimate_s": round(seconds),
            "least_s": round(least)}


def lay(ctx: Context, parts: dict[str, int] | None = None, times: RentalTimes = TIMES,
        script: Path = RENTAL_SH) -> dict:
    """The next rental as rental.sh's queue runs it, each item with when it starts (device
    seconds from the lease's start) and what becomes of it: it runs whole, it is cut at the
    deadline, or it is skipped (the battery starts a stage only when the time left holds its
    usable share) or never reached, and so left for the next rental."""
    parts = parts if parts is not None else dict(BUNDLE_PARTS)
    untimed, timed = queue_items(script)
    deadline = times.device_s - times.return_s  # the queue's: the last poll returns then
    queue_at = times.machine_start_s + times.start_call_s
    carried = sum(parts.values())
    parts_end = queue_at + carried * times.part_call_s
    rows, now = [], queue_at
    for item in untimed:  # while the parts come
        row = _item(item, ctx)
        rows.append({**row, "at_s": round(now), "phase": "transfers",
                     "outcome": "runs, while the parts come"})
        now += row["estimate_s"] + times.stage_start_s
    now = max(now, parts_end + times.unpack_s)  # TensorFlow in place
    smoke = _item("tf:tf-smoke:", ctx)
    rows.append({**smoke, "at_s": round(now), "phase": "tensorflow",
                 "outcome": "runs, once TensorFlow is in place"})
    now += smoke["estimate_s"] + times.stage_start_s
    window = (now, deadline - SPARE_S)  # the battery keeps SPARE_S for its pack
    left_over = []
    for item in timed:
        row, start = _item(item, ctx), now
        usable = deadline - now - times.stage_start_s - SPARE_S  # the battery's, less its pack
        if deadline - now - SPARE_S <= 20:  # a stage cut at the deadline, or the queue stops
            outcome = "not reached: the queue's time is spent"
        elif row["least_s"] > usable:
            outcome = (f"skipped: its usable share ({row['least_s']} s) exceeds the "
                       f"{max(0, usable):.0f} s left")
            now += times.stage_start_s
        elif row["estimate_s"] <= usable:
            outcome = "runs whole"
            now += row["estimate_s"] + times.stage_start_s
        else:
            outcome = (f"starts, cut at the deadline after {usable:.0f} s of its "
                       f"{row['estimate_s']} s")
            now = deadline - SPARE_S
        rows.append({**row, "at_s": round(start), "phase": "queue", "outcome": outcome})
        if outcome != "runs whole":
            left_over.append(item)
    used = min(now + SPARE_S if left_over else now, deadline) + times.return_s
    return {"device_s": times.device_s, "times": asdict(times), "parts": parts,
            "device_calls": 1 + carried + 1,  # start, a call per part, hold (its wait polls)
            "rental_sh_start_s": round(deadline - times.machine_start_s),
            "parts_arrived_s": round(parts_end), "timed_from_s": round(window[0]),
            "timed_until_s": round(window[1]), "timed_window_s": round(window[1] - window[0]),
            "queue": rows, "estimate_s": round(used),
            "queued_s": sum(r["estimate_s"] for r in rows if r["phase"] == "queue"),
            "fits": not left_over and used <= times.device_s, "left_for_next": left_over}


def render(laid: dict) -> str:
    """The laid-out rental as lines to read."""
    t = laid["times"]
    parts = ", ".join(f"{n} {'core' if f == 'c' else 'CUDA 12 cuDNN' if f == 'f' else f}"
                      for f, n in laid["parts"].items())
    lines = [f"The next rental: {laid['device_s'] / 60:.0f} minutes of device time, "
             f"rental.sh's queue (benchmarks/battery/rental.sh), seconds from the lease's start",
             f"  +0       the machine starts ({t['machine_start_s']:.0f} s)",
             f"  +{t['machine_start_s']:<7.0f} rental.sh start {laid['rental_sh_start_s']} "
             f"(the data unpacked, the checkout copied: {t['start_call_s']:.0f} s)",
             f"  then     {laid['device_calls'] - 2} part calls ({parts}; the fNN first), "
             f"{t['part_call_s']:.0f} s each, the last at +{laid['parts_arrived_s']}; then "
             f"hold (TensorFlow unpacked {t['unpack_s']:.0f} s after)"]
    for row in laid["queue"]:
        lines.append(f"  +{row['at_s']:<7} {row['item']:<30} {row['estimate_s']:>5} s  "
                     f"{'timed' if row['timed'] else 'untimed':<7} {row['outcome']}")
    lines += [f"  timed stages from +{laid['timed_from_s']} to +{laid['timed_until_s']} "
              f"({laid['timed_window_s']} s; the battery keeps {SPARE_S} s for its pack)",
              f"  device time: {laid['estimate_s']} s of {laid['device_s']:.0f} s"
              f" (the last call's reply and the hand-back: {t['return_s']:.0f} s)",
              f"  the queue after the parts: {laid['queued_s']} s, in a window of "
              f"{laid['timed_window_s']} s",
              "  left for the next rental: " + (", ".join(laid["left_for_next"]) or "nothing")]
    return "\n".join(lines) + "\n"
