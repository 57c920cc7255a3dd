"""Keras networks written for the port tests (tests/test_port.py): a functional residual CNN
with depthwise and padded strided convolutions, a Sequential CNN, and some the spec cannot
express."""

import keras
from keras import layers


def functional_residual(classes: int = 10) -> keras.Model:
    """Conv+BN+ReLU stem, a residual block with an identity shortcut, a strided block whose
    shortcut is a 1x1 convolution, a depthwise-separable block, global pooling, a classifier."""
    images = keras.Input((32, 32, 3))
    x = layers.Conv2D(8, 3, padding="same", use_bias=False, name="stem")(images)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    y = layers.Conv2D(8, 3, padding="same", activation="relu", name="block1_a")(x)
    y = layers.Conv2D(8, 3, padding="same", name="block1_b")(y)
    x = layers.ReLU(name="block1_out")(layers.Add(name="block1")([x, y]))
    y = layers.ZeroPadding2D(1, name="block2_pad")(x)
    y = layers.Conv2D(16, 3, strides=2, use_bias=False, name="block2_a")(y)
    y = layers.BatchNormalization(name="block2_a_bn")(y)
    y = layers.Activation("relu", name="block2_a_relu")(y)
    y = layers.DepthwiseConv2D(3, padding="same", use_bias=False, name="block2_dw")(y)
    y = layers.BatchNormalization(name="block2_dw_bn")(y)
    shortcut = layers.Conv2D(16, 1, strides=2, use_bias=False, name="block2_short")(x)
    x = layers.Add(name="block2")([shortcut, y])
    x = layers.ReLU(6.0, name="block2_relu6")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(images, layers.Dense(classes, name="logits")(x), name="keras_residual")


def sequential(classes: int = 10) -> keras.Model:
    """LeNet-like: convolutions with their own ReLU, max pooling, flatten, dense layers."""
    return keras.Sequential([
        keras.Input((32, 32, 3)),
        layers.Conv2D(6, 5, activation="relu", name="conv1"),
        layers.MaxPooling2D(2, name="pool1"),
        layers.Conv2D(16, 5, activation="relu", name="conv2"),
        layers.AveragePooling2D(2, name="pool2"),
        layers.Flatten(name="flatten"),
        layers.Dense(32, activation="relu", name="fc1"),
        layers.Dropout(0.0, name="no_dropout"),
        layers.Dense(classes, name="fc2"),
    ], name="keras_sequential")


def with_softmax_inside() -> keras.Model:
    """A softmax before the classifier: the spec leaves out only a final one."""
    images = keras.Input((32, 32, 3))
    x = layers.GlobalAveragePooling2D()(layers.Conv2D(4, 3, name="conv")(images))
    x = layers.Dense(8, activation="softmax", name="probs")(x)
    return keras.Model(images, layers.Dense(10, name="fc")(x))


def with_cropping() -> keras.Model:
    """Cropping2D: no spec layer kind crops."""
    images = keras.Input((32, 32, 3))
    x = layers.Cropping2D(1, name="crop")(layers.Conv2D(4, 3, name="conv")(images))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(images, layers.Dense(10, name="fc")(x))
