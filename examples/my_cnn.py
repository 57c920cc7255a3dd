"""A CNN of one's own for `cnncompare --model examples/my_cnn.py`: built from the spec's layer
kinds, so that TensorFlow/Keras and PyTorch build the same network with the same weights.

    cnncompare compare --model examples/my_cnn.py --dataset synthetic --epochs 1 --seeds 2

A 3x3 stem, two stages of depthwise-separable residual blocks (the second entered through a
strided convolution), global average pooling and a classifier: 32,874 parameters.
"""

from compare.experiment.specs import (
    BatchNorm,
    Conv,
    Dense,
    Flatten,
    GlobalAvgPool,
    ModelSpec,
    ReLU,
    Residual,
)


def conv_bn_relu(name, cin, cout, kernel=3, stride=1):
    """A convolution padded to keep the size (at stride 1), BatchNorm and ReLU."""
    return (Conv(f"{name}_conv", cin, cout, kernel, padding=kernel // 2, bias=False,
                 stride=stride),
            BatchNorm(f"{name}_bn", cout), ReLU(f"{name}_relu"))


def separable_block(name, channels):
    """x + pointwise(depthwise(x)): a depthwise 3x3 and a 1x1 convolution, each with
    BatchNorm, added to the block's input."""
    return (Residual(name, (
        Conv(f"{name}_dw", channels, channels, 3, padding=1, bias=False, groups=channels),
        BatchNorm(f"{name}_dw_bn", channels), ReLU(f"{name}_dw_relu"),
        Conv(f"{name}_pw", channels, channels, 1, bias=False),
        BatchNorm(f"{name}_pw_bn", channels))), ReLU(f"{name}_relu"))


def spec(num_classes=10):
    """The network for `num_classes` classes (cnncompare passes the dataset's count)."""
    return ModelSpec("my_cnn", (3, 32, 32), num_classes, (
        *conv_bn_relu("stem", 3, 32),
        *separable_block("stage1_a", 32),
        *separable_block("stage1_b", 32),
        *conv_bn_relu("down", 32, 64, stride=2),
        *separable_block("stage2_a", 64),
        *separable_block("stage2_b", 64),
        GlobalAvgPool("pool"), Flatten("flatten"), Dense("fc", 64, num_classes)))
