"""Running a stage: each command in its own process group under the stage's limit, its
output streamed to a log, its status and headline figures read from what it wrote."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.battery.commands import CUDNN_BUILDS, REPO, gpu_test_report, shown
from benchmarks.battery.estimates import Context
from benchmarks.battery.host import (  # noqa: F401 - the quiet host, as callers name it here
    BUSY_ARGUMENTS,
    BUSY_PROGRAMS,
    QUIET_MARKER_ENV,
    QUIET_WAIT_S,
    HostWatch,
    host_busy,
    wait_for_quiet_host,
    work_beside,
)
from benchmarks.battery.stages import Stage


def run_command(argv: list[str], log: Path, limit_s: float, stdout: Path | None = None,
                env: dict[str, str] | None = None, interrupt: bool = False) -> dict:
    """Run argv with its output streamed to `log` (stdout to `stdout` when given, e.g.
    doctor's JSON), in its own process group, killed at `limit_s`; in `env` when given, else
    in this process's environment. `interrupt`: stopped by SIGINT first, as Ctrl-C stops it
    (pytest then writes its JUnit report of the tests that ended; SIGTERM leaves none)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a") as err, (open(stdout, "w") if stdout else open(log, "a")) as out:
        err.write(f"$ {' '.join(shown(a) for a in argv)}\n")
        err.flush()
        process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err,
                                   start_new_session=True, env=child_environment(env),
                                   preexec_fn=_sigint_heard if interrupt else None)
        try:
            code = process.wait(timeout=limit_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(process, interrupt)
            code = process.returncode
        except BaseException:  # the battery stopped (stop_stages_with_the_battery, Ctrl-C):
            _stop(process, interrupt)  # its own session would outlive it, on the GPU, unwatched
            raise
    return {"exit_code": code, "seconds": time.perf_counter() - started, "timed_out": timed_out}


def stop_stages_with_the_battery() -> None:
    """SIGTERM to the battery (a rental's queue stopped, `timeout`) ends it as Ctrl-C does,
    so the stage it runs is stopped too; without it that stage's process group ran on, on the
    GPU beside the next stage's."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def child_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _sigint_heard() -> None:
    """In the child before it starts: SIGINT back to its default, so Python raises
    KeyboardInterrupt on it. A rental's queue runs in the background of a shell, which starts
    its commands with SIGINT ignored, and a child inherits that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop(process: subprocess.Popen, interrupt: bool = False) -> None:
    """SIGTERM to the process group (trainers write what they finished), SIGKILL after 30 s;
    `interrupt`: SIGINT for 20 s of those first (pytest writes its report)."""
    for sig, wait in (((signal.SIGINT, 20), (signal.SIGTERM, 10)) if interrupt
                      else ((signal.SIGTERM, 30),)) + ((signal.SIGKILL, 10),):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# TensorFlow's GPU bundle (../shared/tools/tf-gpu-bundle): activate.sh puts its folder first on
# PYTHONPATH; `activate.sh fallback` swaps the machine's cuDNN for the bundle's CUDA 12 one.
FALLBACK_CUDNN = "nvidia/cudnn_cu12_fallback/lib"
CUDNN_CHOICE = "cudnn-choice"  # beside the bundle's folder: what later calls source it with


def bundle_root(env: dict[str, str]) -> Path | None:
    """The activated TensorFlow bundle's folder, or None (TensorFlow installed by pip)."""
    return next((Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep)
                 if p and (Path(p) / "activate.sh").is_file()), None)


def cudnn_in_use(env: dict[str, str]) -> str:
    """Which cuDNN TensorFlow loads in `env`."""
    if bundle_root(env) is None:
        return "TensorFlow's own (no bundle activated)"
    if FALLBACK_CUDNN in env.get("LD_LIBRARY_PATH", ""):
        return "the bundle's CUDA 12 cuDNN (fallback)"
    return "the machine's cuDNN (beside its PyTorch)"


