"""The built-in networks, each declared once from the spec's layer kinds
(compare.experiment.specs) and built by both frameworks: the seed's LeNet, the DAWNBench
ResNet-9, and the CIFAR-10 ResNet-18, VGG-11 and MobileNetV2 as the widely used
pytorch-cifar repository defines them (parameter for parameter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compare.experiment import specs
from compare.experiment.specs import (
    AvgPool,
    BatchNorm,
    Conv,
    Dense,
    Flatten,
    GlobalMaxPool,
    Layer,
    MaxPool,
    ModelSpec,
    ReLU,
    Residual,
    Scale,
)


def lenet(num_classes: int = 10) -> ModelSpec:
    """The seed's Net (PyTorch CIFAR-10 tutorial): 62,006 parameters."""
    return ModelSpec("lenet", (3, 32, 32), num_classes, (
        Conv("conv1", 3, 6, 5),
        ReLU("relu1"),
        MaxPool("pool1"),
        Conv("conv2", 6, 16, 5),
        ReLU("relu2"),
        MaxPool("pool2"),
        Flatten("flatten"),
        Dense("fc1", 16 * 5 * 5, 120),
        ReLU("relu3"),
        Dense("fc2", 120, 84),
        ReLU("relu4"),
        Dense("fc3", 84, num_classes),
    ))


def _conv_bn(name: str, cin: int, cout: int, stride: int = 1, bias: bool = False,
             relu: bool = True) -> tuple[Layer, ...]:
    """A 3x3 convolution (padding 1), BatchNorm and, unless `relu` is off, ReLU."""
    return (Conv(f"{name}_conv", cin, cout, 3, padding=1, bias=bias, stride=stride),
            BatchNorm(f"{name}_bn", cout), *([ReLU(f"{name}_relu")] if relu else []))


def resnet9(num_classes: int = 10) -> ModelSpec:
    """The DAWNBench CIFAR-10 ResNet (Page, 2018): 6,573,120 trainable parameters."""
    return ModelSpec("resnet9", (3, 32, 32), num_classes, (
        *_conv_bn("prep", 3, 64),
        *_conv_bn("layer1", 64, 128),
        MaxPool("layer1_pool"),
        Residual("layer1_res",
                 _conv_bn("layer1_res1", 128, 128) + _conv_bn("layer1_res2", 128, 128)),
        *_conv_bn("layer2", 128, 256),
        MaxPool("layer2_pool"),
        *_conv_bn("layer3", 256, 512),
        MaxPool("layer3_pool"),
        Residual("layer3_res",
                 _conv_bn("layer3_res1", 512, 512) + _conv_bn("layer3_res2", 512, 512)),
        GlobalMaxPool("pool"),
        Flatten("flatten"),
        Dense("fc", 512, num_classes, bias=False),
        Scale("scale", 0.125),
    ))


def _projection(name: str, cin: int, cout: int, stride: int) -> tuple[Layer, ...]:
    """A shortcut that changes the shape: 1x1 convolution (no bias) and BatchNorm."""
    return (Conv(f"{name}_conv", cin, cout, 1, bias=False, stride=stride),
            BatchNorm(f"{name}_bn", cout))


def _basic_block(name: str, cin: int, cout: int, stride: int) -> tuple[Layer, ...]:
    """ResNet's BasicBlock: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), the shortcut a
    projection where the stride or the channels change."""
    shortcut = (_projection(f"{name}_shortcut", cin, cout, stride)
                if stride != 1 or cin != cout else ())
    return (Residual(name, _conv_bn(f"{name}_1", cin, cout, stride)
                     + _conv_bn(f"{name}_2", cout, cout, relu=False), shortcut),
            ReLU(f"{name}_relu"))


def resnet18(num_classes: int = 10) -> ModelSpec:
    """ResNet-18 for CIFAR-10 (pytorch-cifar): a 3x3 stem without max pooling, BasicBlocks
    64-128-256-512 (two each, the first of a stage strided), 4x4 average pooling:
    11,173,962 parameters."""
    layers: list[Layer] = [*_conv_bn("stem", 3, 64)]
    cin = 64
    for stage, (cout, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), 1):
        for block in range(2):
            layers += _basic_block(f"layer{stage}_{block}", cin, cout, stride if block == 0
                                   else 1)
            cin = cout
    return ModelSpec("resnet18", (3, 32, 32), num_classes, (
        *layers, AvgPool("pool", 4), Flatten("flatten"), Dense("fc", 512, num_classes)))


