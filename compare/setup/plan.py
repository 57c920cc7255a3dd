"""What `cnncompare setup gpu` has to do, decided from facts a test can inject: whether this
host has a GPU, what config.json records, what a probe of the recorded interpreter finds,
and what a current environment holds (the pinned TensorFlow, the project as it is installed
here, the project's requirements less PyTorch's). `decide` is the whole decision; `gather`
reads the facts from the machine."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from importlib.metadata import Distribution
from pathlib import Path

from compare.experiment.frameworks import REPOSITORY, REQUIRES, TENSORFLOW_PIN
from compare.setup import config

FRAMEWORK = "tf"  # the framework whose CUDA wheels need an environment of their own
PROJECT = "cnncompare"
# Left out of TensorFlow's environment: PyTorch's side, and tensorflow-datasets (decoded by
# cnncompare's own interpreter, compare.experiment.datasets); TensorFlow goes in pinned.
LEFT_OUT = {*REQUIRES["torch"], "tensorflow", "tensorflow-datasets"}
PROBE_TIMEOUT_S = 120
# run in the environment's interpreter (-I: its own site-packages only): TensorFlow's version
# and distribution, and the cnncompare installed there, by metadata (nothing imported)
PROBE = """
import importlib.util, json, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
found = {"python": sys.version.split()[0], "project_version": version("cnncompare")}
for name in ("tensorflow", "tensorflow-cpu"):
    if version(name):
        found.update(tensorflow=version(name), distribution=name)
        break
spec = importlib.util.find_spec("compare")
if spec is not None and spec.origin:
    found["project_at"] = str(__import__("pathlib").Path(spec.origin).parents[1])
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Project:
    """How the project goes into the environment (without its dependencies), and what a
    current install there looks like."""

    args: tuple[str, ...]  # pip's: ("-e", checkout), (folder,) or ("cnncompare==1.0",)
    version: str
    location: str | None  # the checkout an editable install imports from

    @property
    def described(self) -> str:
        return " ".join(("editable", *self.args[1:]) if self.args[0] == "-e" else self.args)


@dataclass(frozen=True)
class Wanted:
    """What a current environment of `kind` holds."""

    kind: str  # "gpu": TensorFlow with its CUDA libraries; "cpu": its CPU build
    distribution: str  # the distribution that brings TensorFlow
    requirements: tuple[str, ...]  # TensorFlow's (pinned) first, then the project's others
    project: Project


@dataclass(frozen=True)
class Found:
    """A probe of an environment's interpreter; `error` where it does not run."""

    error: str | None = None
    tensorflow: str | None = None  # its TensorFlow's version
    distribution: str | None = None  # the distribution it came from
    project_version: str | None = None
    project_at: str | None = None  # the folder its `compare` package is imported from


@dataclass(frozen=True)
class Facts:
    asked: str  # "gpu", or "cpu" (--cpu: TensorFlow's CPU build, on any host)
    gpus: int  # the NVIDIA GPUs NVML shows
    recorded: config.Environment | None  # what config.json holds for TensorFlow
    found: Found | None  # a probe of its interpreter (None where nothing is recorded)
    wanted: Wanted
    override: str | None  # $CNNCOMPARE_TF_PYTHON, where set


@dataclass(frozen=True)
class Decision:
    action: str  # "not-needed", "current", "build" or "rebuild"
    reasons: tuple[str, ...] = ()  # why it builds
    notes: tuple[str, ...] = ()  # what the user should know either way


def decide(facts: Facts) -> Decision:
    """What to do: nothing on a host without a GPU (unless the CPU build was asked for);
    nothing where the recorded environment is current; else build one (aside)."""
    notes: tuple[str, ...] = ()
    if facts.override:
        notes = (f"${config.variable(FRAMEWORK)}={facts.override} is set and overrides the "
                 f"recorded environment: unset it to use the one this set-up records",)
    if facts.asked == "gpu" and facts.gpus == 0:
        kept = (f"the environment recorded earlier stays in use: {facts.recorded.python}",) \
            if facts.recorded is not None else ()
        return Decision("not-needed", notes=(*kept, *notes))
    if facts.recorded is None or facts.found is None:
        return Decision("build", ("none is recorded yet",), notes)
    reasons = stale(facts.recorded, facts.found, facts.wanted)
    return Decision("rebuild", tuple(reasons), notes) if reasons else Decision(
        "current", notes=notes)


