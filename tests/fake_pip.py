"""A stand-in for pip in the environment `cnncompare setup gpu` builds (tests/test_setup.py):
run by that environment's interpreter as `python fake_pip.py install ARGS`, it prints lines
as pip does and installs metadata only (TensorFlow's distribution at the version asked; the
project, editable, as a .pth to the checkout), so the set-up's probe finds what pip would
have left. $FAKE_PIP picks its behaviour: "ok"; "fail" (exits 1 at the first install with
pip's error); "interrupt" (interrupts its parent, as a Ctrl-C would, then waits to be
ended; its pid in $FAKE_PIP_PID)."""

from __future__ import annotations

import os
import re
import signal
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

SITE = Path(sysconfig.get_paths()["purelib"])


def dist_info(name: str, version: str) -> None:
    folder = SITE / f"{re.sub(r'[-.]+', '_', name)}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def main(args: list[str]) -> int:
    behaviour = os.environ.get("FAKE_PIP", "ok")
    assert args[0] == "install", args
    if "--no-deps" in args:  # the project: `install --no-deps -e CHECKOUT`
        checkout = Path(args[-1])
        version = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["version"]
        print(f"Obtaining file://{checkout}", flush=True)
        dist_info("cnncompare", version)
        (SITE / "cnncompare.pth").write_text(f"{checkout}\n")
        print(f"Successfully installed cnncompare-{version}", flush=True)
        return 0
    tensorflow = args[1]
    print(f"Collecting {tensorflow}", flush=True)
    if behaviour == "fail":
        print(f"ERROR: Could not find a version that satisfies the requirement {tensorflow}",
              flush=True)
        print(f"ERROR: No matching distribution found for {tensorflow}", flush=True)
        return 1
    if behaviour == "interrupt":
        print("  Downloading tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (620 MB)",
              flush=True)
        if os.environ.get("FAKE_PIP_PID"):  # where the test looks for this process after
            Path(os.environ["FAKE_PIP_PID"]).write_text(str(os.getpid()))
        os.kill(os.getppid(), signal.SIGINT)
        time.sleep(60)  # until the set-up ends this process
        return 1
    name, version = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(.+)", tensorflow).groups()
    for requirement in args[2:]:
        print(f"Collecting {requirement}", flush=True)
    print("Installing collected packages: " + ", ".join(args[1:]), flush=True)
    dist_info(name, version)
    print(f"Successfully installed {name}-{version}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
