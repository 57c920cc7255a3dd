"""What each stage of the GPU battery runs, as its plan states it."""

from __future__ import annotations

import contextlib
import io
import re

from benchmarks import gpu_battery as battery

REPO_OUT = battery.REPO / "runs" / "battery"  # the plan's --out, resolved


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


def test_the_next_rentals_queue_is_the_verdict_warm_then_cold_within_its_device_time(tmp_path):
    """rental.sh's queue, as `--plan` lays it with the rental's own options: its first timed
    stages are the ResNet-9 verdict with both frameworks' compile caches warm, then cold, the
    same `compare` (3 seeds, own loops on, --best, each framework also at its default) into a
    folder each; laid in 15 minutes of device time with the machine's start and a call per
    part of the bundle (15 of its core and 7 of its CUDA 12 cuDNN, or as many as --bundle's
    SHA256SUMS list), and what does not run whole there named for the next rental."""
    from conftest import battery_plan
    options = ("--dataset", "folder", "--data-dir", "/tmp/rental/data", "--limit-factor", "4")
    plan = battery_plan(*options)
    laid = plan["rental"]
    queued = [row["item"] for row in laid["queue"] if row["phase"] == "queue"]
    assert queued[:2] == ["both:resnet9-verdict-warm:", "both:resnet9-verdict-cold:"]
    rows = {r["stage"]: r for r in plan["stages"]}
    for cache in ("warm", "cold"):
        (command,) = rows[f"resnet9-verdict-{cache}"]["commands"]
        assert f"--compile-cache {cache} " in command, command
        assert " compare " in command and "--framework" not in command  # both, alternated
        for option in ("--model resnet9", "--compile", "--best", "--seeds 3 ", "--own-loops"):
            assert option in command, (option, command)
        assert "--no-own-loops" not in command and "--no-defaults" not in command
        assert command.endswith(f"--out {REPO_OUT}/resnet9-verdict-{cache}")
    # the rental: every start and call counted, within its device time
    assert laid["parts"] == {"c": 15, "f": 7} and laid["device_calls"] == 24
    assert laid["parts_arrived_s"] >= 22 * laid["times"]["part_call_s"]
    assert laid["timed_from_s"] > laid["parts_arrived_s"]  # the timed stages after the parts
    assert laid["estimate_s"] <= laid["device_s"] == 900
    whole = [r["item"] for r in laid["queue"] if r["outcome"] == "runs whole"]
    assert sum(r["estimate_s"] for r in laid["queue"] if r["item"] in whole) \
        <= laid["timed_window_s"]
    assert laid["left_for_next"] == [item for item in queued if item not in whole]
    assert laid["fits"] == (not laid["left_for_next"])
    # the warm verdict's estimate holds its untimed warm-ups, which the cold one has none of
    assert "the warm-ups, untimed" in rows["resnet9-verdict-warm"]["estimated_how"]
    assert "warm-ups" not in rows["resnet9-verdict-cold"]["estimated_how"]
    # the parts as the bundle lists them
    bundle = tmp_path / ".tfgpu"
    bundle.mkdir()
    (bundle / "SHA256SUMS").write_text("".join(
        f"{'0' * 64}  {f}{i:02d}/{f}.{i:02d}\n" for f, n in (("f", 8), ("c", 16))
        for i in range(n)))
    more = battery_plan(*options, "--bundle", str(bundle))["rental"]
    assert more["parts"] == {"f": 8, "c": 16} and more["device_calls"] == 26
    assert more["timed_from_s"] - laid["timed_from_s"] == 2 * laid["times"]["part_call_s"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert battery.main(["--plan", "--rental", *options]) == 0
    said = printed.getvalue()
    assert "both:resnet9-verdict-warm:" in said and "left for the next rental:" in said
    assert f"device time: {laid['estimate_s']} s of 900 s" in said


def test_no_stage_warms_one_frameworks_compile_cache_before_a_timed_comparison():
    """A warm comparison warms both frameworks itself (compare --compile-cache warm); no stage
    of the battery runs one framework compiled to leave its cache for a later comparison:
    every single-framework run is cold (cnncompare's default), only a comparison of both
    asks for warm caches, and what rental.sh runs before the verdicts compiles nothing."""
    ctx = battery.context(battery.arguments(["--plan", "--dataset", "folder", "--data-dir",
                                             "/tmp/rental/data"]))
    assert "warm" not in {s.name for s in battery.STAGES}
    for stage in battery.STAGES:
        for framework in stage.frameworks:
            for argv in stage.commands(framework, ctx):
                command = " ".join(argv)
                if "--compile-cache warm" in command:
                    assert " compare " in command and "--framework" not in command, command
    from benchmarks.battery import rental
    untimed, timed = rental.queue_items()
    by_name = {s.name: s for s in battery.STAGES}
    before = untimed + timed[:timed.index("both:resnet9-verdict-warm:")] + ["tf:tf-smoke:"]
    for item in before:
        framework, name, _ = item.split(":")
        for argv in by_name[name].commands(framework, ctx):
            assert "--compile" not in argv, (item, argv)  # --no-compile and the like apart
