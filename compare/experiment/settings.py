"""Everything derived from the settings' declarations (the options in RunConfig's and
ComparisonConfig's field metadata): the click options, the check of a config's values, the
names and parsers of `sweep --vary`, how a value applies to a config, and the docs' options
table. Nothing here names a setting: add a field with `option(...)` and it appears in all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

from compare.errors import UserError
from compare.experiment.checks import KEY, Check, Option
from compare.experiment.config import RECIPES, ComparisonConfig, PipelineConfig, RunConfig

BOOLEAN_TEXT = {"on": True, "true": True, "yes": True, "1": True,
                "off": False, "false": False, "no": False, "0": False}


@dataclass(frozen=True)
class Setting:
    """One declared setting: where it lives in its config and how it is offered."""

    path: str  # the field, "pipeline.workers" inside the pipeline
    option: Option
    owner: type  # RunConfig or ComparisonConfig
    annotation: str  # the field's type, as written ("float | None")

    @property
    def name(self) -> str:
        """The flag's name: `--vary NAME=...`, the docs row."""
        return self.option.flag.split("/")[0].removeprefix("--")

    @property
    def dest(self) -> str:
        """The click parameter's name."""
        return self.path.replace(".", "__")

    @property
    def check(self) -> Check:
        return self.option.check

    @property
    def boolean(self) -> bool:
        return self.check.choices == ("on", "off")

    def default(self) -> Any:
        """The field's default (RunConfig's, before a model recipe)."""
        config: Any = self.owner()
        for part in self.path.split("."):
            config = getattr(config, part)
        return config

    def shown_default(self) -> str:
        """The default as --help and the docs show it: one value, or one per model recipe
        when the recipes differ ("lenet 32, resnet9 512")."""
        if self.option.shown_default is not None:
            return self.option.shown_default
        base = self.default()
        if self.owner is not RunConfig or "." in self.path:
            return _shown(base)
        per_model = {model: recipe.get(self.path, base) for model, recipe in RECIPES.items()}
        if len(set(map(repr, per_model.values()))) == 1:
            return _shown(base)
        return ", ".join(f"{m} {_shown(v)}" for m, v in per_model.items())

    def parse(self, text: str) -> Any:
        """A value from text (`sweep --vary`): on/off, one of the choices, or the field's
        number type; ValueError saying what is valid. The value's own check is `check`'s."""
        text = text.strip()
        if self.boolean:
            if text.lower() not in BOOLEAN_TEXT:
                raise ValueError("on or off")
            return BOOLEAN_TEXT[text.lower()]
        if self.check.choices is not None:
            if not self.check.test(text):
                raise ValueError(self.check.expected)
            return text
        try:
            return number_type(self)(text)
        except ValueError:
            raise ValueError(self.check.expected) from None

    def apply(self, config: RunConfig, value: Any) -> RunConfig:
        """`config` with this setting at `value` (a pipeline preset replaces the pipeline)."""
        if self.path == "pipeline.kind":
            return config.replace(pipeline=PipelineConfig.preset(value))
        if self.path.startswith("pipeline."):
            return config.replace(pipeline=dataclasses.replace(
                config.pipeline, **{self.path.split(".", 1)[1]: value}))
        return config.replace(**{self.path: value})


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def number_type(setting: Setting) -> type:
    """float or int, from the field's own annotation."""
    return float if "float" in setting.annotation else int


def _declared(owner: type, prefix: str = "") -> Iterator[Setting]:
    for f in dataclasses.fields(owner):
        if KEY in f.metadata:
            yield Setting(prefix + f.name, f.metadata[KEY], owner, str(f.type))
        if f.name == "pipeline":
            for nested in _declared(PipelineConfig, "pipeline."):
                yield Setting(nested.path, nested.option, owner, nested.annotation)


RUN_SETTINGS: tuple[Setting, ...] = tuple(_declared(RunConfig))
COMPARISON_SETTINGS: tuple[Setting, ...] = tuple(_declared(ComparisonConfig))
VARIABLE: dict[str, Setting] = {s.name: s for s in RUN_SETTINGS if s.option.vary}


def run_setting(name: str) -> Setting:
    """The run setting whose click parameter is `name`, for a command that takes the option
    without a whole run's config (doctor's --model and --device)."""
    return next(s for s in RUN_SETTINGS if s.dest == name)


def check(config: Any, settings: tuple[Setting, ...] = RUN_SETTINGS) -> None:
    """A UserError naming the first setting whose value is not valid."""
    for setting in settings:
        value: Any = config
        for part in setting.path.split("."):
            value = getattr(value, part)
        check_value(setting, value)


def check_value(setting: Setting, value: Any) -> None:
    if not setting.check.test(value):
        raise UserError(f"Invalid value for '{setting.option.flag.split('/')[0]}': "
                        f"{value!r} is not {setting.check.expected}")


def from_options(values: dict[str, Any]) -> dict[str, Any]:
    """RunConfig keyword arguments from the click values of RUN_SETTINGS (None: not given),
    the pipeline built from its preset and refinements."""
    fields: dict[str, Any] = {}
    pipeline_changes: dict[str, Any] = {}
    kind = values.pop("pipeline__kind", None)
    for setting in RUN_SETTINGS:
        if setting.path == "pipeline.kind" or setting.dest not in values:
            continue
        value = values.pop(setting.dest)
        if value is None:
            continue
        if setting.path.startswith("pipeline."):
            pipeline_changes[setting.path.split(".", 1)[1]] = value
        else:
            fields[setting.path] = value
    pipeline = PipelineConfig.preset(kind or PipelineConfig.kind)
    fields["pipeline"] = dataclasses.replace(pipeline, **pipeline_changes)
    return fields


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """'precision=fp32,mixed' -> ('precision', ['fp32', 'mixed']); UserError when malformed."""
    names = ", ".join(VARIABLE)
    if "=" not in text:
        raise UserError(f"--vary {text!r}: expected NAME=V1,V2 (names: {names})")
    name, _, values = text.partition("=")
    name = name.strip().replace("_", "-")
    if name not in VARIABLE:
        raise UserError(f"--vary {text!r}: unknown setting {name!r}; choose from {names}")
    parsed = []
    for raw in (v.strip() for v in values.split(",") if v.strip()):
        try:
            value = VARIABLE[name].parse(raw)
        except ValueError as exc:
            raise UserError(f"--vary {name}: {raw!r} is not valid ({exc})") from None
        try:
            check_value(VARIABLE[name], value)
        except UserError as exc:
            raise UserError(f"--vary {name}={raw}: {exc}") from None
        parsed.append(value)
    if not parsed:
        raise UserError(f"--vary {text!r}: no values")
    return name, parsed


def vary_help() -> str:
    """The --vary names as `sweep --help` lists them, with their choices."""
    return ", ".join(s.name + (f" ({'/'.join(s.check.choices)})" if s.check.choices else "")
                     for s in VARIABLE.values())


TABLE_HEADER = ("| option | default | valid values | `sweep --vary` | what it sets |\n"
                "|---|---|---|---|---|\n")


def options_table() -> str:
    """The docs' options table, one row per declared setting (in docs/commands.md)."""
    rows = []
    for setting in (*RUN_SETTINGS, *COMPARISON_SETTINGS):
        where = "" if setting.owner is RunConfig else " (compare)"
        flag = setting.option.flag.replace("|", "\\|")
        rows.append(f"| `{flag}`{where} | {setting.shown_default()} | "
                    f"{setting.check.expected} | {'yes' if setting.option.vary else ''} | "
                    f"{setting.option.help} |")
    return TABLE_HEADER + "\n".join(rows) + "\n"
