"""The GPU battery's plumbing on the CPU: its plan fits a rental, every stage runs in a tiny
form, the summary is rewritten after each stage and the pack fits what a rental returns."""

from __future__ import annotations

import json
import os
import re
import sys
import tarfile
from pathlib import Path

import pytest
from bundles import activated_bundle
from conftest import battery_plan, patience

from benchmarks import gpu_battery as battery
from benchmarks.battery import calls as battery_calls
from benchmarks.battery import running
from benchmarks.battery import stages as battery_stages
from benchmarks.battery.commands import TINY_SKIPPED, checkout_commit

REPO = Path(__file__).resolve().parent.parent


def test_the_plan_fits_a_rental_with_pytorch_first_and_says_how_each_estimate_was_made():
    plan = battery_plan()
    rows = plan["stages"]
    assert {r["stage"] for r in rows} == {s.name for s in battery.STAGES}
    # each stage's limit within a 10-minute command (a queue-only stage's within its own
    # maximum), its estimate within the limit
    maxima = {s.name: s.max_limit_s for s in battery.STAGES}
    assert all(0 < r["estimate_s"] < r["limit_s"] <= maxima[r["stage"]] and r["estimated_how"]
               and r["commands"] for r in rows)
    assert {n for n, m in maxima.items() if m > 570} == {
        "resnet9-verdict-warm", "resnet9-verdict-cold", "resnet9-own-best", "resnet9-eager",
        "resnet9-own"}
    core = [r for r in rows if r["core"]]
    assert [r["framework"] for r in core] == ["torch"] * 5 + ["tf"] * 6  # PyTorch's first
    assert [r["stage"] for r in core][5:7] == ["tf-smoke", "doctor"]  # TF's first GPU op first
    assert rows[:len(core)] == core  # then the sweeps
    by_rental: dict[int, float] = {}
    for r in rows:  # each rental holds what its GPU time allows (a longer stage, alone)
        by_rental[r["rental"]] = by_rental.get(r["rental"], 0) + r["estimate_s"]
    assert all(total <= battery_stages.RENTAL_S
               or sum(r["rental"] == n for r in rows) == 1 for n, total in by_rental.items())
    assert sorted(by_rental) == list(range(1, len(by_rental) + 1))
    assert max(r["rental"] for r in core) <= min(r["rental"] for r in rows if not r["core"])
    calls = plan["calls"]  # device commands of at most 9 minutes, one framework each
    assert all((c["estimate_s"] <= 540 or len(c["stages"]) == 1)
               and f"--framework {c['framework']}" in c["command"] for c in calls)
    assert sum(len(c["stages"]) for c in calls) == len(rows)
    assert "GFLOP/image" in core[1]["estimated_how"]  # from FLOPs and the CPU's fixed cost
    torch_only = battery_plan("--framework", "torch", "--stage", "resnet9-mixed")["stages"]
    assert [(r["stage"], r["framework"]) for r in torch_only] == [("resnet9-mixed", "torch")]
    assert "--target-accuracy 0.94" in torch_only[0]["commands"][0]
    assert "--framework torch" in torch_only[0]["commands"][0]


def test_seeds_for_a_short_rental_reach_every_comparison_and_its_estimate():
    one = {r["stage"]: r for r in battery_plan("--seeds", "1", "--framework", "torch")["stages"]}
    own = {r["stage"]: r for r in battery_plan("--framework", "torch")["stages"]}
    assert "--seeds 1 " in one["lenet-mixed"]["commands"][0]
    assert "--seeds 2 " in own["lenet-mixed"]["commands"][0]  # the stage's own: the recipe's
    assert one["lenet-mixed"]["estimate_s"] * 2 == pytest.approx(own["lenet-mixed"]["estimate_s"],
                                                                 abs=1)
    assert one["doctor"] == own["doctor"]  # not a comparison


