"""The same-device guard and `cnncompare doctor`: what each framework can train on, and
whether the two may be compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from compare.cli import cli
from compare.errors import UserError
from compare.experiment.config import RunConfig
from compare.machine import devices
from compare.machine import doctor as machine_doctor
from compare.machine import precision_choice as precision_rule
from compare.process import doctor, runner, same_device

H100 = {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "cuda": "13.0"}
NO_GPU = {"gpus": [], "cuda": "12.5.1"}


def _sees(monkeypatch, tf_env: dict, torch_env: dict) -> list[str]:
    asked = []

    def environment(framework: str) -> dict:
        asked.append(framework)
        return {"framework": framework, **(tf_env if framework == "tf" else torch_env)}

    monkeypatch.setattr(runner, "framework_environment", environment)
    monkeypatch.setattr(devices, "nvidia_gpus", lambda: 1)  # a GPU machine
    return asked


def test_tf_on_cpu_beside_torch_on_gpu_is_refused_with_the_fix(monkeypatch):
    _sees(monkeypatch, NO_GPU, H100)
    configs = [RunConfig(framework=fw) for fw in ("tf", "torch")]
    with pytest.raises(UserError) as info:
        same_device.check_same_device(configs)
    message = str(info.value)
    assert "TensorFlow/Keras would train on CPU (sees no GPU)" in message
    assert "PyTorch would train on GPU (sees NVIDIA H100 80GB HBM3)" in message
    assert "pip install -e '.[gpu]'" in message and "--device cpu" in message
    assert "--allow-mixed-devices" in message


def test_the_guard_passes_same_kinds_and_explicit_requests_without_asking(monkeypatch):
    asked = _sees(monkeypatch, H100, H100)
    both = [RunConfig(framework=fw) for fw in ("tf", "torch")]
    assert same_device.check_same_device(both) == {"tf": "gpu", "torch": "gpu"}
    asked.clear()
    assert same_device.check_same_device([c.replace(device="cpu") for c in both]) == {}
    allowed = [c.replace(allow_mixed_devices=True) for c in both]
    assert same_device.check_same_device(allowed) == {} and asked == []


def test_without_an_nvidia_gpu_the_guard_asks_no_framework(monkeypatch):
    """No NVIDIA driver or GPU (NVML): both train on the CPU, no framework process started."""
    asked = _sees(monkeypatch, NO_GPU, NO_GPU)
    monkeypatch.setattr(devices, "nvidia_gpus", lambda: 0)
    both = [RunConfig(framework=fw) for fw in ("tf", "torch")]
    assert same_device.check_same_device(both) == {"tf": "cpu", "torch": "cpu"} and asked == []


def test_compare_refuses_mixed_devices_in_one_line_before_any_work(monkeypatch, tmp_path):
    _sees(monkeypatch, NO_GPU, H100)
    out = tmp_path / "cmp"
    outcome = CliRunner().invoke(cli, ["compare", "--dataset", "synthetic", "--synthetic-size",
                                       "64", "--quiet", "--out", str(out)])
    assert outcome.exit_code == 2, outcome.output
    assert "would train on different devices" in outcome.output
    assert "Traceback" not in outcome.output and not (out / "parity").exists()


def test_sweep_refuses_mixed_devices_too(monkeypatch, tmp_path):
    _sees(monkeypatch, NO_GPU, H100)
    outcome = CliRunner().invoke(cli, ["sweep", "--dataset", "synthetic", "--synthetic-size",
                                       "64", "--vary", "precision=fp32,mixed", "--quiet",
                                       "--out", str(tmp_path / "sweep")])
    assert outcome.exit_code == 2 and "different devices" in outcome.output


def test_gpu_diagnosis_names_the_missing_library_and_the_old_driver():
    machine = {"nvml": {"available": True, "cuda_driver_version": "11.8"}}
    missing = {"framework": "tf", "gpus": [], "cuda": "12.5.1",
               "gpu_libraries": {"libcudart.so.12": "/x/libcudart.so.12", "libcudnn.so.9": None}}
    assert doctor.gpu_diagnosis(missing, machine).startswith(
        "CUDA libraries not installed: libcudnn.so.9 not found")
    old = {**missing, "gpu_libraries": {"libcudnn.so.9": "/x/libcudnn.so.9"}}
    assert "driver is too old: it supports CUDA 11.8, this build needs CUDA 12.5.1" in \
        doctor.gpu_diagnosis(old, machine)
    assert doctor.gpu_diagnosis({**missing, "cuda": None}, machine).endswith("CPU-only build)")
    hidden = {**missing, "cuda_visible_devices": "-1"}  # before the libraries: it hides them
    assert doctor.gpu_diagnosis(hidden, machine).startswith(
        "CUDA_VISIBLE_DEVICES='-1' hides the GPUs from it")
    assert doctor.gpu_diagnosis(missing, {"nvml": {"available": False}}) is None  # no GPU here
    assert doctor.gpu_diagnosis({**missing, "gpus": [{"name": "x"}]}, machine) is None


def _entry(*kinds, name="NVIDIA H100 80GB HBM3"):
    return {"kinds": list(kinds), "runs": {k: {"device_name": name} for k in kinds}}


def test_the_pair_verdict_needs_a_common_device_kind():
    ready = doctor._pair_verdict({"tf": _entry("gpu"), "torch": _entry("gpu")})
    assert ready == ("ready to compare on GPU: NVIDIA H100 80GB HBM3", True)
    assert doctor._pair_verdict({"tf": _entry("cpu"), "torch": _entry("cpu")}) == (
        "ready to compare on CPU", True)
    # On a GPU host each framework that sees the GPU is examined on it alone
    split, ok = doctor._pair_verdict({"tf": {**_entry("cpu"), "gpu_diagnosis": "CUDA libraries "
                                             "not installed"}, "torch": _entry("gpu")})
    assert not ok and split.startswith("not ready on the GPU: PyTorch trains on it, "
                                       "TensorFlow/Keras cannot (CUDA libraries not installed)")
    assert "--device cpu" in split
    assert doctor._pair_verdict({"tf": _entry(), "torch": _entry("cpu")}) == (
        "not ready: TensorFlow/Keras cannot train here", False)


def test_loaded_libraries_are_read_from_the_process_maps():
    """The CUDA runtime, loaded here from its NVIDIA wheel (PyTorch's CUDA build installs it;
    no GPU needed to load it), is found with its path; libc, loaded too, is not a CUDA one."""
    import ctypes
    import glob
    import sys
    runtime = sorted(path for entry in sys.path
                     for path in glob.glob(f"{entry}/nvidia/*/lib/libcudart.so.*"))
    if not runtime:
        pytest.skip("no CUDA runtime wheel installed (a CPU-only PyTorch build)")
    ctypes.CDLL(runtime[0])
    found = machine_doctor.loaded_cuda_libraries()
    name = Path(runtime[0]).name
    assert Path(found[name]).resolve() == Path(runtime[0]).resolve(), found
    assert not any(library.startswith("libc.") for library in found)
    assert all(path.endswith("/" + library) for library, path in found.items())


@pytest.mark.machine_sensitive  # bfloat16 steps
@pytest.mark.slow
def test_doctor_trains_real_steps_in_both_frameworks_and_says_ready():
    outcome = CliRunner().invoke(cli, ["doctor", "--json"])
    assert outcome.exit_code == 0, outcome.output
    report = json.loads(outcome.output)
    assert report["ready"] and report["verdict"].startswith("ready to compare on")
    for framework in ("tf", "torch"):
        entry = report["frameworks"][framework]
        # on the CPU: the test session hides any GPU from non-gpu tests (conftest)
        assert entry["kinds"] == ["cpu"] and not entry["environment"].get("gpus")
        for precision in ("fp32", "mixed"):
            result = entry["runs"]["cpu"]["precisions"][precision]
            assert result["ok"] and result["step_ms"] > 0 and len(result["losses"]) == 3
            assert all(1.0 < loss < 4.0 for loss in result["losses"])  # ~ln(10) at the start
    # on a CPU the step times are kept for --precision auto (compare.experiment.precision_rule)
    measured = precision_rule.measurement(report["model"])
    assert measured is not None and "precision_measured" in report
    assert measured["step_ms"] == {fw: {mode: report["frameworks"][fw]["runs"]["cpu"][
        "precisions"][mode]["step_ms"] for mode in ("fp32", "mixed")} for fw in ("tf", "torch")}


def test_a_framework_can_run_in_its_own_environment(monkeypatch, tmp_path):
    """CNNCOMPARE_TF_PYTHON names TensorFlow's interpreter (TF's CUDA 12 wheels apart from
    PyTorch's CUDA 13 ones); an interpreter without TensorFlow is named with the fix."""
    import subprocess
    import sys

    from compare.errors import FrameworkMissing
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    monkeypatch.setenv("CNNCOMPARE_TF_PYTHON", str(bare / "bin" / "python"))
    assert runner.command(tmp_path / "c.json", "tf")[0] == str(bare / "bin" / "python")
    assert runner.command(tmp_path / "c.json", "torch")[0] == sys.executable
    with pytest.raises(FrameworkMissing, match="missing tensorflow, keras"):
        runner.check_installed("tf")
    monkeypatch.setenv("CNNCOMPARE_TF_PYTHON", str(tmp_path / "no-such-python"))
    with pytest.raises(FrameworkMissing, match="cannot start"):
        runner.check_installed("tf")


