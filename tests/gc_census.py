"""Stands in for torch_impl.train in a test: answers `--env` with what Python's cyclic
garbage collector holds once the framework process's run would begin: the objects frozen out
of its reach (the imports') and those it still tracks."""

import gc
import sys

from compare.run import worker
from torch_impl import train as torch_train


def census() -> dict:
    return {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}


torch_train.describe_environment = census

if __name__ == "__main__":
    sys.exit(worker.main(torch_train))
