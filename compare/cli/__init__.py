"""The `cnncompare` command line: one module per command (run, compare, sweep, report, env,
doctor, data, setup), their shared options in options.py, the group and `main` in app.py."""

from compare.cli.app import cli, main

__all__ = ["cli", "main"]
