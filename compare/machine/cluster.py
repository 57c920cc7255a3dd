"""Runs spread over several processes by the frameworks' own launchers, read from the
environment once, here, for the CLI and both trainers.

cnncompare does not start processes on other machines; it runs under the frameworks' own
multi-machine engines:

* TensorFlow: every worker runs `cnncompare run --framework tf` with `TF_CONFIG` naming the
  cluster and its own task; tf_impl trains under `MultiWorkerMirroredStrategy`.
* PyTorch: `torchrun` starts `cnncompare run --framework torch` once per process and sets
  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK; torch_impl joins the
  process group from them (DistributedDataParallel).

Rank 0 (TensorFlow's chief: the `chief` task, else worker 0) writes the results; the other
processes write only their own config and log, under DIR/workers/rank-N.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Mapping

from compare.errors import UserError

TF_ROLES = ("chief", "worker")  # MultiWorkerMirroredStrategy's roles; no parameter servers
SPAWNED_ENV = "CNNCOMPARE_DDP_SPAWNED"  # set in the DDP processes torch_impl spawns itself


@dataclass(frozen=True)
class Launch:
    """How this process was started, and its place among the processes of the run."""

    launcher: str | None  # "TF_CONFIG", "torchrun", or None: one command on one machine
    rank: int = 0  # this process among all of them; 0 is the chief
    processes: int = 1  # processes training together, on all machines
    nodes: int = 1  # machines they run on
    local_rank: int = 0  # this process among those on its machine (torchrun)
    local_processes: int = 1  # processes on this machine (torchrun)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def multi_process(self) -> bool:
        return self.processes > 1

    def describe(self) -> str:
        if self.launcher is None:
            return "one process group on one machine"
        return (f"process {self.rank} of {self.processes} on {self.nodes} machine(s), "
                f"started by {self.launcher}")


def launch(framework: str, environ: Mapping[str, str] | None = None) -> Launch:
    """The launch of a `framework` process: TF_CONFIG counts for TensorFlow, torchrun's
    variables for PyTorch; each framework ignores the other's. A UserError when the
    variables are set but do not make sense."""
    environ = os.environ if environ is None else environ
    if framework == "tf" and environ.get("TF_CONFIG"):
        return _from_tf_config(environ["TF_CONFIG"])
    if framework == "torch" and "RANK" in environ and "WORLD_SIZE" in environ:
        return _from_torchrun(environ)
    return Launch(None)


# What the launchers set that makes a framework process join others (TF_CONFIG; torchrun).
LAUNCH_VARIABLES = ("TF_CONFIG", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def forget_launch() -> list[str]:
    """Drop the launchers' variables from this process's environment (and so its
    children's), for commands that examine this machine alone (`doctor`): under them a
    framework process would wait for peers that never come. The names dropped."""
    dropped = [name for name in LAUNCH_VARIABLES if name in os.environ]
    for name in dropped:
        del os.environ[name]
    return dropped


def replicas(framework: str, devices: int, launched: Launch) -> int:
    """Model copies over all processes: TensorFlow's workers each train --devices replicas
    (MultiWorkerMirroredStrategy over their local GPUs); a torchrun process trains one."""
    if launched.launcher is None:
        return devices
    return launched.processes * (devices if framework == "tf" else 1)


def check(framework: str, devices: int, device: str, launched: Launch) -> None:
    """What a multi-process launch cannot do, as one line (the validator calls this)."""
    if framework == "torch" and launched.launcher is not None and devices != 1:
        raise UserError(f"--devices {devices} under {launched.launcher}: each torchrun process "
                        "trains one replica; ask torchrun for more (--nproc-per-node)")
    if launched.launcher == "TF_CONFIG" and launched.multi_process and devices != 1 \
            and device == "cpu":
        raise UserError(f"--devices {devices} with --device cpu under TF_CONFIG: "
                        "MultiWorkerMirroredStrategy trains one replica per worker on a CPU")


def tf_tasks_named(message: str, environ: Mapping[str, str] | None = None) -> list[int]:
    """The ranks of the TF_CONFIG tasks a TensorFlow error message names, e.g.
    "/job:worker/replica:0/task:1" (its health check's "... is down"), in order."""
    environ = os.environ if environ is None else environ
    try:
        ordered = _tf_tasks(json.loads(environ.get("TF_CONFIG", "{}"))["cluster"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
    named = []
    for kind, index in re.findall(r"/job:(chief|worker)/replica:\d+/task:(\d+)", message):
        rank = ordered.index((kind, int(index))) if (kind, int(index)) in ordered else None
        if rank is not None and rank not in named:
            named.append(rank)
    return named


def _tf_tasks(cluster_spec: Mapping) -> list[tuple[str, int]]:
    """TF_CONFIG's tasks in rank order: the chief (if any), then the workers."""
    return [(role, i) for role in TF_ROLES for i in range(len(cluster_spec.get(role, [])))]


def _from_tf_config(text: str) -> Launch:
    try:
        spec = json.loads(text)
        cluster, task = spec["cluster"], spec["task"]
        kind, index = task["type"], int(task["index"])
        members = {role: list(cluster.get(role, [])) for role in TF_ROLES}
        others = sorted(set(cluster) - set(TF_ROLES))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"TF_CONFIG is not valid ({exc.__class__.__name__}: {exc}); it must be "
                        'JSON like {"cluster": {"worker": ["host1:port", "host2:port"]}, '
                        '"task": {"type": "worker", "index": 0}}') from None
    if others:
        raise UserError(f"TF_CONFIG names {', '.join(others)} tasks: only chief and worker "
                        "(MultiWorkerMirroredStrategy) are supported")
    if kind not in TF_ROLES or not 0 <= index < len(members[kind]):
        raise UserError(f"TF_CONFIG task {kind} {index} is not in its cluster "
                        f"({', '.join(f'{len(v)} {k}' for k, v in members.items())})")
    if len(members["chief"]) > 1:
        raise UserError("TF_CONFIG names more than one chief")
    ordered = _tf_tasks(members)
    hosts = {address.rsplit(":", 1)[0] for role in TF_ROLES for address in members[role]}
    return Launch("TF_CONFIG", ordered.index((kind, index)), len(ordered), len(hosts))


def _from_torchrun(environ: Mapping[str, str]) -> Launch:
    try:
        rank, processes = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local_rank = int(environ.get("LOCAL_RANK", rank))
        local = int(environ.get("LOCAL_WORLD_SIZE", processes))
    except ValueError as exc:
        raise UserError(f"torchrun's RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE are not "
                        f"integers ({exc})") from None
    if not (0 <= rank < processes and 0 <= local_rank < local <= processes):
        raise UserError(f"torchrun's variables do not fit together: RANK {rank}, WORLD_SIZE "
                        f"{processes}, LOCAL_RANK {local_rank}, LOCAL_WORLD_SIZE {local}")
    launcher = ("cnncompare's DDP processes" if environ.get(SPAWNED_ENV)
                else "torchrun" if environ.get("TORCHELASTIC_RUN_ID") else "RANK/WORLD_SIZE")
    return Launch(launcher, rank, processes, max(1, processes // local), local_rank, local)