def test_estimates_of_runs_measured_on_a_gpu_match_those_runs():
    """Each training run the battery made on an H200 (benchmarks/results/gpu-h200-lenet-mixed/,
    benchmarks/results/gpu-h200-resnet9-mixed/ and the verdict's compiled runs,
    benchmarks/results/gpu-h200-resnet9-verdict/) and an H100 (benchmarks/results/gpu-h100/
    mobilenetv2-mixed/ and gpu-h100-resnet18-mixed/; not TensorFlow's MobileNetV2 there, stopped
    well into an epoch it did not finish), against the plan's estimate of that run over the
    epochs it ran:
    within 15% of its wall time, so a queue under one deadline skips what would not fit and
    lets the rest run."""
    from datetime import datetime
    ctx = battery.context(battery.arguments(["--plan"]))
    results = REPO / "benchmarks" / "results"
    found = sorted(path for comparison in ("gpu-h200-lenet-mixed", "gpu-h200-resnet9-mixed",
                                           "gpu-h200-resnet9-verdict",
                                           "gpu-h100/mobilenetv2-mixed",
                                           "gpu-h100-resnet18-mixed")
                   for path in (results / comparison).glob("runs/*/result.json"))
    assert len(found) >= 13
    for path in found:
        result = json.loads(path.read_text())
        if len(result["sessions"]) != 1:  # resumed: two processes' fixed costs
            continue
        c = result["config"]
        recipe = battery_stages.Recipe(  # a run cut short: its own epochs; compiled or not
            c["model"], c["precision"], c["batch_size"], len(result["epochs"]), 1,
            compiled=c["compile"],  # the H200 verdict's: XLA's cache cold, PyTorch's warm
            compile_cache="cold" if c["framework"] == "tf" else "warm")
        estimate, how = battery_stages.run_seconds(c["framework"], recipe, ctx)
        took = (datetime.fromisoformat(result["finished_at"])
                - datetime.fromisoformat(result["started_at"])).total_seconds()
        assert estimate == pytest.approx(took, rel=0.15), (path, how)
        gpu = result["environment"]["hardware"]["device_model"].split()[1]  # H200, H100
        assert how.startswith(f"measured on an NVIDIA {gpu}"), how


def test_the_battery_trains_on_real_cifar10_unless_tiny(tmp_path):
    """A time to 94% on synthetic data would mean nothing: without --data-dir or the archive
    in the cache ($CNNCOMPARE_HOME, empty here) the battery refuses in one line."""
    with pytest.raises(SystemExit, match="trains on real CIFAR-10: pass --data-dir"):
        battery.main(["--out", str(tmp_path / "b")])
    with pytest.raises(SystemExit):  # synthetic is not a choice: --tiny is
        battery.arguments(["--dataset", "synthetic"])
    commands = [c for row in battery_plan()["stages"] for c in row["commands"]
                if " compare " in c or " sweep " in c]
    assert commands and all("--dataset cifar10" in c for c in commands)


