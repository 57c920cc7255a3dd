"""The rental's queue script (benchmarks/battery/rental.sh) on a CPU: every call brings back
what is on disk, a stage still running included."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_poll_brings_back_the_results_on_disk_without_data_or_checkpoints(tmp_path):
    """A comparison cut at the rental's deadline before the battery packed it left its runs'
    results on the device only (an H100 rental lost its 7 finished runs so): each call's
    live.tar.gz carries them, with the queue's log, and never the data or checkpoints."""
    rental, out = tmp_path / "rental", tmp_path / "out"
    run = rental / "battery" / "resnet9-verdict" / "runs" / "tf-seed0"
    for path, text in ((rental / "queue.log", "stage resnet9-verdict (both)\n"),
                       (run / "result.json", '{"summary": {}}'), (run / "steps.csv", "1,2\n"),
                       (run / "checkpoint" / "state.json", "{}"),
                       (rental / "battery" / "reference" / "cifar10" / "train.pt", "x"),
                       (rental / "battery" / "battery.json", "{}"),
                       (rental / "pack" / "battery.md", "| stage |\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out.mkdir()
    env = {**os.environ, "RENTAL_DIR": str(rental), "OUT": str(out)}
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "poll", "0"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "stage resnet9-verdict (both)" in done.stdout  # the queue's last lines, said
    with tarfile.open(out / "live.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"queue.log", "battery/battery.json",
            "battery/resnet9-verdict/runs/tf-seed0/result.json",
            "battery/resnet9-verdict/runs/tf-seed0/steps.csv"} <= names
    assert not any(n.endswith(".pt") or "/checkpoint" in n for n in names), names
    assert sorted(p.name for p in out.iterdir()) == ["battery.md", "live.tar.gz"]
