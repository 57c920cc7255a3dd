"""Stands in for a framework's train module in a test: the process dies by SIGKILL."""

import os
import signal

os.kill(os.getpid(), signal.SIGKILL)
