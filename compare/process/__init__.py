"""The processes the commands start and stop: framework subprocesses, queues of runs, comparisons,
sweeps, signals, locks, multi-machine launches."""
