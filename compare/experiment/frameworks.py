"""The two frameworks compared, declared once: their keys, their names in words, the
package each imports, and the environment a process that imports one starts with.
Everything that lists or names the frameworks reads them from here."""

from __future__ import annotations

import os
from pathlib import Path

FRAMEWORKS = ("tf", "torch")  # the order of every table, plot and loop: TensorFlow first
FRAMEWORK_NAMES = {"tf": "TensorFlow/Keras", "torch": "PyTorch"}
FRAMEWORK_PACKAGES = {"tf": "tensorflow", "torch": "torch"}  # what a version record names
# what a framework's processes import: its package first, then what its code needs beside it
REQUIRES = {fw: (package, *also) for (fw, package), also in zip(
    FRAMEWORK_PACKAGES.items(), (("keras",), ("torchvision",)))}
IMPL_PACKAGES = {"tf": "tf_impl", "torch": "torch_impl"}  # each framework's twin package
# The TensorFlow the project is tested with (pyproject asks only >=2.16): the version
# `cnncompare setup gpu` installs in TensorFlow's own environment (compare.setup)
TENSORFLOW_PIN = "2.21.0"
# TensorFlow's and absl's C++ start-up chatter kept off the user's terminal: 2 shows errors only
QUIET_LOGS = {"TF_CPP_MIN_LOG_LEVEL": "2", "ABSL_MIN_LOG_LEVEL": "2"}
REPOSITORY = Path(__file__).resolve().parents[2]  # holds compare, tf_impl and torch_impl


def impl_module(framework: str, role: str) -> str:
    """The module of `framework`'s twin package that plays `role` ("train", "port"...)."""
    return f"{IMPL_PACKAGES[framework]}.{role}"


def quiet_framework_logs() -> None:
    """Quiet this process's frameworks (before TensorFlow is imported); a setting the user
    made in the environment stands. For a process that imports a framework itself (the
    tests'); a process this one starts gets it from process_environment."""
    for name, level in QUIET_LOGS.items():
        os.environ.setdefault(name, level)


def process_environment() -> dict[str, str]:
    """The environment of a process this one starts to import a framework: this one's,
    quieted, unbuffered (its lines reach the parent as they happen), with the repository first
    on its path."""
    env = {**QUIET_LOGS, **os.environ}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONPATH"] = str(REPOSITORY) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    return env
