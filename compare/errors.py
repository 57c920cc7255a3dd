"""Errors the user can act on: shown as one line, never as a traceback (unless --debug).

`report` is the one place that turns an exception into that line and an exit code; the
CLI and the framework subprocesses both call it.
"""

import sys
import traceback

# Exit codes shared by the CLI and both trainers (documented in the README).
EXIT_OK = 0
EXIT_FAILED = 1  # unexpected error, or a run that failed
EXIT_USAGE = 2  # bad input: options, data, devices
EXIT_DIVERGED = 3  # NaN/inf loss
EXIT_OOM = 4  # device out of memory
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); SIGTERM gives 143 and SIGHUP 129 (128 + signal)


class UserError(Exception):
    """A problem with the user's input or machine, with what to do about it."""

    exit_code = EXIT_USAGE


class DataError(UserError):
    """The dataset is missing, unreadable or malformed."""


class DeviceError(UserError):
    """A device was asked for that this machine does not have."""


class FrameworkMissing(UserError):
    """The framework for a run is not installed."""


class Diverged(Exception):
    """The training loss became NaN or infinite."""

    exit_code = EXIT_DIVERGED


class OutOfMemory(Exception):
    """The device ran out of memory at a given batch size."""

    exit_code = EXIT_OOM


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) or the loss of the parent process: the process
    finishes writing what it has, then exits 128 + the signal's number."""

    def __init__(self, signum: int, reason: str):
        super().__init__(reason)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def report(exc: BaseException, debug: bool, where: str = "") -> int:
    """Print `exc` as one line on stderr (after its traceback with --debug); its exit code.

    A UserError is the user's to fix and is shown as it is; anything else is a bug or an
    environment failure, named by its type and `where` it happened.
    """
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, KeyboardInterrupt):
        reason = f" ({exc})" if str(exc) else ""
        print(f"interrupted{reason}", file=sys.stderr, flush=True)
        return getattr(exc, "exit_code", EXIT_INTERRUPTED)
    if isinstance(exc, UserError):
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    prefix = f"{where} failed: " if where else ""
    hint = "" if debug else " (rerun with --debug for the traceback)"
    print(f"error: {prefix}{exc.__class__.__name__}: {exc}{hint}", file=sys.stderr, flush=True)
    return getattr(exc, "exit_code", EXIT_FAILED)
