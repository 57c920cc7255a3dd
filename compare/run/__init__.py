"""One training run inside a framework's process: the loop and its clock, the result files,
checkpoints, the phase profile."""
