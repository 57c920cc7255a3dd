"""The scalars a run writes for TensorBoard (--tensorboard), through PyTorch's own writer."""

from __future__ import annotations

import sys
import types
from pathlib import Path


class ScalarWriter:
    """TensorBoard scalars through torch.utils.tensorboard's SummaryWriter."""

    def __init__(self, directory: Path):
        # tensorboard's compat layer imports TensorFlow when it is installed; in a PyTorch
        # process that would load a second LLVM beside torch's compiler (an abort). Its
        # documented `notf` marker makes it use its own stub instead. Where TensorFlow is
        # already loaded (the test suite holds both), there is nothing to avoid, and the
        # marker would break TensorFlow's own tf.summary (tensorboard implements it).
        if "tensorflow" not in sys.modules:
            sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("notf"))
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(str(directory))

    def scalars(self, tag: str, values: list[float], steps: list[int]) -> None:
        """The series `values` under `tag`, value i at step steps[i], each as float32."""
        if len(values) != len(steps):
            raise ValueError(f"{tag}: {len(values)} values for {len(steps)} steps")
        for value, step in zip(values, steps):  # add_scalar is cheap: a protobuf each
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
