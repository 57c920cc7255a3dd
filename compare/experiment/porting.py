"""`cnncompare port`, its framework-neutral half: a network read from either framework as a
graph of spec layers (each framework's reader: tf_impl/port.py, torch_impl/port.py) becomes a
spec, is written as a Python file that --model loads, and the source's and the twin's outputs
on one batch are compared with the parity check's float64 yardsticks.

A graph is a list of `Node`s in an order where every node comes after its inputs. The spec
expresses a chain of layers and residual adds of two paths that part from one tensor; a graph
whose paths meet otherwise is refused, naming the node.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterator, Sequence, TypedDict

import numpy as np

from compare.errors import UserError
from compare.experiment import parity, specs

# Source frameworks `cnncompare port` reads, each with the framework that runs its reader
# and the one that builds its twin.
SOURCES = {"torch": ("torch", "tf"), "keras": ("tf", "torch")}
PROOF_BATCH = 8  # images in the proof batch: BatchNorm's batch statistics need a few
PROOF_SEED = 0x9097  # of the proof batch's images (standard normal) and labels


class Refused(UserError):
    """What the spec cannot express, in one line naming the layer and where it sits (exit 2)."""


@dataclass(frozen=True)
class Reading:
    """A source network read by its framework: the spec, its weights in the canonical layout
    (compare.experiment.weights), and what the source framework counts of it."""

    spec: specs.ModelSpec
    weights: dict[str, np.ndarray]
    source_parameters: int  # trainable, as the source framework counts them
    sources: dict[str, str]  # each weighted spec layer -> the source's name for it
    changes: tuple[str, ...] = ()  # what the twin leaves out of the source (a final softmax)


@dataclass(frozen=True)
class Node:
    """One tensor of the source's graph. `op`: "input" (the images), "layer" (`layer` of its
    one input), "same" (its input unchanged: an identity, a dropout of rate 0), one of the
    merges (specs.MERGES: "add", "concat" along the channels in input order, "multiply")
    of its inputs, or "output" (the logits: its one input)."""

    name: str
    op: str
    inputs: tuple[str, ...] = ()
    layer: specs.LayerSpec | None = None
    where: str = ""  # the source's words for it, for refusals ("layer1.0.conv1 (Conv2d)")


Chain = tuple[specs.LayerSpec, ...]


def assemble(nodes: list[Node]) -> Chain:
    """The spec's layers computing the graph's output: each tensor as the chain of layers
    from the input to it. A merge of chains becomes a block of their parts after the longest
    prefix they all share: an add of two a Residual (the longer part the branch, the other
    the shortcut), any other a Merge with its paths in input order. A concatenation that
    extends an earlier one (DenseNet's: cat(x, a, b) after cat(x, a)) is read as that one
    concatenated with the rest. Refused where paths meet otherwise, a layer does not reach
    the output, or a merge has nothing to merge."""
    chains: dict[str, Chain] = {}
    concatenations: dict[tuple[str, ...], str] = {}  # inputs -> the concat node of them
    output: Chain | None = None
    made: list[tuple[specs.LayerSpec, Node]] = []
    for node in nodes:
        if node.op == "input":
            chains[node.name] = ()
        elif node.op == "same":
            chains[node.name] = chains[node.inputs[0]]
        elif node.op == "layer":
            assert node.layer is not None  # a "layer" node carries its layer
            chains[node.name] = chains[node.inputs[0]] + (node.layer,)
            made.append((node.layer, node))
        elif node.op in specs.MERGES:
            inputs = node.inputs
            if node.op == "concat":
                concatenations[inputs] = node.name
                earlier = next((inputs[:n] for n in range(len(inputs) - 1, 1, -1)
                                if inputs[:n] in concatenations), None)
                if earlier:
                    inputs = (concatenations[earlier], *inputs[len(earlier):])
            block = _merge(node, [chains[name] for name in inputs])
            chains[node.name] = block[0] + (block[1],)
            made.append((block[1], node))
        elif node.op == "output":
            output = chains[node.inputs[0]]
        else:
            raise ValueError(f"{node.name}: unknown op {node.op!r}")
    if output is None:
        raise Refused("the network has no output")
    used = {id(layer) for layer in _blocks_and_layers(output)}
    for layer, node in made:
        if id(layer) not in used:
            raise Refused(f"{node.where or node.name}: its output does not reach the logits "
                          f"(the spec computes one chain of layers and merges of paths "
                          f"from one tensor)")
    return output


def _merge(node: Node, found: list[Chain]) -> tuple[Chain, specs.LayerSpec]:
    """(the prefix every chain shares, the block of their parts after it)."""
    where = node.where or node.name
    if len(found) < 2:
        raise Refused(f"{where}: merges {len(found)} tensor; a merge takes two or more")
    shared = 0
    while (shared < min(map(len, found))
           and all(chain[shared] is found[0][shared] for chain in found)):
        shared += 1
    parts = [chain[shared:] for chain in found]
    seen: set[int] = set()
    for part in parts:
        ids = {id(layer) for layer in _blocks_and_layers(part)}
        if ids & seen:
            raise Refused(f"{where}: its inputs share a layer after they part; the spec's "
                          f"paths leave one tensor and meet once")
        seen |= ids
    if not any(parts):
        raise Refused(f"{where}: merges a tensor with itself")
    if node.op == "add" and len(parts) == 2:
        branch, shortcut = sorted(parts, key=len, reverse=True)
        return found[0][:shared], specs.Residual(node.name, branch, shortcut)
    return found[0][:shared], specs.Merge(node.name, node.op, tuple(parts))


def _blocks_and_layers(layers: tuple[specs.LayerSpec, ...]) -> Iterator[specs.LayerSpec]:
    for layer in layers:
        yield layer
        yield from _blocks_and_layers(layer.sublayers)


def square(value: int | Sequence[int], what: str, where: str) -> int:
    """A size given as n or (n, n) as n; Refused where the two differ (the spec's kernels,
    strides, windows and paddings are square)."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(set(pair)) != 1:
        raise Refused(f"{where}: {what} {pair} is not square; the spec's are")
    return int(pair[0])


def spec_of(name: str, input_shape: tuple[int, ...], layers: tuple[specs.LayerSpec, ...],
            source: str) -> specs.ModelSpec:
    """The spec of assembled `layers` on `input_shape` images, its classes the last layer's
    outputs; Refused, naming `source` and the layer, where the layers do not fit."""
    try:
        c, h, w = input_shape  # (channels, height, width); a ValueError otherwise
        out = specs.output_shapes(specs.ModelSpec(name, (c, h, w), 0, layers))[layers[-1].name]
        spec = specs.ModelSpec(name, (c, h, w), out[0] if len(out) == 1 else 0, layers)
        specs.check(spec)
    except (ValueError, IndexError) as exc:
        raise Refused(f"{source} on {tuple(input_shape)} images: {exc}") from None
    return spec


def unique_name(wanted: str, taken: set[str]) -> str:
    """`wanted`, or `wanted_2`, `wanted_3`... where it is taken; recorded as taken."""
    name, n = wanted, 1
    while name in taken:
        n += 1
        name = f"{wanted}_{n}"
    taken.add(name)
    return name


def spec_source(spec: specs.ModelSpec, heading: str) -> str:
    """`spec` as a Python file that --model FILE.py loads: a docstring (`heading`), the
    imports of its layer kinds and `spec()` returning it, one layer per line."""
    kinds = sorted({type(layer).__name__ for layer in _blocks_and_layers(spec.layers)}
                   | {"ModelSpec"})
    lines = ['"""' + heading.strip() + '\n"""', "", "from compare.experiment.specs import (",
             *(f"    {kind}," for kind in kinds), ")", "", "",
             "def spec():",
             f'    """{spec.name}: {specs.parameter_count(spec):,} trainable parameters, '
             f'{spec.num_classes} classes."""',
             f"    return ModelSpec({spec.name!r}, {tuple(spec.input_shape)!r}, "
             f"{spec.num_classes}, ("]
    lines += _layer_lines(spec.layers, 8)
    lines.append("    ))")
    return "\n".join(lines) + "\n"


def _layer_lines(layers: tuple[specs.LayerSpec, ...], indent: int) -> list[str]:
    pad, lines = " " * indent, []
    for layer in layers:
        if isinstance(layer, specs.Residual):
            lines.append(f"{pad}Residual({layer.name!r}, (")
            lines += _layer_lines(layer.layers, indent + 4)
            if layer.shortcut:
                lines.append(f"{pad}), shortcut=(")
                lines += _layer_lines(layer.shortcut, indent + 4)
            lines.append(f"{pad})),")
            continue
        if isinstance(layer, specs.Merge):
            lines.append(f"{pad}Merge({layer.name!r}, {layer.op!r}, (")
            for path in layer.branches:
                lines.append(f"{pad}    (")
                lines += _layer_lines(path, indent + 8)
                lines.append(f"{pad}    ),")
            lines.append(f"{pad})),")
            continue
        args: list[str] = []
        assert dataclasses.is_dataclass(layer)  # every layer kind is a frozen dataclass
        for field in dataclasses.fields(layer):
            value = getattr(layer, field.name)
            if field.default is dataclasses.MISSING:
                args.append(repr(value))
            elif value != field.default:
                args.append(f"{field.name}={value!r}")
        lines.append(f"{pad}{type(layer).__name__}({', '.join(args)}),")
    return lines


def dropout_rates(spec: specs.ModelSpec) -> dict[str, float]:
    """Each Dropout layer's rate by name (per-sample ones are stochastic depth)."""
    return {layer.name: layer.rate for layer in specs.walk(spec.layers)
            if isinstance(layer, specs.Dropout)}


def proof_batch(input_shape: tuple[int, ...], classes: int,
                size: int = PROOF_BATCH) -> tuple[np.ndarray, np.ndarray]:
    """The batch both sides of the proof get: images (N, C, H, W) float32 standard normal,
    labels cycling through the classes (int64)."""
    rng = np.random.default_rng(PROOF_SEED)
    images = rng.standard_normal((size, *input_shape)).astype(np.float32)
    return images, (np.arange(size) % classes).astype(np.int64)


class PortProof(TypedDict):
    """The proof that a port's twin computes what its source does (compare_outputs): each
    figure against its limit. port.json's `proof`."""

    passed: bool
    logits_max_abs_diff: float  # absolute
    loss_abs_diff: float  # absolute
    grad_max_rel_diff: float  # the largest over the layers, relative L2
    tolerances: dict[str, float]  # the limit of each figure above
    failed: list[str]  # the figures over their limits
    logits_max_abs: float  # the source's largest logit, the scale of the first figure
    loss: dict[str, float]  # source, twin
    grad_rel_diff_per_layer: dict[str, float]
    method: str


def compare_outputs(source: dict[str, np.ndarray], twin: dict[str, np.ndarray]) -> PortProof:
    """The proof: the source's and the twin's logits (eval mode), loss and gradients (one
    training step, train mode) on the proof batch, each as `outputs` writes them, judged by
    the parity check's limits: float64's (parity.FLOAT64), float32's where either side
    computed in float32."""
    wide = source["logits"].dtype == twin["logits"].dtype == np.float64
    limits = parity.FLOAT64 if wide else parity.Tolerances()
    gradients = {name[len("grad/"):]: value for name, value in source.items()
                 if name.startswith("grad/")}
    per_layer = parity.gradient_differences(
        {name: twin[f"grad/{name}"] for name in gradients}, gradients)
    figures = {
        "logits_max_abs_diff": float(np.abs(source["logits"] - twin["logits"]).max()),
        "loss_abs_diff": float(abs(float(source["loss"]) - float(twin["loss"]))),
        "grad_max_rel_diff": max(per_layer.values()) if per_layer else 0.0,
    }
    tolerances = {key: getattr(limits, key) for key in figures}
    failed = [key for key, value in figures.items() if not value <= tolerances[key]]
    return {"passed": not failed, "logits_max_abs_diff": figures["logits_max_abs_diff"],
            "loss_abs_diff": figures["loss_abs_diff"],
            "grad_max_rel_diff": figures["grad_max_rel_diff"],
            "tolerances": tolerances, "failed": failed,
            "logits_max_abs": float(np.abs(source["logits"]).max()),
            "loss": {"source": float(source["loss"]), "twin": float(twin["loss"])},
            "grad_rel_diff_per_layer": per_layer,
            "method": f"{'float64' if wide else 'float32'} on the CPU, one batch of "
                      f"{len(source['logits'])} standard "
                      f"normal images: logits in eval mode; the cross-entropy loss and its "
                      f"gradients in train mode (BatchNorm on the batch's statistics)"}


def describe(record: PortProof) -> str:
    """One line: the verdict and each figure against its limit."""
    verdict = "equal" if record["passed"] else "NOT equal"
    limits = record["tolerances"]
    return (f"source and twin {verdict}: logits {record['logits_max_abs_diff']:.2e} "
            f"(limit {limits['logits_max_abs_diff']:g}), loss {record['loss_abs_diff']:.2e} "
            f"(limit {limits['loss_abs_diff']:g}), gradients {record['grad_max_rel_diff']:.2e} "
            f"relative (limit {limits['grad_max_rel_diff']:g})")


def parameter_count(weights: dict[str, np.ndarray]) -> int:
    """Trainable parameters among canonical-layout `weights`."""
    return sum(math.prod(value.shape) for name, value in weights.items()
               if specs.trainable(name))
