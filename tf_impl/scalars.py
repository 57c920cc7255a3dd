"""The scalars a run writes for TensorBoard (--tensorboard), through TensorFlow's own writer."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf


class ScalarWriter:
    """TensorBoard scalars through tf.summary's own event-file writer."""

    def __init__(self, directory: Path):
        self.writer = tf.summary.create_file_writer(str(directory))

    def scalar(self, tag: str, value: float, step: int) -> None:
        with self.writer.as_default():
            tf.summary.scalar(tag, value, step=step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
