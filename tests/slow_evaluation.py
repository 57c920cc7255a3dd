"""Stands in for torch_impl.train in a test: the first evaluation says it has begun (it
creates the file $CNNCOMPARE_TEST_EVALUATING) and lasts SLOW_EVALUATION_S, so that a signal
sent then lands in it."""

import os
import sys
import time
from pathlib import Path

from compare.run import worker
from torch_impl import train

SLOW_EVALUATION_S = 60.0
_evaluate = train.Trainer.evaluate


def _slow_evaluate(self):
    Path(os.environ["CNNCOMPARE_TEST_EVALUATING"]).touch()
    time.sleep(SLOW_EVALUATION_S)
    return _evaluate(self)


if __name__ == "__main__":  # only as the trainer process: a test may import the constant
    train.Trainer.evaluate = _slow_evaluate
    sys.exit(worker.main(train))