def vgg11(num_classes: int = 10) -> ModelSpec:
    """VGG-11 for CIFAR-10 (pytorch-cifar): 3x3 convolutions (with bias) each followed by
    BatchNorm and ReLU, 2x2 max pooling, a 512 -> classes classifier: 9,231,114 parameters."""
    layers: list[Layer] = []
    cin, conv = 3, 0
    plan: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
    for width in plan:
        if not isinstance(width, int):  # "M": a max pool
            layers.append(MaxPool(f"pool{len([x for x in layers if type(x) is MaxPool]) + 1}"))
            continue
        conv += 1
        layers += _conv_bn(f"conv{conv}", cin, width, bias=True)
        cin = width
    return ModelSpec("vgg11", (3, 32, 32), num_classes, (
        *layers, Flatten("flatten"), Dense("fc", 512, num_classes)))


# MobileNetV2's stages for CIFAR-10 (pytorch-cifar): (expansion, channels, blocks, stride of
# the first block); the second stage's stride is 1 where ImageNet's is 2, for 32x32 images.
MOBILENETV2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _inverted_residual(name: str, cin: int, cout: int, expansion: int,
                       stride: int) -> tuple[Layer, ...]:
    """MobileNetV2's block: 1x1 expansion, depthwise 3x3 (strided), 1x1 linear bottleneck
    (no ReLU after it); added to the input (through a 1x1 projection where the channels
    change) when the stride is 1."""
    wide = expansion * cin
    branch = (Conv(f"{name}_expand", cin, wide, 1, bias=False),
              BatchNorm(f"{name}_expand_bn", wide), ReLU(f"{name}_expand_relu"),
              Conv(f"{name}_depthwise", wide, wide, 3, padding=1, bias=False, stride=stride,
                   groups=wide),
              BatchNorm(f"{name}_depthwise_bn", wide), ReLU(f"{name}_depthwise_relu"),
              Conv(f"{name}_project", wide, cout, 1, bias=False),
              BatchNorm(f"{name}_project_bn", cout))
    if stride != 1:
        return branch
    shortcut = _projection(f"{name}_shortcut", cin, cout, 1) if cin != cout else ()
    return (Residual(name, branch, shortcut),)


def mobilenetv2(num_classes: int = 10) -> ModelSpec:
    """MobileNetV2 for CIFAR-10 (pytorch-cifar): a 3x3 stem, 17 inverted residual blocks with
    depthwise convolutions and linear bottlenecks, a 1x1 convolution to 1280 channels, 4x4
    average pooling: 2,296,922 parameters."""
    layers: list[Layer] = [Conv("stem_conv", 3, 32, 3, padding=1, bias=False),
                           BatchNorm("stem_bn", 32), ReLU("stem_relu")]
    cin = 32
    for stage, (expansion, cout, blocks, stride) in enumerate(MOBILENETV2_STAGES, 1):
        for block in range(blocks):
            layers += _inverted_residual(f"block{stage}_{block}", cin, cout, expansion,
                                         stride if block == 0 else 1)
            cin = cout
    return ModelSpec("mobilenetv2", (3, 32, 32), num_classes, (
        *layers, Conv("head_conv", 320, 1280, 1, bias=False), BatchNorm("head_bn", 1280),
        ReLU("head_relu"), AvgPool("pool", 4), Flatten("flatten"),
        Dense("fc", 1280, num_classes)))


@dataclass(frozen=True)
class Network:
    """A built-in network: its spec, its recipe and where both come from."""

    build: Callable[[int], ModelSpec]  # classes -> spec
    recipe: dict[str, Any]  # the RunConfig fields its recipe sets apart from the defaults
    published: str  # the accuracy its --target-accuracy comes from, and on what schedule
    source: str  # where the architecture (and the recipe) is defined
    # trainable parameters of the source's own model, as it counts them: the spec must match
    parameters: int


# pytorch-cifar (github.com/kuangliu/pytorch-cifar) trains every network with SGD lr 0.1,
# momentum 0.9, weight decay 5e-4, batch 128, crop + flip, cosine over 200 epochs. Its
# recipe here is a short one-cycle schedule at the same peak; the target is its published
# accuracy, which the short schedule may not reach: the report says when it does.
_PYTORCH_CIFAR_RECIPE = {"batch_size": 128, "lr": 0.1, "schedule": "onecycle",
                         "weight_decay": 5e-4, "epochs": 30}
PYTORCH_CIFAR = "pytorch-cifar, models/{} (github.com/kuangliu/pytorch-cifar)"

