"""How the GPU battery runs a stage's commands: in their own process group, cut at the
stage's limit with what they wrote kept, and stopped with the battery."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from bundles import activated_bundle
from conftest import patience

from benchmarks import gpu_battery as battery
from benchmarks.battery import running

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.machine_sensitive  # a limit
def test_a_stage_cut_by_its_limit_keeps_what_it_wrote(tmp_path):
    said = running.run_command([sys.executable, "-c", "import time; print('half done', "
                                "flush=True); time.sleep(30)"], tmp_path / "log", 2)
    assert said["timed_out"] and said["seconds"] < 30  # cut at 2 s, not after its 30-s sleep
    assert "half done" in (tmp_path / "log").read_text()
    # stdout apart from stderr: a stray stderr line does not spoil doctor's JSON
    running.run_command([sys.executable, "-c", "import sys; print('note: x', file=sys.stderr);"
                         " print('{\"verdict\": \"ok\"}')"], tmp_path / "log2", 30,
                        stdout=tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == {"verdict": "ok"}


def test_a_stopped_battery_stops_the_stage_it_runs(tmp_path):
    """SIGTERM to the battery as a script ends the stage's process group too: a stage runs in
    its own session, which outlived the battery on an H100 and trained beside the next."""
    pid_file = tmp_path / "stage.pid"
    stage = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(120)")
    battery = subprocess.Popen(
        [sys.executable, "-c", "import sys; from benchmarks.battery import running; "
         "running.stop_stages_with_the_battery(); "
         f"running.run_command([sys.executable, '-c', {stage!r}], "
         f"__import__('pathlib').Path({str(tmp_path / 'log')!r}), 600)"],
        cwd=REPO, env=running.child_environment())
    deadline = time.monotonic() + patience(60)
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    stage_pid = int(pid_file.read_text())
    battery.send_signal(signal.SIGTERM)
    assert battery.wait(timeout=patience(60)) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):  # stopped and reaped by the battery
        os.kill(stage_pid, 0)


def test_each_gpu_test_stage_writes_a_report_naming_its_framework_and_commit(tmp_path,
                                                                              monkeypatch):
    """Each framework's GPU tests write a JUnit XML report into the battery's --out (packed,
    and in every rental call's live.tar.gz), its suite named by the framework and the commit
    the tests ran at: docs/gpu.md's record of the GPU tests is read from these reports. The
    commit is BATTERY_COMMIT where given (a rental's copy of the checkout has no .git), else
    git's."""
    from benchmarks.battery import commands
    ctx = battery.context(battery.arguments(["--tiny", "--out", str(tmp_path)]))
    monkeypatch.setenv("BATTERY_COMMIT", "abc1234")
    for framework in ("torch", "tf"):
        argv = commands.test_commands(framework, ctx)[0]
        assert argv[argv.index("--junitxml") + 1] == str(
            tmp_path.resolve() / f"pytest-gpu-{framework}.xml")
        assert argv[argv.index("-o") + 1] == f"junit_suite_name=gpu-tests-{framework}@abc1234"
    monkeypatch.delenv("BATTERY_COMMIT")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert commands.checkout_commit() in (head, f"{head}-dirty")


def test_a_stopped_gpu_test_stage_still_writes_its_named_report(tmp_path):
    """A GPU-test stage stopped (by its limit or with the battery) is interrupted first, as
    Ctrl-C does, so pytest writes its JUnit report of the tests that ended: SIGTERM left none
    on an H100, where -q's dots named no test. So even where the battery itself ignores
    SIGINT, as a rental's queue started in a shell's background does."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    started = tmp_path / "started"
    (tmp_path / "test_cut.py").write_text(
        "import pathlib, time\n\n\ndef test_ends():\n    pass\n\n\n"
        "def test_runs_on():\n"
        f"    pathlib.Path({str(started)!r}).touch()\n    time.sleep(600)\n")
    report = tmp_path / "report.xml"
    argv = [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "-v",
            "-p", "no:cacheprovider", "--junitxml", str(report), str(tmp_path / "test_cut.py")]
    battery = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from benchmarks.battery import running; running.stop_stages_with_the_battery(); "
         f"running.run_command({argv!r}, Path({str(tmp_path / 'log')!r}), 600, "
         "interrupt=True)"],
        cwd=REPO, env=running.child_environment(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + patience(60)
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), (tmp_path / "log").read_text()
    battery.send_signal(signal.SIGTERM)
    assert battery.wait(timeout=patience(60)) == 128 + signal.SIGTERM
    cases = {case.get("name"): case for case in ElementTree.parse(report).iter("testcase")}
    assert "test_ends" in cases and not list(cases["test_ends"])  # passed, by name


def test_a_gpu_test_stage_says_what_ran_even_when_cut_by_its_limit():
    """pytest's closing line where it got there; else, from -v's lines, the outcomes of the
    tests that ended, the failed ones named (a TensorFlow stage on an H100 was cut after 11
    of its 19 tests, and its -q dots named none)."""
    done = ["tests/test_gpu.py::test_torch_ddp_over_every_gpu SKIPPED (one GPU here) [ 14%]",
            "SKIPPED [1] tests/test_gpu.py:116: one GPU here: DDP over several needs two or more",
            "======= 12 passed, 2 skipped, 606 deselected, 2 warnings in 44.73s ======="]
    assert running.summary_of_tests(done) == (
        "12 passed, 2 skipped, 606 deselected, 2 warnings in 44.73s")
    cut = ["$ python -m pytest -m gpu -k 'test_tf_ or test_both_' -v -rs",
           "tests/test_gpu.py::test_tf_float16_loss_scaling_skips_and_rescales PASSED [  5%]",
           "tests/test_gpu.py::test_tf_mirrored_strategy_over_every_gpu FAILED      [ 10%]",
           "tests/test_gpu.py::test_tf_model_parallel_puts_each_stage_on_its_gpu SKIPPED (one "
           "GPU here: model parallelism over GPUs needs two or more) [ 15%]",
           "tests/test_gpu_features.py::test_tf_every_pipeline_trains_on_the_gpus[naive] PASSED"
           " [ 30%]",
           "tests/test_gpu_features.py::test_tf_xla_on_the_gpu "]  # cut while it ran
    assert running.summary_of_tests(cut) == (
        "cut after 4 tests: 1 failed, 2 passed, 1 skipped "
        "(failed: test_tf_mirrored_strategy_over_every_gpu)")
    assert running.summary_of_tests(["$ python -m pytest", "collecting ..."]) is None


@pytest.mark.slow  # a pytest that imports both frameworks to collect: 15-17 s under pytest -n 2
def test_the_gpu_test_stage_runs_only_the_tests_named_by_tests(tmp_path):
    """--tests narrows the GPU-test stage to the tests a rental did not reach: pytest
    collects exactly those of the framework whose names hold one of the parts."""
    from benchmarks import gpu_battery
    from benchmarks.battery.commands import test_commands
    ctx = gpu_battery.context(gpu_battery.arguments(
        ["--tiny", "--out", str(tmp_path), "--tests", "resume,doctor,"]))
    argv = test_commands("tf", ctx)[0]
    collected = subprocess.run([*argv[:argv.index("-v")], "--collect-only", "-q"], cwd=REPO,
                               capture_output=True, text=True, timeout=patience(120)).stdout
    names = sorted(line.split("::")[-1] for line in collected.splitlines() if "::" in line)
    assert names == ["test_both_doctor_on_a_gpu_host", "test_tf_resume_restores_the_loss_scale"]


def test_a_timed_stage_waits_for_a_quiet_host_and_names_what_ran_beside_it(tmp_path):
    """Training, the bundle's arrival (xz, tar) or another battery beside this process make
    the host busy; this process and its ancestors do not; a rental's missing marker says its
    transfers are not over."""
    beside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               "benchmarks.reference_trainer"])
    try:
        deadline = time.monotonic() + patience(30)
        while (not any(w.startswith(f"{beside.pid}:") for w in running.work_beside())
               and time.monotonic() < deadline):
            time.sleep(0.05)
        busy = running.work_beside()
        assert any(w.startswith(f"{beside.pid}:") for w in busy)
        assert not any(w.startswith(f"{os.getpid()}:") for w in busy)  # not itself
        waited, still = running.wait_for_quiet_host(0.3, poll_s=0.1)
        assert waited >= 0.3 and any(w.startswith(f"{beside.pid}:") for w in still)
    finally:
        beside.kill()
        beside.wait()
    marker = tmp_path / "quiet"
    assert running.host_busy(str(marker))[0].startswith("the rental's transfers are not over")
    marker.touch()
    assert not any("transfers" in w for w in running.host_busy(str(marker)))


def test_work_beside_reads_each_process_command_line(tmp_path):
    proc = tmp_path / "proc"
    for pid, argv in ((101, ["xz", "-dc", "-T0", "bundle.tar.xz"]),
                      (102, ["bash", "benchmarks/battery/rental.sh", "part", "c03"]),
                      (103, ["/usr/bin/python3", "/venv/bin/cnncompare", "run"]),
                      (104, ["sleep", "10"]), (105, [])):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv))
    found = running.work_beside(own_pid=os.getpid(), proc=proc)
    assert sorted(w.split(":")[0] for w in found) == ["101", "102", "103"]


def test_a_timed_stage_on_a_gpu_is_refused_beside_other_work(tmp_path, monkeypatch):
    """On a GPU a timed stage waits for a quiet host; still busy at the end of the wait, it
    is refused, naming what ran beside it, and runs nothing; an untimed stage runs all the
    same (here the smoke test's plumbing, refused by no wait)."""
    waits = []
    monkeypatch.setattr(battery, "wait_for_quiet_host",
                        lambda limit_s: waits.append(limit_s) or (2.0, ["4242: xz -dc -T0"]))
    assert battery.main(["--tiny", "--device", "gpu", "--framework", "torch", "--stage",
                         "lenet-fp32", "--time-left", "600", "--out", str(tmp_path)]) == 1
    (stage,) = json.loads((tmp_path / "battery.json").read_text())["stages"]
    assert stage["status"] == "refused" and "4242: xz -dc -T0" in stage["note"], stage
    assert stage["timed"] and stage["quiet_wait_s"] == 2.0 and "commands" not in stage
    assert len(waits) == 1 and 0 < waits[0] < 600  # the wait leaves the stage its time
    assert not (tmp_path / "lenet-fp32").exists()
    untimed = {s.name for s in battery.STAGES if not s.timed}
    assert {"tf-smoke", "reference", "resnet9-page", "prime", "gpu-tests"} <= untimed
    assert not {"resnet9-verdict-warm", "resnet9-verdict-cold"} & untimed


def test_a_stage_runs_its_later_commands_on_the_fallback_cudnn(tmp_path, monkeypatch):
    """A stage with fallback_from (the cuDNN comparison): its first command on the machine's
    cuDNN, the next on the bundle's fallback, each command's record saying which; with no
    fallback unpacked the stage fails saying so, after the commands that could run. Its
    figures read each build's kernels from its result.json."""
    from benchmarks.battery.commands import CUDNN_BUILDS
    from benchmarks.battery.stages import Stage
    site = activated_bundle(tmp_path, monkeypatch)
    ctx = battery.context(battery.arguments(["--device", "cpu", "--tiny", "--out",
                                             str(tmp_path / "out")]))
    write = ("import json, os, pathlib, sys; out = pathlib.Path(sys.argv[1]); "
             "out.mkdir(parents=True); fallback = 'cudnn_cu12_fallback' in "
             "os.environ['LD_LIBRARY_PATH']; conv = 2.0 if fallback else 1.5; "
             "(out / 'result.json').write_text(json.dumps({'profile': {'kernels': {"
             "'total_ms': conv + 3, 'families_ms': {'convolution': conv}}}, 'summary': {"
             "'steady_step_time_ms': {'median': 9.0}}}))")
    stage = Stage("cudnn", False, ("tf",), "both builds",
                  lambda fw, c: [[sys.executable, "-c", write, str(c.out / "cudnn" / b)]
                                 for b in CUDNN_BUILDS], lambda fw, c: (1.0, "-"),
                  timed=False, fallback_from=1)
    done = running.run_stage(stage, "tf", {"limit_s": 60, "estimate_s": 1}, ctx)
    assert done["status"] == "ok", done
    assert [c["cudnn"] for c in done["commands"]] == [
        "the machine's cuDNN (beside its PyTorch)", "the bundle's CUDA 12 cuDNN (fallback)"]
    assert done["figures"] == {
        "machine": {"kernels_ms": 4.5, "convolution_ms": 1.5, "steady_step_time_ms": 9.0},
        "fallback": {"kernels_ms": 5.0, "convolution_ms": 2.0, "steady_step_time_ms": 9.0}}
    assert "/machine/" in os.environ["LD_LIBRARY_PATH"]  # the battery's own stays the machine's
    # the queue activated the bundle on CUDA 12's cuDNN, as rental.sh does once its parts came:
    # the first build still runs on the machine's
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{site}/nvidia/cudnn_cu12_fallback/lib:/usr/lib")
    for build in CUDNN_BUILDS:
        (ctx.out / "cudnn" / build / "result.json").unlink()
        (ctx.out / "cudnn" / build).rmdir()
    done = running.run_stage(stage, "tf", {"limit_s": 60, "estimate_s": 1}, ctx)
    assert [c["cudnn"] for c in done["commands"]] == [
        "the machine's cuDNN (beside its PyTorch)", "the bundle's CUDA 12 cuDNN (fallback)"]
    assert done["figures"]["machine"]["convolution_ms"] == 1.5
    (site / "nvidia" / "cudnn_cu12_fallback" / "lib").rmdir()
    for build in CUDNN_BUILDS:
        (ctx.out / "cudnn" / build / "result.json").unlink()
        (ctx.out / "cudnn" / build).rmdir()
    done = running.run_stage(stage, "tf", {"limit_s": 60, "estimate_s": 1}, ctx)
    assert done["status"] == "failed" and len(done["commands"]) == 1
    assert done["note"].startswith("no fallback cuDNN unpacked")


def _detached(tmp_path: Path, command: str) -> int:
    """A shell command started outside this process's tree, as another device call reaches
    the host: the shell that starts it exits at once, so it is nobody's here; its (last
    process's) pid."""
    started = subprocess.run(["bash", "-c", f"{command} >/dev/null 2>&1 & echo $!"],
                             cwd=tmp_path, capture_output=True, text=True, check=True,
                             timeout=30)
    return int(started.stdout.split()[-1])


def test_a_timed_stage_records_what_ran_beside_it_while_it_ran(tmp_path, monkeypatch):
    """The host watched all through a timed stage: a busy loop and a tar that start on the
    host after the stage did are sighted (pid, command, CPU, when), in the stage's record,
    its comparison's host.json and battery.md, so a poll shows it; the stage's own processes
    (its command and that command's child, however busy) and the battery itself are not."""
    from benchmarks.battery import host, pack
    from benchmarks.battery.stages import Stage
    monkeypatch.setattr(host, "WATCH_INTERVAL_S", 0.5)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "blob").write_bytes(os.urandom(4 * 2**20))
    mine = tmp_path / "stage-pids"
    stage_code = ("import os, subprocess, sys, pathlib; out = pathlib.Path(sys.argv[1]); "
                  "out.mkdir(parents=True, exist_ok=True); child = subprocess.Popen("
                  "[sys.executable, '-c', 'import time\\nt = time.time() + 6\\n"
                  "while time.time() < t: pass']); "
                  f"pathlib.Path({str(mine)!r}).write_text(f'{{os.getpid()}} {{child.pid}}'); "
                  "child.wait()")
    stage = Stage("fake-compare", False, ("both",), "a comparison's stand-in",
                  lambda fw, c: [[sys.executable, "-c", stage_code, str(c.out / "fake-compare")]],
                  lambda fw, c: (6.0, "-"), comparison=True)
    ctx = battery.context(battery.arguments(["--device", "cpu", "--tiny", "--out",
                                             str(tmp_path / "out")]))
    beside: list[int] = []
    # a busy loop, and a tar whose reader waits 4 s: it lives that long, whatever the disk
    starter = threading.Timer(1.5, lambda: beside.extend([
        _detached(tmp_path, f"{sys.executable} -c 'import time\nt = time.time() + 12\n"
                            "while time.time() < t: pass'"),
        _detached(tmp_path, "tar cf - data | (sleep 4; cat > /dev/null)")]))
    starter.start()
    try:
        done = running.run_stage(stage, "both", {"limit_s": patience(120), "estimate_s": 6},
                                 ctx, watch_host=True)
    finally:
        starter.join()
        for pid in beside[:1]:  # the tar and its reader end by themselves
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert done["status"] == "ok", done
    record = done["host"]
    assert not record["quiet"] and record["samples"] >= 5, record
    seen = {p["pid"]: p for p in record["processes"]}
    busy = beside[0]
    assert busy in seen and seen[busy]["max_cpu_percent"] > host.CPU_PERCENT, record
    assert "\n" not in seen[busy]["command"]  # one line, in battery.md too
    assert any(p["command"] == "tar cf - data" for p in seen.values()), record
    assert seen[busy]["first_s"] >= 1.0  # sighted once it started, during the stage
    own = {int(pid) for pid in mine.read_text().split()} | {os.getpid()}
    assert not own & set(seen), (own, seen)
    assert done["host_note"].startswith("host not quiet: ") and "sightings, e.g." in \
        done["host_note"]
    kept = json.loads((ctx.out / "fake-compare" / "host.json").read_text())
    assert not kept["both"]["quiet"] and kept["both"]["sightings"] == record["sightings"]
    assert busy in {p["pid"] for p in kept["both"]["processes"]}
    summary = pack.markdown({"started_at": "now", "machine": "here", "device": "gpu",
                             "tiny": False, "stages": [done]})
    row = next(line for line in summary.splitlines() if line.startswith("| fake-compare"))
    assert f"ok; host not quiet ({record['sightings']} sightings)" in row[:160]
    assert f"- fake-compare (both): {done['host_note']}" in summary


def _fake_process(proc: Path, pid: int, ppid: int, ticks: int, argv: list[str],
                  wrote: int = 0) -> None:
    entry = proc / str(pid)
    entry.mkdir(parents=True, exist_ok=True)
    fields = ["S", ppid, pid, pid, 0, -1, 0, 0, 0, 0, 0, ticks, 0, 0, 0, 20, 0, 1, 0, 1000]
    (entry / "stat").write_text(f"{pid} ({Path(argv[0]).name if argv else 'kthread'}) "
                                + " ".join(map(str, fields)) + "\n")
    (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv))
    (entry / "io").write_text(f"rchar: 0\nwchar: {wrote}\n")


def test_a_quiet_stage_is_recorded_quiet_and_its_own_work_is_not_a_sighting(tmp_path):
    """A host where only the stage works: the battery (its command's parent) and the stage's
    own processes at full CPU, an idle `cat` (a copy program doing nothing) and a kernel
    thread: quiet, no sighting, no note. One process of another tree then using a core, or
    writing 8 MiB, is sighted. (A fake /proc: the shared CI host is never quiet.)"""
    from benchmarks.battery import host
    proc = tmp_path / "proc"
    ticks = {10: 0, 11: 0, 12: 0, 20: 5, 30: 0, 40: 0}
    argv = {10: ["python", "-m", "benchmarks.gpu_battery"], 11: ["python", "-c", "compare"],
            12: ["python", "-c", "its child"], 20: ["cat"], 30: [], 40: ["python", "other.py"]}
    parents = {10: 1, 11: 10, 12: 11, 20: 1, 30: 2, 40: 1}

    def write(wrote_40: int = 0) -> None:
        for pid in ticks:
            _fake_process(proc, pid, parents[pid], ticks[pid], argv[pid],
                          wrote_40 if pid == 40 else 0)
    write()
    watch = host.HostWatch(interval_s=3600, own_pid=10, proc=proc)
    with watch:
        ticks[11] += 150 * host.CLOCK_TICKS  # the stage's command and its child: busy
        ticks[12] += 150 * host.CLOCK_TICKS
        write()
    record = watch.record()
    assert record["quiet"] and record["sightings"] == 0 and record["note"] is None, record
    with host.HostWatch(interval_s=3600, own_pid=10, proc=proc) as busy:
        ticks[40] += 1000 * host.CLOCK_TICKS  # a core for far longer than the watch
        write(wrote_40=8 * 2**20)
    (sighting,) = busy.record()["first_sightings"]
    assert sighting["pid"] == 40 and sighting["why"] == "cpu" and sighting["wrote_mib"] == 8.0


def test_the_battery_watches_a_timed_stage_on_a_gpu_and_says_when_its_host_was_busy(
        tmp_path, monkeypatch, capsys):
    """On a GPU the battery runs a timed stage with its host watched (an untimed one not) and
    says what it saw: on its own line as the stage ends (a rental's queue.log) and in
    battery.md's row and a line below the table, which rental.sh's poll shows."""
    asked = []

    def run_stage(stage, framework, row, ctx, watch_host=False):
        asked.append((stage.name, watch_host))
        note = "host not quiet: 2 sightings, e.g. 4242: tar xf part (40% CPU, at +3 s)"
        return {"stage": stage.name, "framework": framework, "core": stage.core,
                "status": "ok", "seconds": 1.0, "limit_s": row["limit_s"],
                "estimate_s": row["estimate_s"], "commands": [],
                **({"host": {"sightings": 2}, "host_note": note} if watch_host else {})}
    monkeypatch.setattr(battery, "run_stage", run_stage)
    monkeypatch.setattr(battery, "wait_for_quiet_host", lambda limit_s: (0.0, []))
    assert battery.main(["--tiny", "--device", "gpu", "--framework", "torch", "--stage",
                         "lenet-fp32", "--out", str(tmp_path)]) == 0
    assert battery.main(["--tiny", "--device", "gpu", "--framework", "tf", "--stage",
                         "tf-smoke", "--out", str(tmp_path)]) == 0
    assert asked == [("lenet-fp32", True), ("tf-smoke", False)]
    assert "  ok in 1 s; host not quiet: 2 sightings, e.g. 4242: tar xf part" in \
        capsys.readouterr().out
    summary = (tmp_path / "battery.md").read_text()
    assert "| lenet-fp32 | torch | ok; host not quiet (2 sightings) |" in summary
    assert "- lenet-fp32 (torch): host not quiet: 2 sightings, e.g. 4242" in summary
    assert "| tf-smoke | tf | ok |" in summary
