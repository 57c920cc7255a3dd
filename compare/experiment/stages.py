"""Model parallelism (`--parallel model`): the spec's top-level layers cut into consecutive
stages balanced by forward FLOPs, stage i on device i; both frameworks cut where this says.

A stage boundary falls between top-level layers (a residual block stays whole). The cut
minimises the largest stage's share of the forward multiply-adds, so no device waits on a
much heavier neighbour more than the layers' sizes force.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compare.experiment import specs
from compare.experiment.config import RunConfig, stage_count


@dataclass(frozen=True)
class Stage:
    index: int
    start: int  # the first top-level layer, an index into spec.layers
    end: int  # one past the last
    first: str  # the names of its first and last layers
    last: str
    macs: int  # forward multiply-adds per image

    def describe(self, total: int) -> dict:
        return {"stage": self.index, "layers": f"{self.first} .. {self.last}",
                "flops_share": round(self.macs / total, 4) if total else None}


def layer_macs(spec: specs.ModelSpec) -> list[int]:
    """Forward multiply-adds per image of each top-level layer (a block's are its layers')."""
    shapes = specs.output_shapes(spec)
    return [sum(leaf.macs(shapes[leaf.name]) for leaf in specs.walk((layer,)))
            for layer in spec.layers]


def cut(spec: specs.ModelSpec, stages: int) -> list[Stage]:
    """`stages` consecutive, non-empty stages of spec.layers whose heaviest has the fewest
    multiply-adds (exact, by dynamic programming over the cut points); ValueError when the
    spec has fewer top-level layers than stages."""
    costs = layer_macs(spec)
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"{spec.name} has {n} top-level layers: it cannot be cut into "
                         f"{stages} stages")
    prefix = [0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    # best[k][j]: the least possible heaviest stage when the first j layers form k stages
    best = [[math.inf] * (n + 1) for _ in range(stages + 1)]
    choice = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):  # the last stage holds layers i .. j - 1
                heaviest = max(best[k - 1][i], prefix[j] - prefix[i])
                # a tie goes to the latest cut: a layer without FLOPs (activation, pooling)
                # stays with the layer before it, so activations cross at their smallest
                if heaviest <= best[k][j]:
                    best[k][j], choice[k][j] = heaviest, i
    bounds, j = [], n
    for k in range(stages, 0, -1):
        bounds.append((choice[k][j], j))
        j = choice[k][j]
    return [Stage(index, start, end, spec.layers[start].name, spec.layers[end - 1].name,
                  prefix[end] - prefix[start])
            for index, (start, end) in enumerate(reversed(bounds))]


def describe(spec: specs.ModelSpec, stages: list[Stage]) -> list[dict]:
    """The cut as the manifest records it: each stage's layers and share of the FLOPs."""
    total = sum(stage.macs for stage in stages)
    return [stage.describe(total) for stage in stages]


def placement(config: RunConfig, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """Each stage's device under --parallel model: stage i on the i-th of `names` (round
    robin past the last); None for one stage (the model is not split)."""
    count = stage_count(config)
    if count == 1:
        return None
    return tuple(names[i % len(names)] for i in range(count))