def test_on_a_gpu_host_the_doctor_trains_on_the_gpu_alone(monkeypatch):
    """A framework that sees a GPU is examined there only: no CPU steps on a leased GPU."""
    asked = []
    monkeypatch.setattr(runner, "check_installed", lambda framework: None)
    monkeypatch.setattr(runner, "framework_environment",
                        lambda fw: {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
                        if fw == "torch" else {"gpus": [], "cuda": "12.5", "gpu_libraries": {}})
    monkeypatch.setattr(doctor, "_train_in_process", lambda fw, model, kind: asked.append(
        (fw, kind)) or {"device_name": "NVIDIA H100 80GB HBM3",
                        "precisions": {p: {"ok": True, "step_ms": 1.0}
                                       for p in ("fp32", "mixed")}})
    monkeypatch.setattr(doctor.environment, "machine", lambda: {"nvml": {"available": True}})
    found = doctor.examine("lenet")
    assert sorted(asked) == [("tf", "cpu"), ("torch", "gpu")]
    assert found["frameworks"]["torch"]["kinds"] == ["gpu"] and not found["ready"]
    asked.clear()  # --device cpu: the CPU alone, though PyTorch sees a GPU
    doctor.examine("lenet", device="cpu")
    assert sorted(asked) == [("tf", "cpu"), ("torch", "cpu")]


def test_doctor_takes_the_runs_own_model_and_device_options(tmp_path, monkeypatch):
    """--model and --device are the run's own options: a user's FILE.py is taken (and one
    that cannot build is one line, exit 2), --device cpu reaches the examination."""
    asked = []
    monkeypatch.setattr(doctor, "examine", lambda model, frameworks, device: asked.append(
        (model, frameworks, device)) or {"ready": True, "verdict": "ready", "frameworks": {}})
    outcome = CliRunner().invoke(cli, ["doctor", "--model", "examples/my_cnn.py", "--device",
                                       "cpu", "--framework", "torch", "--json"])
    assert outcome.exit_code == 0, outcome.output
    assert asked == [("examples/my_cnn.py", ("torch",), "cpu")]
    (tmp_path / "broken.py").write_text("def spec(num_classes):\n    return 1 / 0\n")
    outcome = CliRunner().invoke(cli, ["doctor", "--model", str(tmp_path / "broken.py")])
    assert outcome.exit_code == 2 and "did not build: ZeroDivisionError" in outcome.output
    assert len(outcome.output.strip().splitlines()) == 1 and asked == [asked[0]]