def stale(recorded: config.Environment, found: Found, wanted: Wanted) -> list[str]:
    """Why the recorded environment is not what a set-up of `wanted` would build; [] where it
    is."""
    if found.error is not None:
        return [f"its interpreter {recorded.python} does not run: {found.error}"]
    reasons = []
    if recorded.kind != wanted.kind:
        reasons.append(f"it holds TensorFlow's {_kind_words(recorded.kind)}, this set-up "
                       f"installs its {_kind_words(wanted.kind)}")
    if found.tensorflow != TENSORFLOW_PIN:
        reasons.append(f"its TensorFlow is {found.tensorflow or 'missing'}, the project pins "
                       f"{TENSORFLOW_PIN}")
    elif found.distribution != wanted.distribution:
        reasons.append(f"its TensorFlow comes from {found.distribution}, not "
                       f"{wanted.distribution}")
    project = wanted.project
    if found.project_version != project.version:
        reasons.append(f"its cnncompare is {found.project_version or 'missing'}, this one is "
                       f"{project.version}")
    elif project.location is not None and found.project_at != project.location:
        reasons.append(f"its cnncompare comes from {found.project_at}, not from the checkout "
                       f"at {project.location}")
    # TensorFlow's own (the first) is checked above, against what is installed
    added = sorted(set(wanted.requirements[1:]) - set(recorded.requirements[1:]))
    dropped = sorted(set(recorded.requirements[1:]) - set(wanted.requirements[1:]))
    if added or dropped:
        reasons.append("the project's requirements changed since it was built ("
                       + "; ".join(part for part in (
                           f"now {', '.join(added)}" if added else "",
                           f"no longer {', '.join(dropped)}" if dropped else "") if part)
                       + ")")
    return reasons


def _kind_words(kind: str) -> str:
    return "CUDA build" if kind == "gpu" else "CPU build"


def tensorflow_requirement(kind: str) -> tuple[str, str]:
    """(the distribution, pip's requirement) of the pinned TensorFlow: with its CUDA
    libraries on a GPU host; else its CPU build (tensorflow-cpu on x86-64, a third the size
    of the CUDA-ready wheel; elsewhere plain tensorflow)."""
    if kind == "gpu":
        return "tensorflow", f"tensorflow[and-cuda]=={TENSORFLOW_PIN}"
    cpu = "tensorflow-cpu" if platform.machine().lower() in ("x86_64", "amd64") else "tensorflow"
    return cpu, f"{cpu}=={TENSORFLOW_PIN}"


def project_requirements() -> tuple[str, ...]:
    """The project's own runtime requirements that TensorFlow's processes need: from the
    checkout's pyproject.toml where cnncompare runs from one, else its installed metadata;
    without extras' and LEFT_OUT's."""
    pyproject = REPOSITORY / "pyproject.toml"
    if pyproject.exists():
        import tomllib
        declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    else:
        declared = _installed().requires or []
    kept = []
    for requirement in declared:
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        if name is None or "extra ==" in requirement.replace("extra==", "extra =="):
            continue
        if re.sub(r"[-_.]+", "-", name.group(0)).lower() not in LEFT_OUT:
            kept.append(requirement.strip())
    return tuple(kept)


def project_install() -> Project:
    """The project as it runs here: a checkout goes in editable from the same folder; an
    installed copy from the folder it was installed from, else from the index at its
    version."""
    if (REPOSITORY / "pyproject.toml").exists():
        import tomllib
        version = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"][
            "version"]
        return Project(("-e", str(REPOSITORY)), version, str(REPOSITORY))
    installed = _installed()
    origin = json.loads(installed.read_text("direct_url.json") or "{}").get("url", "")
    if origin.startswith("file://") and Path(origin[len("file://"):]).is_dir():
        return Project((origin[len("file://"):],), installed.version, None)
    return Project((f"{PROJECT}=={installed.version}",), installed.version, None)


def _installed() -> Distribution:
    """The installed cnncompare that runs here: the one beside its packages, else any."""
    from importlib import metadata
    found = next(iter(metadata.distributions(name=PROJECT, path=[str(REPOSITORY)])), None)
    return found if found is not None else metadata.distribution(PROJECT)


def wanted(kind: str) -> Wanted:
    distribution, tensorflow = tensorflow_requirement(kind)
    return Wanted(kind, distribution, (tensorflow, *project_requirements()), project_install())


def probe(python: str) -> Found:
    """What the environment of `python` holds (PROBE, in that interpreter)."""
    try:
        done = subprocess.run([python, "-I", "-c", PROBE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Found(error=f"{exc.__class__.__name__}: {exc}")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return Found(error=lines[-1] if lines else f"exit {done.returncode}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return Found(None, answer.get("tensorflow"), answer.get("distribution"),
                 answer.get("project_version"), answer.get("project_at"))


def gpu_count() -> int:
    from compare.machine.devices import nvidia_gpus
    return nvidia_gpus()


def gather(asked: str) -> Facts:
    """The facts of this machine for a set-up that asks for `asked`."""
    recorded = config.read().environments.get(FRAMEWORK)
    return Facts(asked, gpu_count(), recorded,
                 probe(recorded.python) if recorded is not None else None, wanted(asked),
                 os.environ.get(config.variable(FRAMEWORK)) or None)


def staleness(framework: str) -> list[str]:
    """For doctor: why the environment recorded for `framework` is out of date ([] where it
    is current, or none is recorded)."""
    recorded = config.read().environments.get(framework)
    if recorded is None or framework != FRAMEWORK:
        return []
    reasons = stale(recorded, probe(recorded.python), wanted(recorded.kind))
    if recorded.kind == "cpu" and gpu_count() > 0:
        reasons.append("it holds TensorFlow's CPU build on a host with a GPU")
    return reasons