def fallback_environment(env: dict[str, str], cudnn: str = "fallback") -> dict[str, str] | None:
    """`env` with the bundle re-activated on its fallback cuDNN (CUDA 12), or with `cudnn`
    "machine" on the machine's own (CUDA 13); None when no bundle is active, or the fallback
    asked for is not unpacked. What activation added is taken out first: the two cuDNN folders
    must never both be on the library path."""
    root = bundle_root(env)
    if root is None or cudnn == "fallback" and not (root / FALLBACK_CUDNN).is_dir():
        return None
    kept = [p for p in env.get("LD_LIBRARY_PATH", "").split(":")
            if p and not p.startswith(str(root)) and not p.rstrip("/").endswith("nvidia/cudnn/lib")]
    base = {**env, "LD_LIBRARY_PATH": ":".join(kept), "PYTHONPATH": os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p) != root)}
    done = subprocess.run(
        ["bash", "-c", f'source "{root}/activate.sh" {cudnn} >/dev/null && "{sys.executable}" '
         '-c "import json, os; print(json.dumps(dict(os.environ)))"'],
        env=base, capture_output=True, text=True, timeout=120, check=False)
    return json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else None


def retry_smoke_on_fallback(done: dict, argv: list[str], log: Path, limit_s: float,
                            stdout: Path) -> None:
    """The smoke test failed on the machine's cuDNN: run it again on the bundle's fallback
    cuDNN where it is unpacked; if that passes, every later command of this battery, and each
    later device call (through CUDNN_CHOICE), runs on it. Says which cuDNN ran in `done`."""
    fallback = fallback_environment(dict(os.environ))
    if fallback is None:
        done["cudnn_retry"] = ("no fallback cuDNN unpacked: make the plan's fallback calls, "
                               "then run this call again")
        return
    with open(log, "a") as said:
        said.write("# failed on the machine's cuDNN: again on the bundle's fallback cuDNN\n")
    outcome = run_command(argv, log, limit_s, stdout, env=fallback)
    done["commands"].append({"argv": " ".join(shown(a) for a in argv) + "  (fallback cuDNN)",
                             **outcome})
    if outcome["exit_code"] == 0:
        os.environ.clear()
        os.environ.update(fallback)
        (bundle_root(fallback).parent / CUDNN_CHOICE).write_text("fallback\n")
        done["cudnn_retry"] = "passed on the fallback cuDNN: every later stage runs on it"
    else:
        done["cudnn_retry"] = "failed on the fallback cuDNN too"


def run_stage(stage: Stage, framework: str, row: dict, ctx: Context,
              watch_host: bool = False) -> dict:
    """Run the stage's commands and read what they wrote. `watch_host` (a timed stage on a
    GPU): the host sampled all the while (host.HostWatch), what else ran on it recorded in the
    stage's record (`host`, and `host_note` where it was not quiet) and, for a comparison, in
    its folder's host.json."""
    if not watch_host:
        return _run_stage(stage, framework, row, ctx)
    with HostWatch() as watch:
        done = _run_stage(stage, framework, row, ctx)
    done["host"] = watch.record()
    if done["host"]["note"]:
        done["host_note"] = done["host"]["note"]
    if stage.comparison and (ctx.out / stage.name).is_dir():
        record_host(ctx.out / stage.name / "host.json", framework, done["host"])
    return done


def record_host(path: Path, framework: str, host: dict) -> None:
    """The comparison's host.json beside its summary: what the host did while each part of
    it ran (one command of both frameworks, or each framework's part), by framework."""
    kept = read_json(path)
    kept[framework] = {key: host[key] for key in (
        "quiet", "note", "watched_s", "interval_s", "samples", "cpu_percent_threshold",
        "write_mib_threshold", "sightings", "processes")}
    kept[framework]["first_sightings"] = host["first_sightings"][:20]
    path.write_text(json.dumps(kept, indent=2) + "\n")


