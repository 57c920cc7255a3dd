"""Entry point of a framework subprocess: `python -m tf_impl.train CONFIG.json` (or torch_impl).

The parent (`cnncompare run/compare/sweep`) writes the RunConfig as JSON and starts the
framework's train module, which calls `main` here with its own implementation module.
Errors the user can act on print one line and exit non-zero; --debug shows tracebacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from compare import data
from compare.config import RunConfig
from compare.errors import EXIT_FAILED, EXIT_INTERRUPTED, UserError


def quiet_framework_logs() -> None:
    """Keep TensorFlow's C++ start-up chatter off the user's terminal (set before import)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "2")


def main(impl: ModuleType, argv: list[str] | None = None) -> int:
    """Run what the arguments ask of `impl` (tf_impl.train or torch_impl.train)."""
    parser = argparse.ArgumentParser(prog=f"python -m {impl.__name__}",
                                     description="One framework's side of cnncompare (started by the CLI).")
    parser.add_argument("config", nargs="?", help="RunConfig JSON file")
    parser.add_argument("--parity", metavar="NPZ", help="write the parity probe to NPZ instead of training")
    parser.add_argument("--parity-steps", type=int, default=3)
    parser.add_argument("--env", action="store_true", help="print what this framework sees, as JSON")
    args = parser.parse_args(argv)
    debug = False
    try:
        if args.env:
            print(json.dumps(impl.describe_environment(), indent=2))
            return 0
        if not args.config:
            parser.error("a config file is needed")
        config = RunConfig.from_json(Path(args.config).read_text())
        debug = config.debug
        dataset = data.config_dataset(config)
        if args.parity:
            impl.parity_probe(config, dataset, Path(args.parity), args.parity_steps)
            return 0
        return impl.train(config, dataset)
    except UserError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            traceback.print_exc()
        else:
            print(f"error: {impl.__name__} failed: {exc.__class__.__name__}: {exc} "
                  f"(rerun with --debug for the traceback)", file=sys.stderr, flush=True)
        return EXIT_FAILED