MODELS: dict[str, Network] = {
    "lenet": Network(lenet, {"augment": False},
                     "about 54% after 2 epochs at batch 4, lr 0.001",
                     "the PyTorch CIFAR-10 tutorial's Net (pytorch.org/tutorials, "
                     "beginner/blitz/cifar10_tutorial)", 62_006),
    # Page's 24-epoch recipe: lr 0.4 at its peak (a summed loss at lr 0.4 / 512 there),
    # weight decay 5e-4, 8x8 cutout; label smoothing from his later posts
    "resnet9": Network(resnet9, {"batch_size": 512, "lr": 0.4, "schedule": "onecycle",
                                 "weight_decay": 5e-4, "nesterov": True,
                                 "label_smoothing": 0.2, "cutout": 8, "epochs": 10},
                       "94% in 24 epochs", "DAWNBench ResNet-9 (Page, 'How to train your "
                       "ResNet', myrtle.ai, 2018)", 6_573_120),
    "resnet18": Network(resnet18, {**_PYTORCH_CIFAR_RECIPE, "target_accuracy": 0.93},
                        "93.02% after 200 epochs", PYTORCH_CIFAR.format("resnet.py"),
                        11_173_962),
    "vgg11": Network(vgg11, {**_PYTORCH_CIFAR_RECIPE, "target_accuracy": 0.92},
                     "none for VGG-11; the target is its VGG-16's 92.64% after 200 epochs",
                     PYTORCH_CIFAR.format("vgg.py"), 9_231_114),
    "mobilenetv2": Network(mobilenetv2, {**_PYTORCH_CIFAR_RECIPE, "target_accuracy": 0.94},
                           "94.43% after 200 epochs", PYTORCH_CIFAR.format("mobilenetv2.py"),
                           2_296_922),
}


def is_reference(text: object) -> bool:
    """A built-in name, FILE.py[:NAME] or package.module:NAME (whether it loads is
    load_reference's to say)."""
    if not isinstance(text, str) or not text:
        return False
    where, name = _split(text)
    return text in MODELS or where.endswith(".py") or (
        bool(name) and all(part.isidentifier() for part in where.split(".")))


def _split(reference: str) -> tuple[str, str]:
    """(file or module, attribute): the attribute after the last ':' (default `spec`)."""
    where, colon, name = reference.rpartition(":")
    return (where, name) if colon and name.isidentifier() else (reference, "")


def load_reference(reference: str, num_classes: int = 10) -> ModelSpec:
    """The user's spec that `reference` names: in FILE.py or package.module, the attribute
    NAME (default `spec`), a ModelSpec or a function of the class count returning one;
    checked whole (specs.check). ValueError in one line naming what is wrong."""
    import inspect

    from compare.experiment.user_code import load_module
    where, name = _split(reference)
    name = name or "spec"
    module = load_module(where, "cnncompare_model")
    if not hasattr(module, name):
        raise ValueError(f"{where} has no `{name}`: define {name}(num_classes) returning a "
                         f"ModelSpec, or name yours with {where}:NAME")
    found = getattr(module, name)
    if callable(found) and not isinstance(found, ModelSpec):
        try:
            takes = len(inspect.signature(found).parameters) > 0
            found = found(num_classes) if takes else found()
        except Exception as exc:  # noqa: BLE001 - the user's code
            raise ValueError(f"{where}:{name} did not build: {exc.__class__.__name__}: "
                             f"{exc}") from None
    if not isinstance(found, ModelSpec):
        raise ValueError(f"{where}:{name} is a {type(found).__name__}, not a ModelSpec "
                         f"(compare.experiment.specs)")
    specs.check(found, num_classes)
    return found


def get_spec(name: str, num_classes: int = 10) -> ModelSpec:
    """The built-in network `name`, or the user's spec it refers to (load_reference)."""
    if name in MODELS:
        return MODELS[name].build(num_classes)
    if is_reference(name):
        return load_reference(name, num_classes)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}, or "
                     f"FILE.py[:NAME] or package.module:NAME")


def run_spec(config: Any, num_classes: int = 10) -> ModelSpec:
    """The network a run trains (RunConfig `config`): its --model, with every dropout rate 0
    under --no-dropout (the parity check's probes)."""
    spec = get_spec(config.model, num_classes)
    return spec if config.dropout else specs.without_dropout(spec)


def batchnorm_settings(spec: specs.ModelSpec, momentum: float, epsilon: float) -> dict:
    """What the network's BatchNorm layers use, given the run's `momentum` (PyTorch's
    convention) and `epsilon`: {"momentum", "epsilon", "set_by"}, where set_by says whether
    the run's settings hold or the layers fix their own (a ported network's)."""
    norm = {"momentum": momentum, "epsilon": epsilon}
    used = {layer.settings(norm) for layer in specs.walk(spec.layers)
            if isinstance(layer, specs.BatchNorm)}
    if not used or used == {(momentum, epsilon)}:
        return {**norm, "set_by": "the run"}
    if len(used) == 1:
        (own_momentum, own_epsilon), = used
        return {"momentum": own_momentum, "epsilon": own_epsilon,
                "set_by": "the network's BatchNorm layers"}
    return {"momentum": sorted({m for m, _ in used}), "epsilon": sorted({e for _, e in used}),
            "set_by": "the network's BatchNorm layers, not all alike"}
