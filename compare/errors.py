"""Errors the user can act on: shown as one line, never as a traceback (unless --debug)."""

# Exit codes shared by the CLI and both trainers (documented in the README).
EXIT_OK = 0
EXIT_FAILED = 1  # unexpected error, or a run that failed
EXIT_USAGE = 2  # bad input: options, data, devices
EXIT_DIVERGED = 3  # NaN/inf loss
EXIT_OOM = 4  # device out of memory
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


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
