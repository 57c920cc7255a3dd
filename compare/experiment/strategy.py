"""Which distribution wrapper each framework trains under, decided the same way for both
(`--strategy`), so that both sides pay their wrapper or neither does.

- `auto` (the default): one replica trains without a wrapper in both frameworks
  (TensorFlow's default strategy, no DDP); several replicas train under MirroredStrategy
  (MultiWorkerMirroredStrategy across machines) and DistributedDataParallel;
- `none`: no wrapper, one replica only;
- `mirrored`: the wrapper even on one device (MirroredStrategy over it; DDP in one process),
  in both.

`tf=mirrored,torch=none` sets each framework apart: the one way to wrap one side and not
the other, which the report names as a fairness caveat.
"""

from __future__ import annotations

from dataclasses import dataclass

from compare.experiment.frameworks import FRAMEWORKS

CHOICES = ("auto", "none", "mirrored")  # --strategy
WRAPPERS = {"tf": "MirroredStrategy", "torch": "DistributedDataParallel"}


@dataclass(frozen=True)
class Resolved:
    wrapped: bool  # trains under the framework's distribution wrapper
    choice: str  # this framework's --strategy choice: auto, none or mirrored
    reason: str

    def to_dict(self, framework: str) -> dict:
        return {"choice": self.choice, "wrapper": WRAPPERS[framework] if self.wrapped else None,
                "reason": self.reason}


def parse(text: str) -> dict[str, str]:
    """'auto' -> {'tf': 'auto', 'torch': 'auto'}; 'tf=mirrored,torch=none' -> per framework
    (a framework not named takes auto); ValueError naming what is wrong."""
    text = text.strip()
    if "=" not in text:
        if text not in CHOICES:
            raise ValueError(f"one of {', '.join(CHOICES)}, or tf=CHOICE,torch=CHOICE")
        return {fw: text for fw in FRAMEWORKS}
    chosen = {fw: "auto" for fw in FRAMEWORKS}
    for part in text.split(","):
        framework, _, choice = part.partition("=")
        framework, choice = framework.strip(), choice.strip()
        if framework not in FRAMEWORKS or choice not in CHOICES:
            raise ValueError(f"{part!r}: expected tf=CHOICE or torch=CHOICE with CHOICE one of "
                             f"{', '.join(CHOICES)}")
        chosen[framework] = choice
    return chosen


def is_mixed(text: str) -> bool:
    """Whether the setting wraps the frameworks differently by request (tf=...,torch=...)."""
    chosen = parse(text)
    return len(set(chosen.values())) > 1


def resolve(text: str, framework: str, replicas: int, processes: int = 1) -> Resolved:
    """This framework's wrapper for a run of `replicas` replicas over `processes` processes."""
    choice = parse(text)[framework]
    if choice == "mirrored":
        return Resolved(True, choice, "--strategy mirrored: the wrapper also on one replica")
    if replicas > 1 or processes > 1:
        if choice == "none":
            raise ValueError(f"--strategy none trains one replica, not {replicas}")
        return Resolved(True, choice, f"{choice}: {replicas} replicas")
    if choice == "none":
        return Resolved(False, choice, "--strategy none: one replica, no wrapper")
    return Resolved(False, choice, "auto: one replica trains without a distribution wrapper")