def test_rental_calls_carry_the_data_and_the_bundle_and_rebuild_it_on_the_device(tmp_path):
    """--plan --bundle --carry-data: each call one bash line within 2,000 characters and
    64 MiB of carry; run here in order (the battery replaced by a line saying what its process
    is given), the setups unpack the data, check and join the parts, every TensorFlow call runs
    with the checkout and the activated bundle on its path, and the fallback cuDNN's calls,
    made when the smoke test failed, unpack it and activate it for every later call."""
    import hashlib
    import io
    import subprocess
    import tarfile
    root, scratch = tmp_path / "checkout", tmp_path / "device"
    (root / ".tfgpu").mkdir(parents=True)
    scratch.mkdir()
    def archive(files: dict[str, bytes]) -> bytes:
        held = io.BytesIO()
        with tarfile.open(fileobj=held, mode="w:xz") as tar:
            for name, content in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        return held.getvalue()
    # what the bundle holds: site/activate.sh, which puts its folder on PYTHONPATH and says
    # which cuDNN it chose; and apart, its fallback cuDNN
    activate = (b'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\n'
                b'export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" '
                b'BUNDLE_ACTIVE="yes${1:+ $1}"\n')
    sums = []
    for kind, blob in (("c", archive({"site/activate.sh": activate})),
                       ("f", archive({"site/nvidia/cudnn_cu12_fallback/lib/x.so": b""}))):
        for i in range(3 if kind == "c" else 2):  # in parts, as build.sh splits it
            part = root / ".tfgpu" / f"{kind}{i:02d}" / f"{kind}.{i:02d}"
            part.parent.mkdir()
            part.write_bytes(blob[i * len(blob) // 3:(i + 1) * len(blob) // 3] if kind == "c"
                             else blob[i * len(blob) // 2:(i + 1) * len(blob) // 2])
            sums.append(f"{hashlib.sha256(part.read_bytes()).hexdigest()}  "
                        f"{kind}{i:02d}/{kind}.{i:02d}")
    (root / ".tfgpu" / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    images = io.BytesIO()
    with tarfile.open(fileobj=images, mode="w:gz") as tar:
        info = tarfile.TarInfo("train/cat/0.jpg")
        tar.addfile(info, io.BytesIO(b""))
    (root / ".data").mkdir()
    (root / ".data" / "cifar10-jpeg.tar.gz").write_bytes(images.getvalue())
    calls = battery_calls.rental_calls(battery_plan()["calls"], root, root / ".tfgpu",
                                 root / ".data" / "cifar10-jpeg.tar.gz", scratch=str(scratch))
    assert all(len(c["bash"]) <= 2000 and c["carry_bytes"] <= 64 * 2**20 for c in calls)
    # the commit the plan was made at goes with each call: the device's copy has no .git
    assert all(f"BATTERY_COMMIT={checkout_commit()} PYTHONPATH=." in c["bash"]
               for c in calls if c["stages"])
    assert calls[0]["carry"] == [".data/cifar10-jpeg.tar.gz"]
    carried = [p for c in calls for p in c["carry"] if p.startswith(".tfgpu/c")]
    assert carried == [".tfgpu/c00", ".tfgpu/c01", ".tfgpu/c02"]  # one a call, in order
    assert all(f"--dataset folder --data-dir {scratch}/cnncompare-data" in c["bash"]
               for c in calls if c["stages"])
    first_tf = next(i for i, c in enumerate(calls) if c["framework"] == "tf")
    contingent = [c for c in calls if c.get("only_if")]
    assert [p for c in contingent for p in c["carry"] if p.startswith(".tfgpu/f")] == [
        ".tfgpu/f00", ".tfgpu/f01"] and calls[first_tf + 1:first_tf + 3] == contingent
    assert contingent[-1]["stages"] == calls[first_tf]["stages"]  # that call, again
    # every call as the device runs it, the battery replaced by what its process is given
    shown = "import os; print(os.environ['PYTHONPATH'], '|', os.environ.get('BUNDLE_ACTIVE'))"
    seen = []
    for i, call in enumerate(calls):
        if i == first_tf + 1:  # the smoke test failed on the machine's cuDNN, and passed on
            (scratch / "tfgpu" / "cudnn-choice").write_text("fallback\n")  # the fallback
        done = subprocess.run(["bash", "-c", call["bash"].replace(
            "python -m benchmarks.gpu_battery", f"{sys.executable} -c \"{shown}\"")],
            cwd=root, capture_output=True, text=True, timeout=patience(60))
        assert done.returncode == 0, done.stderr
        seen.append((call["framework"], bool(call["stages"]), done.stdout.strip()))
    site = f"{scratch}/tfgpu/site"
    for i, (framework, runs, said) in enumerate(seen):
        if framework == "tf":  # the checkout first, then the bundle, activated in each call
            fallback = " fallback" if i > first_tf else ""
            assert said == f".:{site} | yes{fallback}", (i, said)
        elif runs:
            assert said == ". | None", (i, said)  # PyTorch's calls: no bundle
    assert (scratch / "tfgpu" / "site" / "nvidia" / "cudnn_cu12_fallback").is_dir()
    assert (scratch / "cnncompare-data" / "train" / "cat" / "0.jpg").exists()
    (root / ".tfgpu" / "c01" / "c.01").write_bytes(b"torn")  # a part that arrived damaged
    broken = battery_calls.rental_calls(battery_plan()["calls"], root, root / ".tfgpu", None,
                                  scratch=str(tmp_path / "again"))
    (tmp_path / "again").mkdir()
    results = [subprocess.run(["bash", "-c", c["setup"]], cwd=root, capture_output=True)
               for c in broken if ".tfgpu/c01" in c["carry"]]
    assert results and results[0].returncode != 0  # its sum does not match: stop there


def test_time_left_keeps_a_spare_minute_for_packing(tmp_path, monkeypatch):
    """--time-left 70: 60 s are kept for the pack and the command's end, so doctor (estimated
    at 22 s: two processes' start-up and 10 s of steps) does not start in the 10 s left; it
    is recorded as skipped with the reason. The set-up before it takes well under a second.
    battery.json records the commit the checkout is at (BATTERY_COMMIT in a rental)."""
    monkeypatch.setenv("BATTERY_COMMIT", "abc1234")
    assert battery.main(["--tiny", "--device", "cpu", "--framework", "torch", "--stage",
                         "doctor", "--time-left", "70", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "battery.json").read_text())
    assert summary["commit"] == "abc1234"
    (stage,) = summary["stages"]
    assert stage["status"] == "skipped", stage
    left = int(re.search(r"exceeds the (\d+) s left", stage["note"]).group(1))
    assert 0 <= left <= 10, stage["note"]


def test_the_plan_keeps_the_data_options_in_every_call():
    calls = battery_plan("--dataset", "cifar10", "--data-dir", "/data/cifar-10-batches-py")["calls"]
    assert calls and all("--dataset cifar10 --data-dir /data/cifar-10-batches-py" in c["command"]
                         for c in calls)
    assert all(len(c["command"]) <= 2000 for c in calls)  # what one device command may hold


def test_a_gpu_test_stage_where_every_test_skipped_fails_with_the_reasons(tmp_path):
    """pytest exits 0 when every test skips; on a GPU host that is a failed stage."""
    def report(*cases):
        path = tmp_path / f"r{len(cases)}{cases[0][1] if cases else ''}.xml"
        path.write_text("<testsuites><testsuite>" + "".join(
            f'<testcase name="{name}">' + (f'<skipped message="{why}"/>' if why else "")
            + "</testcase>" for name, why in cases) + "</testsuite></testsuites>")
        return path
    assert running.every_test_skipped(report(("a", "TensorFlow sees no GPU here"),
                                             ("b", "TensorFlow sees no GPU here"))) == [
        "TensorFlow sees no GPU here"]
    assert running.every_test_skipped(report(("a", "no GPU"), ("b", ""))) is None  # b ran
    assert running.every_test_skipped(report()) == ["no test ran"]
    assert running.every_test_skipped(tmp_path / "missing.xml") == ["no test report was written"]


def test_a_pack_killed_midway_leaves_the_previous_pack_whole(tmp_path, monkeypatch):
    out, target = tmp_path / "out", tmp_path / "pack"
    out.mkdir()
    for name, text in (("battery.json", '{"stages": []}'), ("battery.md", "# first")):
        (out / name).write_text(text)
    first = sorted(p.name for p in battery.pack(out, target))
    assert sorted(p.name for p in target.iterdir()) == first
    (out / "battery.md").write_text("# second")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as SIGINT or the call's limit would, while archiving
    monkeypatch.setattr(tarfile, "open", killed)
    with pytest.raises(KeyboardInterrupt):
        battery.pack(out, target)
    assert sorted(p.name for p in target.iterdir()) == first
    assert (target / "battery.md").read_text() == "# first"
    monkeypatch.undo()
    battery.pack(out, target)
    assert (target / "battery.md").read_text() == "# second"


@pytest.mark.slow  # the first device call's stages in PyTorch, tiny: about a minute
def test_the_first_call_rehearsed_as_on_a_bare_gpu_host(tmp_path):
    """As a rented GPU machine runs the first call: a Python without TensorFlow, Keras or
    tensorflow-datasets (hidden from every process by a sitecustomize) and the checkout on
    PYTHONPATH. The plan's first call (PyTorch's stages) completes; a TensorFlow stage fails
    with one line that says why."""
    import subprocess
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "sitecustomize.py").write_text(
        "import sys\n"
        "for name in ('tensorflow', 'keras', 'tensorflow_datasets'):\n"
        "    sys.modules[name] = None  # import fails, find_spec says not installed\n")
    first = battery_plan()["calls"][0]
    assert first["framework"] == "torch"
    out = tmp_path / "battery"
    stages = [x for name in first["stages"] for x in ("--stage", name)]
    env = {**os.environ, "PYTHONPATH": f"{bare}:{REPO}"}
    for framework, chosen in (("torch", stages), ("tf", ["--stage", "doctor"])):
        subprocess.run([sys.executable, "-m", "benchmarks.gpu_battery",
                        "--device", "cpu", "--tiny", "--framework", framework, *chosen,
                        "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=patience(300))
    done = {(s["stage"], s["framework"]): s
            for s in json.loads((out / "battery.json").read_text())["stages"]}
    twins = {s.name for s in battery_stages.STAGES if s.tiny_cpu_twin}  # skipped: their twins run
    assert all(done[(name, "torch")]["status"] == ("skipped" if name in twins else "ok")
               for name in first["stages"]), done
    assert twins & set(first["stages"])  # the call holds a mixed stage that says so
    tf_doctor = done[("doctor", "tf")]
    assert tf_doctor["status"] == "failed" and "\n" not in tf_doctor["note"]
    assert "not installed" in tf_doctor["note"], tf_doctor["note"]


# Not machine-sensitive: on a CPU --tiny trains float32 only (no emulated bfloat16), and each
# stage's limit (570 s) is over 25x its work here (at most 20 s on a 2-core Xeon).
@pytest.mark.slow  # every stage of the battery in both frameworks: about 3 minutes on 2 cores
def test_the_whole_plan_runs_tiny_on_the_cpu_and_packs_at_most_eight_files(tmp_path,
                                                                          monkeypatch):
    out, packed = tmp_path / "out", tmp_path / "pack"
    seen = []
    original = battery.pack

    def pack(source, target):
        seen.append(len(json.loads((source / "battery.json").read_text())["stages"]))
        return original(source, target)
    monkeypatch.setattr(battery, "pack", pack)
    code = battery.main(["--device", "cpu", "--tiny", "--out", str(out), "--pack", str(packed)])
    summary = json.loads((out / "battery.json").read_text())
    failed = [s for s in summary["stages"] if s["status"] not in ("ok", "skipped")]
    logs = {(s["stage"], s["framework"]): out / "logs" / f"{s['stage']}-{s['framework']}.log"
            for s in failed}
    assert code == 0 and not failed, "\n".join(  # each failed stage with the end of its log
        f"{stage} ({framework}):\n" + "".join(log.read_text().splitlines(True)[-15:])
        for (stage, framework), log in logs.items())
    tiny = summary["tiny"]  # what it chose, so that it finishes on any CPU
    assert (tiny["images"], tiny["batch"], tiny["epochs"]) == (battery.TINY.images,
                                                               battery.TINY.batch, 1)
    assert tiny["precision"].startswith("fp32 for every stage")
    assert all("--precision mixed" not in command["argv"]
               for stage in summary["stages"] for command in stage.get("commands", []))
    planned = battery_plan()["stages"]
    assert [(s["stage"], s["framework"]) for s in summary["stages"]] == [
        (r["stage"], r["framework"]) for r in planned]
    skipped = {s["stage"]: s["note"] for s in summary["stages"] if s["status"] == "skipped"}
    # every GPU test ran and skipped: "skipped" for want of a GPU, never "ok"
    assert skipped.pop("gpu-tests").startswith("no GPU: every GPU test skipped: needs a CUDA GPU")
    assert skipped == {**{name: TINY_SKIPPED for name in (
                           "resnet18-mixed", "mobilenetv2-mixed", "resnet9-long",
                           "resnet9-verdict-warm", "resnet9-verdict-cold", "resnet9-own-best",
                           "resnet9-eager", "resnet9-own", "resnet9-page")},
                       "reference": "--tiny: airbench trains on a CUDA GPU only",
                       "prime": "--tiny: no image folder to decode",
                       "kernels": "--tiny: no GPU kernels to read",
                       "cudnn": "--tiny: no cuDNN builds to set side by side on a CPU",
                       "suite": "--tiny: the test suite, which runs the tiny battery itself",
                       # float32 on a CPU: their commands are lenet-fp32's and resnet9-fp32's
                       "lenet-mixed": "--tiny on a CPU trains float32: the commands of "
                                      "lenet-fp32, which runs",
                       "resnet9-mixed": "--tiny on a CPU trains float32: the commands of "
                                        "resnet9-fp32, which runs"}
    assert all(s["status"] == "ok" for s in summary["stages"]
               if s["stage"] not in skipped and s["stage"] != "gpu-tests"), \
        summary["stages"]
    assert seen == list(range(1, len(planned) + 1))  # rewritten and packed after every stage
    files = list(packed.iterdir())
    assert len(files) <= 8 and all(f.is_file() and f.stat().st_size < 16 * 2**20 for f in files)
    combined = json.loads((packed / "combined.json").read_text())
    # lenet and resnet9: on a CPU the tiny run trains float32 only, so of each model's two
    # comparisons (fp32 and mixed on a GPU) the fp32 one runs, one seed; resnet18,
    # mobilenetv2 and resnet9-long run resnet9's commands on bigger networks or a longer
    # schedule: skipped, saying so
    groups = {group["config"]["model"]: group for group in combined["groups"]}
    assert sorted(groups) == ["lenet", "resnet9"]
    for group in groups.values():
        assert group["config"]["precision"] == "fp32"
        assert {fw: e["completed"] for fw, e in group["frameworks"].items()} == {"tf": 1,
                                                                                "torch": 1}
        assert group["parity"]["passed"]
    assert "doctor" in (packed / "battery.md").read_text()


def test_the_smoke_test_retries_on_the_bundles_fallback_cudnn(tmp_path, monkeypatch):
    """The smoke test fails on the machine's cuDNN: run again with the bundle re-activated on
    its fallback cuDNN (the machine's taken off the path), it passes; the record says which
    cuDNN ran, later stages run on it, and later calls are told so (cudnn-choice)."""
    site = activated_bundle(tmp_path, monkeypatch)
    # passes only on the fallback cuDNN, and only without the machine's beside it
    smoke = ("import os, sys; p = os.environ['LD_LIBRARY_PATH']; print(p); "
             "sys.exit(0 if 'cudnn_cu12_fallback' in p and '/machine/' not in p else 1)")
    from benchmarks.battery.stages import Stage
    stage = Stage("tf-smoke", True, ("tf",), "a smoke test",
                  lambda fw, ctx: [[sys.executable, "-c", smoke]], lambda fw, ctx: (1.0, "-"),
                  json_out=True)
    ctx = battery.context(battery.arguments(["--device", "cpu", "--tiny", "--out",
                                             str(tmp_path / "out")]))
    assert running.cudnn_in_use(dict(os.environ)).startswith("the machine's cuDNN")
    before = dict(os.environ)
    try:
        done = running.run_stage(stage, "tf", {"limit_s": 60, "estimate_s": 1}, ctx)
        assert "/machine/" not in os.environ["LD_LIBRARY_PATH"]  # later stages run on it
    finally:
        os.environ.clear()
        os.environ.update(before)
    assert done["status"] == "ok" and [c["exit_code"] for c in done["commands"]] == [1, 0]
    assert done["cudnn"] == "the bundle's CUDA 12 cuDNN (fallback)"
    assert (site.parent / "cudnn-choice").read_text().strip() == "fallback"
    (site / "nvidia" / "cudnn_cu12_fallback" / "lib").rmdir()  # not unpacked: the plan's calls
    done = running.run_stage(stage, "tf", {"limit_s": 60, "estimate_s": 1}, ctx)
    assert done["status"] == "failed" and len(done["commands"]) == 1
    assert done["note"].startswith("no fallback cuDNN unpacked: make the plan's fallback calls")

