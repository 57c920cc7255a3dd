"""Stands in for torch_impl.train in a test: evaluation number $CNNCOMPARE_TEST_SLOW_EVALUATION
(1 unless set: the first epoch's) says it has begun (it creates the file
$CNNCOMPARE_TEST_EVALUATING) and lasts SLOW_EVALUATION_S, so that a signal sent then lands in
it, at a known point whatever the machine's speed: the epochs before it are written, none
after it can start."""

import os
import sys
import time
from pathlib import Path

from compare.run import worker
from torch_impl import train

SLOW_EVALUATION_S = 600.0  # far longer than any stop may take: a stop that waits for it fails
_evaluate = train.Trainer.evaluate
_evaluations = [0]


def _slow_evaluate(self):
    _evaluations[0] += 1
    if _evaluations[0] == int(os.environ.get("CNNCOMPARE_TEST_SLOW_EVALUATION", "1")):
        Path(os.environ["CNNCOMPARE_TEST_EVALUATING"]).touch()
        time.sleep(SLOW_EVALUATION_S)
    return _evaluate(self)


if __name__ == "__main__":  # only as the trainer process: a test may import the constant
    train.Trainer.evaluate = _slow_evaluate
    sys.exit(worker.main(train))
