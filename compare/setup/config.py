"""cnncompare's own configuration (config.json under $CNNCOMPARE_HOME: the environments
`cnncompare setup gpu` built), read and written here only, atomically; and the one rule for
the interpreter each framework runs in: $CNNCOMPARE_<FW>_PYTHON, else the environment
recorded here, else cnncompare's own."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from compare import files
from compare.errors import UserError
from compare.experiment.datasets.cache import ENVIRONMENTS

CONFIG_FILE = "config.json"
VERSION = 1
SETUP_COMMAND = "cnncompare setup gpu"


def home() -> Path:
    """$CNNCOMPARE_HOME (default ~/.cache/cnncompare)."""
    from compare.experiment.datasets.cache import home as cache_home
    return cache_home()


def path() -> Path:
    return home() / CONFIG_FILE


def environments() -> Path:
    """Where the set-up builds each framework's environment, one folder per build."""
    return home() / ENVIRONMENTS


@dataclass(frozen=True)
class Environment:
    """A framework's own virtual environment, as the set-up built it."""

    framework: str  # "tf"
    python: str  # its interpreter
    root: str  # its folder (under environments())
    kind: str  # "gpu" (TensorFlow with its CUDA libraries) or "cpu" (its CPU build)
    requirements: tuple[str, ...]  # what pip installed beside the project
    project: str  # how the project went in (--no-deps): "editable /path", "/path", "==1.0"
    built_at: str

    @property
    def setup_command(self) -> str:
        """The command that built it, which mends it."""
        return SETUP_COMMAND + (" --cpu" if self.kind == "cpu" else "")

    @classmethod
    def from_dict(cls, found: dict[str, Any], where: str) -> Environment:
        try:
            return cls(**{**found, "requirements": tuple(found["requirements"])})
        except (KeyError, TypeError) as exc:
            raise UserError(f"{where}: an environment entry that cannot be read ({exc}): "
                            f"run `{SETUP_COMMAND}` again, or delete the file") from None


@dataclass(frozen=True)
class Configuration:
    """Everything config.json holds."""

    environments: dict[str, Environment] = field(default_factory=dict)  # by framework

    def with_environment(self, environment: Environment) -> Configuration:
        return Configuration({**self.environments, environment.framework: environment})


def read() -> Configuration:
    """The configuration; empty where there is no file; a UserError naming the file when it
    cannot be read."""
    where = path()
    if not where.exists():
        return Configuration()
    try:
        found = files.read_json(where)
    except files.Unreadable as exc:
        raise UserError(f"{exc}: fix it, or delete it and run `{SETUP_COMMAND}` again") \
            from None
    if found.get("version") != VERSION:
        raise UserError(f"{where}: version {found.get('version')!r}, this cnncompare reads "
                        f"{VERSION}: delete it and run `{SETUP_COMMAND}` again")
    return Configuration({framework: Environment.from_dict(entry, str(where))
                          for framework, entry in (found.get("environments") or {}).items()})


def write(configuration: Configuration) -> Path:
    """config.json, atomically: a reader finds the old configuration or the new one."""
    return files.write_json(path(), {"version": VERSION, "environments": {
        framework: {**asdict(env), "requirements": list(env.requirements)}
        for framework, env in configuration.environments.items()}})


def variable(framework: str) -> str:
    """The environment variable that names a framework's interpreter, overriding the rest."""
    return f"CNNCOMPARE_{framework.upper()}_PYTHON"


@dataclass(frozen=True)
class Interpreter:
    """The interpreter a framework runs in, and what chose it."""

    python: str
    source: str  # "variable", "setup" or "own"
    framework: str

    @property
    def described(self) -> str:
        """Where it came from, in words: what a reader would change to change it."""
        if self.source == "variable":
            return f"${variable(self.framework)}"
        if self.source == "setup":
            return f"recorded by `{SETUP_COMMAND}` in {path()}"
        return "cnncompare's own"


def interpreter(framework: str) -> Interpreter:
    """The one rule: $CNNCOMPARE_TF_PYTHON / $CNNCOMPARE_TORCH_PYTHON where set, else the
    environment `cnncompare setup gpu` recorded for the framework, else this process's."""
    chosen = os.environ.get(variable(framework))
    if chosen:
        return Interpreter(chosen, "variable", framework)
    recorded = read().environments.get(framework)
    if recorded is not None:
        return Interpreter(recorded.python, "setup", framework)
    return Interpreter(sys.executable, "own", framework)


def ran_in(framework: str) -> dict[str, str]:
    """For a framework's own process (the fairness manifest): the interpreter it runs in, and
    what chose it; "started directly" where the rule names another (a process started by
    hand, or a test's)."""
    chosen = interpreter(framework)
    same = os.path.abspath(chosen.python) == os.path.abspath(sys.executable)
    return {"python": sys.executable,
            "from": chosen.described if same else "started directly, not by cnncompare"}
