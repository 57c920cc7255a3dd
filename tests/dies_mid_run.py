"""Stands in for torch_impl.train in a test: trains and writes its first epoch, then dies by
SIGKILL as its second epoch starts, writing no end (as the kernel's OOM killer or a crash in
a native library ends a trainer)."""

import os
import signal
import sys

from compare.run import worker
from torch_impl import train as torch_train

first_epoch_batches = torch_train.Trainer.batches


def batches(self, epoch):
    if epoch == 1:  # 0-based: the second epoch
        print("dies_mid_run: SIGKILL", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return first_epoch_batches(self, epoch)


torch_train.Trainer.batches = batches

if __name__ == "__main__":
    sys.exit(worker.main(torch_train))
