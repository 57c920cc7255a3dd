"""How the GPU battery runs a stage's commands: in their own process group, cut at the
stage's limit with what they wrote kept, and stopped with the battery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
    (site / "nvidia" / "cudnn_cu12_fallback" / "lib").rmdir()
    for build in CUDNN_BUILDS:
        (ctx.out / "cudnn" / build / "result.json").unlink()
        (ctx.out / "cudnn" / build).rmdir()
    done = running.run_stage(stage, "tf", {"limit_s": 60, "estimate_s": 1}, ctx)
    assert done["status"] == "failed" and len(done["commands"]) == 1
    assert done["note"].startswith("no fallback cuDNN unpacked")
