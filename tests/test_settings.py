"""Every run setting is declared once (its RunConfig field's option) and everything else is
derived from that: the click options, the check, `sweep --vary`, the docs' table. These fail
when a setting lacks a part, or when the generated page is stale."""

from __future__ import annotations

import dataclasses

import pytest

from compare.cli import cli
from compare.cli import docs as cli_docs
from compare.errors import UserError
from compare.experiment import settings
from compare.experiment.config import ComparisonConfig, RunConfig


def test_every_setting_has_its_flag_help_check_and_table_row():
    table = settings.options_table()
    assert len(settings.RUN_SETTINGS) >= 30
    for setting in (*settings.RUN_SETTINGS, *settings.COMPARISON_SETTINGS):
        option = setting.option
        assert option.flag.startswith("--") and option.help.endswith((".", ")")), setting.path
        assert option.check.expected and callable(option.check.test), setting.path
        assert setting.check.test(setting.default()) or setting.path == "data_dir", setting.path
        assert f"| `{option.flag}`" in table, setting.path


@pytest.mark.parametrize("command, own", [("run", {"framework", "resume_dir", "own_loop"}),
                                          ("compare", {"resume_dir", "frameworks",
                                                       "allow_mixed_devices"}),
                                          ("sweep", {"varies", "frameworks",
                                                     "allow_mixed_devices"})])
def test_the_commands_offer_exactly_the_declared_settings(command, own):
    params = {p.name for p in cli.commands[command].params} - own - {"out", "quiet", "debug"}
    declared = {s.dest for s in settings.RUN_SETTINGS}
    if command == "compare":
        declared |= {s.dest for s in settings.COMPARISON_SETTINGS}
    assert params == declared


@pytest.mark.parametrize("setting", settings.RUN_SETTINGS, ids=lambda s: s.name)
def test_the_check_refuses_a_bad_value_of_every_setting_naming_it(setting):
    config = RunConfig()  # the value set as it is (no preset), valid for no check
    if setting.path.startswith("pipeline."):
        config = config.replace(pipeline=dataclasses.replace(
            config.pipeline, **{setting.path.split(".")[1]: object()}))
    else:
        config = config.replace(**{setting.path: object()})
    with pytest.raises(UserError, match=f"Invalid value for '--{setting.name}'"):
        settings.check(config)


def test_sweep_varies_what_is_declared_variable_and_parses_its_values():
    assert set(settings.VARIABLE) >= {"precision", "batch-size", "pipeline", "compile",
                                      "cuda-graphs", "devices", "device", "model", "lr", "epochs",
                                      "workers", "tf32", "steps-per-call", "strategy"}
    parsed_choices = 0
    for name, setting in settings.VARIABLE.items():
        text = ("on", "off") if setting.boolean else tuple(setting.check.choices or ())
        for value in text:
            expected = {"on": True, "off": False}[value] if setting.boolean else value
            assert settings.parse_vary(f"{name}={value}") == (name, [expected])
            parsed_choices += 1
        assert name in settings.vary_help()
    assert parsed_choices >= 10  # precision, pipeline, compile, device, model, ... and on/off
    assert settings.parse_vary("compile=on,off") == ("compile", [True, False])
    assert settings.parse_vary("lr=0.05") == ("lr", [0.05])
    assert settings.parse_vary("workers=0,2") == ("workers", [0, 2])
    config = settings.VARIABLE["pipeline"].apply(RunConfig(), "naive")
    assert config.pipeline.kind == "naive" and config.pipeline.workers == 0
    assert settings.COMPARISON_SETTINGS[0].default() == ComparisonConfig().seeds


def test_the_commands_page_is_generated_and_current():
    assert cli_docs.PAGE.read_text() == cli_docs.page(), (
        "docs/commands.md is stale: run python -m compare.cli.docs")
