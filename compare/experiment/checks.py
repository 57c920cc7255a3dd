"""What a setting's declaration holds: its flag, help text, check and, where `sweep` can vary it,
how a value is read from text. A RunConfig field declares its setting in its own metadata
(`field(default=..., metadata=option(...))`), so the default, the flag, the help, the check,
the `--vary` name and the docs row all come from that one place (compare.experiment.settings
derives them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

KEY = "cnncompare.option"  # the metadata key of a field's Option


@dataclass(frozen=True)
class Check:
    """A valid value: `test(value)`; `expected` says what that means ("an integer >= 1")."""

    test: Callable[[Any], bool]
    expected: str
    choices: tuple[str, ...] | None = None  # a finite set of text values (--help, --vary)


def count(minimum: int = 1) -> Check:
    return Check(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum,
                 f"an integer >= {minimum}")


def number(low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, what: str = "a number") -> Check:
    """A finite number within the bounds (each closed unless `*_open`)."""
    def test(v: Any) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return False
        if low is not None and (v <= low if low_open else v < low):
            return False
        return high is None or (v < high if high_open else v <= high)
    if low is not None and high is not None:
        span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        expected = f"{what} in {span}"
    elif low is not None:
        shown = "a finite number" if what == "a number" else what
        expected = f"{shown} {'>' if low_open else '>='} {low:g}"
    else:
        expected = "a finite number" if what == "a number" else what
    return Check(test, expected)


def choice(values: tuple[str, ...]) -> Check:
    return Check(lambda v: v in values, f"one of {', '.join(values)}", tuple(values))


def flag() -> Check:
    return Check(lambda v: isinstance(v, bool), "on or off", ("on", "off"))


def path() -> Check:
    return Check(lambda v: isinstance(v, str) and v != "", "a path")


def strategy_check() -> Check:
    """--strategy: a choice for both frameworks, or tf=CHOICE,torch=CHOICE."""
    from compare.experiment import strategy

    def test(v: Any) -> bool:
        try:
            strategy.parse(v)
        except (ValueError, AttributeError):
            return False
        return True
    return Check(test, f"one of {', '.join(strategy.CHOICES)}, or tf=CHOICE,torch=CHOICE",
                 strategy.CHOICES)


def model_check() -> Check:
    """--model: a built-in network, or a reference to the user's own spec (validated by
    loading it: compare.run.validate.check_model)."""
    from compare.experiment import networks
    return Check(networks.is_reference, f"one of {', '.join(networks.MODELS)}, a file "
                 "FILE.py[:NAME] or package.module:NAME", tuple(networks.MODELS))


def optional(check: Check) -> Check:
    """`check`, or None (the setting's own default applies)."""
    return Check(lambda v: v is None or check.test(v), check.expected, check.choices)


@dataclass(frozen=True)
class Option:
    """A setting as the command line and the docs show it."""

    flag: str  # "--batch-size"; a boolean gets "--x/--no-x"
    help: str
    check: Check
    vary: bool = False  # `sweep --vary` may vary it (by the flag's name, without dashes)
    metavar: str | None = None
    shown_default: str | None = None  # where the default is not the field's (e.g. per device)
    path: bool = False  # a file-system path (click.Path)


def option(flag: str, help: str, check: Check, **more: Any) -> dict[str, Option]:
    """The metadata of a RunConfig field that is a setting."""
    return {KEY: Option(flag, help, check, **more)}
