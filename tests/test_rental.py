"""The rental's queue script (benchmarks/battery/rental.sh) on a CPU: every call brings back
what is on disk, a stage still running included."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _stand_in_battery(fake_bin: Path, calls: Path, variable: str) -> None:
    """A `python3` first on PATH that, as each stage's battery, appends its stage and the
    value of `variable` ("none" where unset) to `calls`."""
    fake_bin.mkdir()
    (fake_bin / "python3").write_text(
        "#!/bin/bash\nwhile [ \"$1\" != --stage ]; do shift; done\n"
        f"echo \"$2 ${{{variable}:-none}}\" >> {calls}\n")
    (fake_bin / "python3").chmod(0o755)


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
                       (rental / "battery" / "pytest-gpu-tf.xml", "<testsuites/>"),
                       (rental / "battery" / "battery.md",
                        "| resnet9-verdict-warm | both | ok; host not quiet (3 sightings) |\n"
                        "- resnet9-verdict-warm (both): host not quiet: 3 sightings, e.g. "
                        "4242: tar czf live.tar.gz (60% CPU, at +200 s)\n"),
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
    # a timed stage that shared its host, in its row and with what else ran there
    assert "| resnet9-verdict-warm | both | ok; host not quiet (3 sightings) |" in done.stdout
    assert "host not quiet: 3 sightings, e.g. 4242: tar czf live.tar.gz" in done.stdout
    with tarfile.open(out / "live.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"queue.log", "battery/battery.json", "battery/pytest-gpu-tf.xml",  # GPU tests'
            "battery/resnet9-verdict/runs/tf-seed0/result.json",
            "battery/resnet9-verdict/runs/tf-seed0/steps.csv"} <= names
    assert not any(n.endswith(".pt") or "/checkpoint" in n for n in names), names
    assert sorted(p.name for p in out.iterdir()) == ["battery.md", "live.tar.gz"]


def _bundle(tmp_path: Path, parts: int = 3) -> tuple[Path, Path, bytes]:
    """A checkout holding a fake TensorFlow bundle in `parts` parts with its SHA256SUMS, and
    the rental's folder with a deadline a minute away: (rental, checkout, the payload)."""
    rental, work = tmp_path / "rental", tmp_path / "checkout"
    content = tmp_path / "content"
    (content / "site").mkdir(parents=True)
    payload = os.urandom(300_000)  # incompressible: the archive spans every part
    (content / "site" / "lib.so").write_bytes(payload)
    (content / "site" / "activate.sh").write_text("echo ok\n")
    archive = tmp_path / "bundle.tar.xz"
    subprocess.run(["tar", "cJf", str(archive), "-C", str(content), "site"], check=True)
    data, size = archive.read_bytes(), archive.stat().st_size
    bundle, sums = work / ".tfgpu", []
    for i in range(parts):
        part = bundle / f"c{i:02d}" / f"c.{i:02d}"
        part.parent.mkdir(parents=True)
        part.write_bytes(data[i * size // parts:(i + 1) * size // parts])
        digest = subprocess.run(["sha256sum", str(part)], capture_output=True, text=True,
                                check=True).stdout.split()[0]
        sums.append(f"{digest}  c{i:02d}/c.{i:02d}\n")
    (bundle / "SHA256SUMS").write_text("".join(sums))
    (rental / "parts").mkdir(parents=True)
    (rental / "deadline").write_text(str(int(time.time()) + 60))
    return rental, work, payload


def _part(rental: Path, work: Path, name: str) -> None:
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "part", name],
                          cwd=work, env={**os.environ, "RENTAL_DIR": str(rental), "OUT": ""},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _unpacked(rental: Path) -> bool:
    """Whether the unpacking ended well, once it has ended (30 s at most)."""
    end = time.time() + 30
    while not (rental / "tf-unpacked").exists() and not (rental / "tf-failed").exists():
        assert time.time() < end, (rental / "unpack.log").read_text()
        time.sleep(0.2)
    return (rental / "tf-unpacked").exists()


def test_the_bundle_is_unpacked_as_its_parts_arrive_in_any_order(tmp_path):
    """Each `part` call keeps its part; the first starts one background unpacking that streams
    the parts in SHA256SUMS' order as they arrive (a part that comes early waits for the one
    before it), so the bundle is in place once its last part is, whole and byte for byte; a
    part sent twice is kept once."""
    rental, work, payload = _bundle(tmp_path)
    for name in ("c01", "c00", "c01", "c02"):
        assert not (rental / "tf-unpacked").exists()  # not before the last part
        _part(rental, work, name)
    assert _unpacked(rental), (rental / "unpack.log").read_text()
    assert (rental / "tfgpu" / "site" / "lib.so").read_bytes() == payload
    assert not list((rental / "partdata").iterdir())  # each part removed once unpacked


def test_the_fallback_cudnn_is_unpacked_into_the_bundle_once_all_its_parts_have_come(tmp_path):
    """`part fNN` keeps the bundle's fallback cuDNN parts apart from the core's: none starts
    the core's unpacking, and once the last has come they are unpacked beside the core (after
    it), under the bundle's folder where activate.sh's `fallback` looks."""
    rental, work, payload = _bundle(tmp_path)
    fallback = tmp_path / "fallback" / "site" / "nvidia" / "cudnn_cu12_fallback" / "lib"
    fallback.mkdir(parents=True)
    library = os.urandom(200_000)
    (fallback / "libcudnn.so.9").write_bytes(library)
    archive = tmp_path / "fallback.tar.xz"
    subprocess.run(["tar", "cJf", str(archive), "-C", str(tmp_path / "fallback"), "site"],
                   check=True)
    data, bundle = archive.read_bytes(), work / ".tfgpu"
    sums = (bundle / "SHA256SUMS").read_text()
    for i, piece in enumerate((data[:len(data) // 2], data[len(data) // 2:])):
        part = bundle / f"f{i:02d}" / f"f.{i:02d}"
        part.parent.mkdir()
        part.write_bytes(piece)
        digest = subprocess.run(["sha256sum", str(part)], capture_output=True, text=True,
                                check=True).stdout.split()[0]
        sums += f"{digest}  f{i:02d}/f.{i:02d}\n"
    (bundle / "SHA256SUMS").write_text(sums)
    _part(rental, work, "f01")
    assert not (rental / "unpacking").exists() and not (rental / "unpacking-fallback").exists()
    _part(rental, work, "f00")  # the last of the fallback's: unpacked once the core is
    for name in ("c00", "c01", "c02"):
        _part(rental, work, name)
    assert _unpacked(rental)
    end = time.time() + 30
    while not (rental / "tf-fallback-unpacked").exists():
        assert time.time() < end and not (rental / "tf-fallback-failed").exists(), (
            rental / "unpack-fallback.log").read_text()
        time.sleep(0.2)
    site = rental / "tfgpu" / "site"
    assert (site / "nvidia" / "cudnn_cu12_fallback" / "lib" / "libcudnn.so.9").read_bytes() \
        == library and (site / "lib.so").read_bytes() == payload
    assert not list((rental / "partdata").iterdir())


def test_a_part_missing_when_the_transfers_end_fails_the_unpacking_at_once(tmp_path):
    """After `hold` no part comes: the unpacking gives up then, so its xz and tar do not keep
    the host busy for the timed stages until the deadline."""
    rental, work, _ = _bundle(tmp_path)
    _part(rental, work, "c00")
    (rental / "quiet").touch()  # what `hold` does
    assert not _unpacked(rental)
    assert "part c01 never came" in (rental / "unpack.log").read_text()


def test_a_bad_part_is_refused_and_never_unpacked(tmp_path):
    rental, work = tmp_path / "rental", tmp_path / "checkout"
    part = work / ".tfgpu" / "c00" / "c.00"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"not the part the sums name")
    (work / ".tfgpu" / "SHA256SUMS").write_text(f"{'0' * 64}  c00/c.00\n")
    (rental / "parts").mkdir(parents=True)
    (rental / "deadline").write_text(str(int(time.time()) + 60))
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "part", "c00"],
                          cwd=work, env={**os.environ, "RENTAL_DIR": str(rental), "OUT": ""},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "part c00: bad sum" in done.stdout
    assert not list((rental / "parts").iterdir()) and not (rental / "unpacking").exists()


def test_a_queue_in_a_given_order_brings_tensorflow_in_before_a_comparison_of_both(tmp_path):
    """RENTAL_ORDER naming a comparison of both frameworks: the queue activates TensorFlow
    and runs its smoke test before the comparison, as it does before a TensorFlow stage;
    PyTorch's stages need neither. The images are decoded first (`prime`: an eager epoch, no
    compile cache warmed), once a machine. The bundle is in place already, so the untimed
    fill waits for the end."""
    rental, fake_bin = tmp_path / "rental", tmp_path / "bin"
    (rental / "repo").mkdir(parents=True)
    (rental / "tfgpu" / "site").mkdir(parents=True)
    (rental / "tfgpu" / "site" / "activate.sh").write_text("export TF_BUNDLE=active\n")
    (rental / "tf-unpacked").touch()
    (rental / "deadline").write_text(str(int(time.time()) + 600))
    calls = tmp_path / "calls.txt"
    _stand_in_battery(fake_bin, calls, "TF_BUNDLE")
    env = {**os.environ, "RENTAL_DIR": str(rental), "PATH": f"{fake_bin}:{os.environ['PATH']}",
           "RENTAL_ORDER": "torch:cuda-graphs: both:resnet9-own-best:",
           "RENTAL_FILL": "torch:kernels:"}
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "queue"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split("\n")[:-1] == [
        "prime none", "cuda-graphs none", "tf-smoke active", "resnet9-own-best active",
        "kernels active"]
    assert (rental / "queue-done").exists() and (rental / "primed").exists()
    assert (rental / "tf-smoked").exists()
    # the queue started again (rental.sh reorder) finds the images decoded and TensorFlow's
    # smoke test passed: neither runs a second time, and TensorFlow is still activated
    calls.unlink()
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "queue"],
                          cwd=REPO, env={**env, "RENTAL_FILL": ""}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split("\n")[:-1] == ["cuda-graphs none", "resnet9-own-best active"]


def test_every_stage_of_the_queue_is_given_the_commit_start_was_told(tmp_path):
    """The device's copy of the checkout has no .git: `BATTERY_COMMIT=HASH rental.sh start`
    keeps the commit, and each stage's battery is given it (battery.json and each GPU-test
    report record it), in a queue started again by `reorder` too."""
    rental, fake_bin = tmp_path / "rental", tmp_path / "bin"
    (rental / "repo").mkdir(parents=True)
    (rental / "primed").touch()
    (rental / "deadline").write_text(str(int(time.time()) + 600))
    (rental / "commit").write_text("abc1234\n")  # what `start` keeps
    calls = tmp_path / "calls.txt"
    _stand_in_battery(fake_bin, calls, "BATTERY_COMMIT")
    env = {k: v for k, v in os.environ.items() if k != "BATTERY_COMMIT"}
    env.update(RENTAL_DIR=str(rental), PATH=f"{fake_bin}:{os.environ['PATH']}",
               RENTAL_ORDER="torch:gpu-tests:")
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "queue"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split("\n")[:-1] == ["gpu-tests abc1234"]


def test_tensorflow_is_activated_once_its_cuda12_cudnn_is_unpacked_where_its_parts_came(
        tmp_path):
    """activate.sh picks the bundle's CUDA 12 cuDNN (what pip gives a TensorFlow user) only
    when it is unpacked: where its parts came, the queue waits for their unpacking before it
    activates TensorFlow and runs its smoke test; where they stopped coming (`hold`: the
    transfers are over) it does not wait for the rest."""
    rental, fake_bin = tmp_path / "rental", tmp_path / "bin"
    site = rental / "tfgpu" / "site"
    (rental / "repo").mkdir(parents=True)
    site.mkdir(parents=True)
    (site / "activate.sh").write_text(  # says which cuDNN it would put on the path
        'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\n'
        'export TF_BUNDLE=$([ -d "$here/nvidia/cudnn_cu12_fallback/lib" ] && echo cu12 '
        '|| echo machine)\n')
    for name in ("tf-unpacked", "primed", "parts/f00", "parts/f01", "unpacking-fallback/order"):
        (rental / name).parent.mkdir(parents=True, exist_ok=True)
        (rental / name).touch()
    (rental / "deadline").write_text(str(int(time.time()) + 600))
    calls = tmp_path / "calls.txt"
    _stand_in_battery(fake_bin, calls, "TF_BUNDLE")
    env = {**os.environ, "RENTAL_DIR": str(rental), "PATH": f"{fake_bin}:{os.environ['PATH']}",
           "RENTAL_ORDER": "tf:batchnorm:"}
    queue = subprocess.Popen(["bash", str(REPO / "benchmarks/battery/rental.sh"), "queue"],
                             cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        assert queue.poll() is None and not calls.exists()  # waiting for the fallback
        (site / "nvidia" / "cudnn_cu12_fallback" / "lib").mkdir(parents=True)
        (rental / "tf-fallback-unpacked").touch()
        assert queue.wait(timeout=30) == 0
    finally:
        queue.kill()
    assert calls.read_text().split("\n")[:-1] == ["tf-smoke cu12", "batchnorm cu12"]
    # some of its parts came, then the transfers ended: no wait for the others
    for name in ("tf-fallback-unpacked", "tf-smoked", "queue-done", "unpacking-fallback/order"):
        (rental / name).unlink()
    (rental / "unpacking-fallback").rmdir()
    (site / "nvidia" / "cudnn_cu12_fallback" / "lib").rmdir()
    (rental / "quiet").touch()
    calls.unlink()
    done = subprocess.run(["bash", str(REPO / "benchmarks/battery/rental.sh"), "queue"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split("\n")[:-1] == ["tf-smoke machine", "batchnorm machine"]
