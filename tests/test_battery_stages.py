"""What each stage of the GPU battery runs, as its plan states it."""

from __future__ import annotations

import re

from benchmarks import gpu_battery as battery


def test_every_training_command_names_the_schedule_its_stage_describes():
    """A network's own default schedule never runs in place of the stage's: each compare and
    sweep command passes its epochs and batch, and a sweep's description states them."""
    ctx = battery.context(battery.arguments(["--plan"]))
    rows = battery.plan(battery.STAGES, battery.FRAMEWORKS, ctx)
    checked = 0
    for row in rows:
        for command in row["commands"]:
            if " compare " not in command and " sweep " not in command:
                continue
            epochs = int(re.search(r"--epochs (\d+)", command).group(1))
            batch = int(re.search(r"--batch-size (\d+)", command).group(1))
            checked += 1
            if " sweep " in command:
                assert f"batch {batch}, {epochs} epoch" in row["what"], (row["stage"], command)
    assert checked >= 20  # every comparison and sweep of both frameworks