def _run_stage(stage: Stage, framework: str, row: dict, ctx: Context) -> dict:
    log = ctx.out / "logs" / f"{stage.name}-{framework}.log"
    done = {"stage": stage.name, "framework": framework, "core": stage.core,
            "comparison": stage.comparison,
            "limit_s": row["limit_s"], "estimate_s": row["estimate_s"],
            "log": str(log.relative_to(ctx.out)), "commands": []}
    deadline = time.perf_counter() + row["limit_s"]
    for index, argv in enumerate(stage.commands(framework, ctx)):
        left = deadline - time.perf_counter()
        stdout = ctx.out / f"{stage.name}-{framework}.json" if stage.json_out else None
        env = None
        if stage.fallback_from is not None and index >= stage.fallback_from:
            env = fallback_environment(dict(os.environ))
            if env is None:
                done["note"] = ("no fallback cuDNN unpacked (rental.sh part fNN): the "
                                "fallback's commands did not run")
                break
        elif stage.fallback_from is not None:  # the machine's cuDNN, whatever the queue chose
            env = fallback_environment(dict(os.environ), "machine")
        outcome = run_command(argv, log, max(1.0, left), stdout, env=env,
                              interrupt=stage.name in ("gpu-tests", "suite"))
        done["commands"].append({"argv": " ".join(shown(a) for a in argv), **outcome,
                                 **({"cudnn": cudnn_in_use(env or dict(os.environ))}
                                    if stage.fallback_from is not None else {})})
        if outcome["timed_out"]:
            break
        if (stage.name == "tf-smoke" and outcome["exit_code"] != 0
                and bundle_root(dict(os.environ)) is not None):
            retry_smoke_on_fallback(done, argv, log, max(1.0, deadline - time.perf_counter()),
                                    stdout)
    if stage.name == "tf-smoke":
        done["cudnn"] = cudnn_in_use(dict(os.environ))
    codes = [c["exit_code"] for c in done["commands"][-1:]] if "cudnn_retry" in done else [
        c["exit_code"] for c in done["commands"]]
    done["seconds"] = sum(c["seconds"] for c in done["commands"])
    done["status"] = ("timed out" if any(c["timed_out"] for c in done["commands"])
                      else "failed" if "note" in done or not all(code == 0 for code in codes)
                      else "ok")
    done["figures"] = figures(stage, framework, ctx)
    if done["status"] != "ok" and "note" not in done:  # doctor: why in its verdict, else a
        # last line
        said = [line.strip() for line in log.read_text(errors="replace").splitlines()
                if line.strip() and not line.startswith("$ ")] if log.exists() else []
        verdict = done["figures"].get("verdict") if stage.name == "doctor" else None
        done["note"] = (verdict or (said[-1] if said else f"exit codes {codes}"))[:300]
        if "cudnn_retry" in done:
            done["note"] = f"{done['cudnn_retry']}; {done['note']}"[:300]
    if stage.name == "gpu-tests" and done["status"] == "ok":
        # pytest exits 0 when every test skips, which proves nothing: on a GPU host the
        # stage failed, elsewhere it was skipped for want of a GPU, never "ok"
        reasons = every_test_skipped(ctx.out / gpu_test_report(framework))
        if reasons is not None:
            done["status"] = "failed" if ctx.device == "gpu" else "skipped"
            done["note"] = ("every GPU test skipped: " if ctx.device == "gpu"
                            else "no GPU: every GPU test skipped: ") + "; ".join(reasons)
    return done


def summary_of_tests(lines: list[str]) -> str | None:
    """pytest's closing line ("12 passed, 2 skipped in 44.73s"); for a run cut before it,
    the outcomes of the tests that ended, from -v's lines ("FILE::TEST PASSED [ 5%]"),
    with the failed ones named."""
    closing = [ln for ln in lines if re.search(r"\d+ (passed|failed|skipped|error)", ln)
               and " in " in ln]
    if closing:
        return closing[-1].strip("= ")
    ended = [m.groups() for m in (re.match(r"(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR)", ln)
                                  for ln in lines) if m]
    if not ended:
        return None
    counts = collections.Counter(outcome.lower() for _, outcome in ended)
    failed = [name.split("::")[-1] for name, outcome in ended if outcome in ("FAILED", "ERROR")]
    return (f"cut after {len(ended)} tests: "
            + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            + (f" (failed: {', '.join(failed)})" if failed else ""))


