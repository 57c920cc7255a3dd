"""How a report names what it shows: the machine a comparison ran on, the precision it
computed in, a run's seed and a plain value. A leaf of the report package: the aggregates,
tables, figures and verdict all read it, and it reads none of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compare.experiment.config import FRAMEWORK_NAMES
from compare.machine import devices
from compare.schema import MachineIdentity

MACHINE_IDENTITY = (
    "A machine is the device the runs trained on, as each result's environment records it "
    "(hardware: the GPU model and count, or CPU), together with the host's platform string "
    "(environment.platform: operating system, kernel, architecture). Results of different "
    "machines, precisions, models or datasets are never averaged together; a shipped "
    "summary.json is shown as it was summarised.")


def seed_of(run: Mapping[str, Any]) -> int | None:
    return run.get("config", {}).get("seed")


def device_label(environment: Mapping[str, Any] | None) -> str | None:
    """'GPU: <count>x <model>' or 'CPU' from a result's environment (None when unknown): the
    hardware both frameworks record alike (compare.machine.devices.hardware)."""
    return devices.label_of(environment)


def machine_of(environment: Mapping[str, Mapping[str, Any] | None]) -> MachineIdentity:
    """{id, device, host, named}: where a comparison ran (see MACHINE_IDENTITY); `named` is
    the device as a reader knows it (a CPU's model, cores and instructions)."""
    labels = {fw: label for fw, env in environment.items() if (label := device_label(env))}
    hosts = sorted({env["platform"] for env in environment.values() if env and env.get("platform")})
    names: dict[str, str] = {fw: ((env or {}).get("hardware") or {}).get("named") or labels[fw]
                             for fw, env in environment.items() if fw in labels}
    if len(set(labels.values())) > 1:  # a comparison deliberately run on mixed devices
        device = "; ".join(f"{FRAMEWORK_NAMES[fw]} on {d}" for fw, d in sorted(labels.items()))
        named = "; ".join(f"{FRAMEWORK_NAMES[fw]} on {d}" for fw, d in sorted(names.items()))
    else:
        device = next(iter(labels.values()), "unknown device")
        named = " / ".join(sorted(set(names.values()))) or device
    host = " / ".join(hosts) or "unknown host"
    return {"id": f"{device} | {host}", "device": device, "host": host, "named": named}


def precision_label(run_or_summary: Mapping[str, Any]) -> str | None:
    """The precision a result or comparison computed in, for grouping and labels: the
    resolved compute type where recorded ('float32', 'bfloat16', 'float16'), else the
    requested --precision of an older result."""
    fairness = run_or_summary.get("fairness") or {}
    if "tf" in fairness or "torch" in fairness:  # a summary: one per framework
        types = {(f or {}).get("precision", {}).get("compute_type")
                 for f in fairness.values() if isinstance((f or {}).get("precision"), dict)}
        if types:
            return "/".join(sorted(t for t in types if t))
    elif isinstance(fairness.get("precision"), dict):
        return fairness["precision"].get("compute_type")
    return (run_or_summary.get("config") or {}).get("precision")


def plain(value: Any) -> str:
    """A manifest value as text: a dict as k=v pairs, None as n/a."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={plain(v)}" for k, v in value.items())
    return "n/a" if value is None else str(value)
