"""Fair and fast defaults on the machine at hand: --precision auto and --strategy auto are
resolved the same way in both frameworks, recorded with their reason, and named in the
verdict; one side wrapped and the other not is a caveat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience

from compare import report
from compare.experiment import strategy
from compare.machine import precision_choice
from compare.report import verdict

# precision-, tolerance- or time-sensitive: CI runs these again as on an AVX2-only CPU
pytestmark = pytest.mark.machine_sensitive

REPO = Path(__file__).resolve().parent.parent
AVX2_ONLY = frozenset({"sse4_2", "avx", "avx2", "fma"})
AMX = AVX2_ONLY | {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
CPU_REASON = ("auto: float32 on a CPU, where bfloat16 mixed precision speeds the two "
              "frameworks up unequally or is emulated; cnncompare doctor measures both here")


def test_auto_precision_follows_the_device():
    assert precision_choice.resolve("auto", True, (9, 0)).compute_type == "float16"  # tensor cores
    assert precision_choice.resolve("auto", True, (6, 1)).precision == "fp32"  # Pascal: none
    # a CPU: float32, with or without bfloat16 instructions (they speed the frameworks up
    # unequally), for the same reason in both
    for flags in (AVX2_ONLY, AMX):
        cpu = precision_choice.resolve("auto", False, flags=flags)
        assert (cpu.precision, cpu.compute_type) == ("fp32", "float32")
        assert cpu.reason == CPU_REASON
    # asked for: kept, with a warning where it is emulated
    emulated = precision_choice.resolve("mixed", False, flags=AVX2_ONLY)
    assert emulated.compute_type == "bfloat16" and "emulates" in emulated.warning
    assert precision_choice.resolve("mixed", False, flags=AMX).warning is None
    assert precision_choice.resolve("fp32", True, (9, 0)).compute_type == "float32"


def test_auto_takes_mixed_on_a_cpu_only_where_doctor_measured_it_faster_in_both(monkeypatch):
    """doctor's step times, kept per CPU, model and framework versions, decide auto on a CPU;
    an explicit mixed that one framework runs slower carries the handicap with its figures."""
    monkeypatch.setenv(precision_choice.FLAGS_ENV, " ".join(sorted(AMX)))  # this test's CPU
    assert precision_choice.measurement("lenet") is None
    precision_choice.record_measurement("lenet", {"tf": {"fp32": 20.0, "mixed": 15.0},
                                           "torch": {"fp32": 21.0, "mixed": 16.0}})
    faster = precision_choice.resolve("auto", False, model="lenet")
    assert (faster.precision, faster.compute_type) == ("mixed", "bfloat16")
    assert faster.reason.startswith("auto: mixed measured faster than float32 in both "
                                    "frameworks on this CPU, TensorFlow/Keras 20 -> 15 ms, "
                                    "PyTorch 21 -> 16 ms a step")
    # not measured
    assert precision_choice.resolve("auto", False, model="resnet9").reason == CPU_REASON
    assert precision_choice.resolve("mixed", False, model="lenet").handicap is None
    # PyTorch slower in mixed, TensorFlow within 5% (three timed steps): float32
    precision_choice.record_measurement("lenet", {"tf": {"fp32": 20.0, "mixed": 19.5},
                                           "torch": {"fp32": 20.0, "mixed": 26.0}})
    auto = precision_choice.resolve("auto", False, model="lenet")
    assert auto.precision == "fp32" and auto.reason.startswith(
        "auto: float32 on a CPU, mixed not measured faster in TensorFlow/Keras and PyTorch: "
        "TensorFlow/Keras 20 -> 19.5 ms, PyTorch 20 -> 26 ms a step")
    asked = precision_choice.resolve("mixed", False, model="lenet")
    assert asked.precision == "mixed" and asked.handicap.startswith(
        "mixed was slower than float32 here in PyTorch: TensorFlow/Keras 20 -> 19.5 ms, "
        "PyTorch 20 -> 26 ms a step (float32 -> mixed; cnncompare doctor, ")
    # another CPU (as the precision rule reads it) is another machine: not measured there
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(precision_choice.FLAGS_ENV, " ".join(sorted(AVX2_ONLY)))
        assert precision_choice.measurement("lenet") is None
    # the verdict's caveat gives the two figures
    summary = {"fairness": {fw: {"precision": asked.to_dict("mixed")} for fw in ("tf", "torch")},
               "parity": {"passed": True}}
    (caveat,) = [c for c in verdict.fairness_caveats(summary) if "handicaps" in c]
    assert "PyTorch 20 -> 26 ms a step" in caveat


def test_the_cpu_flags_are_read_and_can_be_forced(monkeypatch):
    assert precision_choice.cpu_flags()  # /proc/cpuinfo on Linux
    monkeypatch.setenv(precision_choice.FLAGS_ENV, "avx2 fma")
    assert precision_choice.cpu_flags() == frozenset({"avx2", "fma"})
    assert precision_choice.expected("auto", "cpu").precision == "fp32"


def test_strategy_choices_and_overrides():
    assert strategy.parse("auto") == {"tf": "auto", "torch": "auto"}
    assert strategy.parse("tf=mirrored,torch=none") == {"tf": "mirrored", "torch": "none"}
    assert strategy.parse("tf=mirrored") == {"tf": "mirrored", "torch": "auto"}
    assert strategy.is_mixed("tf=mirrored") and not strategy.is_mixed("mirrored")
    with pytest.raises(ValueError):
        strategy.parse("default")
    assert not strategy.resolve("auto", "tf", 1).wrapped
    assert strategy.resolve("auto", "torch", 2, 2).wrapped  # several replicas: DDP
    assert strategy.resolve("mirrored", "torch", 1).wrapped  # DDP in one process
    with pytest.raises(ValueError, match="one replica"):
        strategy.resolve("none", "tf", 2)


def _manifest(framework: str, compute: str, reason: str, wrapper: str | None) -> dict:
    return {"precision": {"requested": "auto", "precision": "fp32", "compute_type": compute,
                          "reason": reason, "warning": None},
            "precision_policy": "float32", "device_kind": "cpu",
            "strategy": {"choice": "auto", "wrapper": wrapper, "reason": "x"}}


def test_the_verdict_names_the_precision_and_the_wrappers_and_a_one_sided_wrapper():
    reason = CPU_REASON
    summary = {"fairness": {"tf": _manifest("tf", "float32", reason, None),
                            "torch": _manifest("torch", "float32", reason, None)},
               "machine": {"device": "CPU", "host": "Linux"}, "config": {"precision": "auto"},
               "seeds": [0, 1], "parity": {"passed": True}, "runs": []}
    setup = verdict.setup_sentence(summary)
    assert f"float32 in both frameworks ({reason}" in setup
    assert "no distribution wrapper in either framework" in setup
    assert not any("wrapper" in c for c in report.fairness_caveats(summary))
    summary["fairness"]["tf"]["strategy"]["wrapper"] = "MirroredStrategy"
    assert "TensorFlow/Keras under MirroredStrategy, PyTorch without a wrapper" in \
        verdict.setup_sentence(summary)
    assert any("the wrapper's cost falls on one side only" in c
               for c in report.fairness_caveats(summary))


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=patience(600),
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_a_default_compare_on_a_cpu_without_native_bfloat16_trains_float32_unwrapped(tmp_path):
    """As on an AVX2-only CPU: float32 in both, with the reason, and no distribution wrapper
    on one device in either; --strategy mirrored records MirroredStrategy and DDP."""
    flags = {precision_choice.FLAGS_ENV: " ".join(sorted(AVX2_ONLY))}
    out = tmp_path / "cmp"
    done = _cli("compare", "--dataset", "synthetic", "--synthetic-size", "256", "--epochs", "1",
                "--device", "cpu", "--no-own-loops", "--quiet", "--out", str(out), env=flags)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for fw in ("tf", "torch"):
        manifest = summary["fairness"][fw]
        assert manifest["precision"]["compute_type"] == "float32"
        assert manifest["precision"]["reason"] == CPU_REASON
        assert manifest["strategy"]["wrapper"] is None
    assert f"float32 in both frameworks ({CPU_REASON}" in \
        " ".join(summary["verdict"])
    wrapped = tmp_path / "wrapped"
    done = _cli("compare", "--dataset", "synthetic", "--synthetic-size", "256", "--epochs", "1",
                "--device", "cpu", "--strategy", "mirrored", "--seeds", "1", "--no-own-loops",
                "--quiet", "--out",
                str(wrapped),
                env=flags)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((wrapped / "summary.json").read_text())
    assert {fw: summary["fairness"][fw]["strategy"]["wrapper"] for fw in ("tf", "torch")} == {
        "tf": "MirroredStrategy", "torch": "DistributedDataParallel"}
    assert "TensorFlow/Keras under MirroredStrategy, PyTorch under DistributedDataParallel" in \
        " ".join(summary["verdict"])


def test_mixed_on_a_cpu_without_native_bfloat16_runs_with_a_warning(tmp_path):
    done = _cli("run", "--framework", "torch", "--precision", "mixed", "--dataset", "synthetic",
                "--synthetic-size", "64", "--epochs", "1", "--profile", "0", "--device", "cpu",
                "--out", str(tmp_path / "run"),
                env={precision_choice.FLAGS_ENV: " ".join(sorted(AVX2_ONLY))})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning: this CPU has no native bfloat16" in done.stderr
    assert "bfloat16 (--precision mixed on a CPU)" in done.stdout + done.stderr