def every_test_skipped(junit: Path) -> list[str] | None:
    """The distinct skip reasons when every test in a pytest JUnit XML report skipped (or it
    ran none); None when at least one test ran."""
    import xml.etree.ElementTree as ElementTree
    try:
        cases = ElementTree.parse(junit).getroot().iter("testcase")
    except (OSError, ElementTree.ParseError):
        return ["no test report was written"]
    reasons, ran = [], False
    for case in cases:
        skipped = case.find("skipped")
        if skipped is None:
            ran = True
        elif (skipped.get("message") or "") not in reasons:
            reasons.append(skipped.get("message") or "")
    return None if ran else (reasons or ["no test ran"])


def figures(stage: Stage, framework: str, ctx: Context) -> dict:
    """The stage's headline figures, read from what it wrote."""
    if stage.name == "tf-smoke":
        found = read_json(ctx.out / f"tf-smoke-{framework}.json")
        return found or {"verdict": "no JSON on the smoke test's stdout"}
    if stage.name == "doctor":
        found = read_json(ctx.out / f"doctor-{framework}.json")
        entry = (found.get("frameworks") or {}).get(framework) or {}
        return {"verdict": found.get("verdict") or "no JSON on doctor's stdout",
                "kinds": entry.get("kinds"), "libraries": sorted(
                    ((entry.get("runs") or {}).get("gpu") or {}).get("libraries") or [])}
    if stage.comparison:
        summary = read_json(ctx.out / stage.name / "summary.json")
        per_framework = {}
        for fw, entry in (summary.get("frameworks") or {}).items():
            per_framework[fw] = {key: (entry.get(key) or {}).get("centre") for key in (
                "images_per_s", "steady_step_time_ms", "final_test_accuracy", "time_to_target_s",
                "peak_device_memory_bytes", "energy_per_image_j", "mfu", "train_time_s")}
            per_framework[fw]["completed"] = entry.get("completed")
        return {"parity_passed": (summary.get("parity") or {}).get("passed"),
                "frameworks": per_framework, "verdict": summary.get("verdict")}
    if stage.name in ("gpu-tests", "suite"):
        log = (ctx.out / "logs" / f"{stage.name}-{framework}.log")
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return {"summary": summary_of_tests(lines)}
    if stage.name == "reference":
        found = read_json(ctx.out / "reference" / "reference.json")
        return {"verdict": (f"{found['trainer']}: {found['accuracy']['mean']:.2%} mean test "
                            f"accuracy, {found['accuracy_tta']['mean']:.2%} with its TTA, "
                            f"{found['accuracy']['runs']} runs") if found.get("accuracy")
                else "no reference.json written"}
    if stage.name == "batchnorm":
        found = read_json(ctx.out / "batchnorm" / f"batchnorm-{framework}.json")
        return {"step_ms": {variant: entry.get("step_ms") for variant, entry in
                            (found.get("variants") or {}).items()}}
    if stage.name == "cudnn":  # each build's kernels, read on the device's clock
        built = {}
        for build in CUDNN_BUILDS:
            result = read_json(ctx.out / "cudnn" / build / "result.json")
            kernels = ((result.get("profile") or {}).get("kernels") or {})
            built[build] = {"kernels_ms": kernels.get("total_ms"),
                            "convolution_ms": (kernels.get("families_ms") or {}).get(
                                "convolution"),
                            "steady_step_time_ms": ((result.get("summary") or {}).get(
                                "steady_step_time_ms") or {}).get("median")}
        return built
    if stage.name in ("resnet9-page", "prime"):
        results = sorted((ctx.out / stage.name).rglob("result.json"))
        accuracies = [(read_json(r).get("summary") or {}).get("final_test_accuracy")
                      for r in results]
        return {"final_test_accuracy": accuracies, "runs": len(results)}
    if stage.name == "tool-overhead":
        found = read_json(ctx.out / "tool-overhead" / framework / "overhead.json")
        return {"ratios": {r["config"]: r.get("ratio") for r in found.get("rows") or []}}
    sweep = read_json(ctx.out / stage.name / framework / "sweep.json")
    return {"rows": [{"settings": r.get("settings"), "status": r.get("status"),
                      "images_per_s": (r.get("summary") or {}).get("images_per_s"),
                      "speedup": r.get("speedup")} for r in sweep.get("rows") or []]}


def read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
