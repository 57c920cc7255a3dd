"""A bare Keras `model.fit` of the lenet recipe against `cnncompare run --framework tf`.

The baseline is what a Keras user writes: a Sequential LeNet, keras.optimizers.SGD,
sparse categorical cross-entropy, tf.data with shuffling and the same normalisation in
map(AUTOTUNE), batch 32, prefetch, model.fit for 2 epochs; no augmentation, as in the
recipe. Its train time is model.fit's wall time (no validation).

    python benchmarks/tf_fit_vs_tool.py --data-dir /tmp/cifar10-jpeg [--repeats 3]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import arguments, arrays, compare  # noqa: E402


def bare(args) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU") if not tf.config.list_physical_devices("GPU") else None
    keras.utils.set_random_seed(0)
    train_x, train_y, test_x, test_y, mean, std = arrays(args)
    mean255, std255 = tf.constant(mean * 255.0), tf.constant(std * 255.0)

    def normalise(image, label):
        return (tf.cast(image, tf.float32) - mean255) / std255, label

    train = (tf.data.Dataset.from_tensor_slices((train_x, train_y)).shuffle(len(train_y), seed=0)
             .map(normalise, num_parallel_calls=tf.data.AUTOTUNE).batch(32, drop_remainder=True)
             .prefetch(tf.data.AUTOTUNE))
    test = (tf.data.Dataset.from_tensor_slices((test_x, test_y))
            .map(normalise).batch(256))
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(6, 5, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(16, 5, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(120, activation="relu"),
        keras.layers.Dense(84, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    start = time.perf_counter()
    model.fit(train, epochs=2, verbose=0)
    train_time = time.perf_counter() - start
    _, accuracy = model.evaluate(test, verbose=0)
    return {"train_time_s": train_time, "test_accuracy": float(accuracy)}


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0])
    if args.bare:
        print(json.dumps(bare(args)))
    else:
        compare("tf", __file__, args, "bare Keras model.fit")
