"""The scalars a run writes for TensorBoard (--tensorboard), through TensorFlow's own writer."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf
from tensorboard.plugins.scalar import metadata as scalar_metadata


class ScalarWriter:
    """TensorBoard scalars through tf.summary's own event-file writer."""

    def __init__(self, directory: Path):
        self.writer = tf.summary.create_file_writer(str(directory))
        # A whole series in one call of one graph, traced once: the signature leaves the
        # length open, so every series and tag reuses the trace: one call a series, not one
        # eager tf.summary.scalar call a value.
        self._write = tf.function(self._series, autograph=False, input_signature=(
            tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.float64),
            tf.TensorSpec([None], tf.int64)))

    def scalars(self, tag: str, values: list[float], steps: list[int]) -> None:
        """The series `values` under `tag`, value i at step steps[i], each as float32."""
        if len(values) != len(steps):
            raise ValueError(f"{tag}: {len(values)} values for {len(steps)} steps")
        self._write(tag, values, steps)

    def _series(self, tag, values, steps):
        """What tf.summary.scalar writes for each value (the value as float32, the scalar
        plugin's metadata), in a tf.while_loop; the tag is the caller's whole, where
        tf.summary.scalar would prefix the loop's name scope."""
        metadata = scalar_metadata.create_summary_metadata(display_name=None, description=None)

        def write(i):
            written = tf.summary.write(tag, tf.cast(values[i], tf.float32), step=steps[i],
                                       metadata=metadata)
            with tf.control_dependencies([written]):  # in step order: each before the next
                return (i + 1,)

        with self.writer.as_default():
            tf.while_loop(lambda i: i < tf.size(values), write, (tf.constant(0),))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
