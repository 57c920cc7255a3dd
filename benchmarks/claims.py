"""The claims tables, generated from the shipped result files so that no quoted figure drifts
from its file: the README's table of GPU comparisons and the claims table that heads
docs/benchmarks.md (claim, figure, machine, script, result file).

    python -m benchmarks.claims           # rewrite both tables in place
    python -m benchmarks.claims --check   # exit 1, naming each table that differs from its files

Each generated block (the two tables, and the README's sentence on how long its first command
takes) sits between two HTML comments in its page (MARKERS); the text around it is the page's
own. tests/test_claims_tables.py regenerates both and fails on any difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run by path (python benchmarks/claims.py): the checkout on sys.path
    sys.path.insert(0, str(REPO))

from benchmarks.port_coverage import round_trip  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
BATTERY = "benchmarks/gpu_battery.py"  # every GPU comparison ran in the GPU battery


@dataclass(frozen=True)
class Comparison:
    """A GPU comparison shipped under benchmarks/results: its folder (summary.json inside) and
    what the figures alone do not say: the network's recipe and how to read the row."""
    folder: str
    recipe: str
    read_with: str


GPU_COMPARISONS = (
    Comparison("gpu-h200-resnet9-verdict", "ResNet-9, DAWNBench's recipe",
               "PyTorch's compile cache warm, XLA's cold"),
    Comparison("gpu-h100-resnet9-verdict", "ResNet-9, DAWNBench's recipe",
               "TensorFlow's optimizer update outside XLA"),
    Comparison("gpu-h100-resnet9-own", "ResNet-9, DAWNBench's recipe, own loops beside",
               "seeds not alternated; host busy in one seed"),
    Comparison("gpu-h100-resnet9-own-best/best", "ResNet-9, each framework at its best",
               "PyTorch compiled cold; no CUDA graphs; update outside XLA"),
    Comparison("gpu-h200-resnet9-cutout", "ResNet-9, DAWNBench's recipe",
               "TensorFlow below its default (XLA off)"),
    Comparison("gpu-h100-resnet18-mixed", "ResNet-18, pytorch-cifar's recipe",
               "TensorFlow below its default; host busy"),
    Comparison("gpu-h200-lenet-mixed", "LeNet, the PyTorch tutorial's recipe",
               "TensorFlow below its default; host-bound"),
)


def load(path: str) -> Any:
    """A result file under benchmarks/results, parsed."""
    return json.loads((RESULTS / path).read_text())


def times(value: float, digits: int = 2) -> str:
    """A ratio as the tables write it: the README's to 2 decimals, the claims' to 3."""
    return f"{value:.{digits}f}x"


def ratio_cell(ratio: dict[str, Any] | None, digits: int = 2) -> str:
    """A TF / PyTorch ratio with its 95% interval (3 seeds or more), its range (2) or alone."""
    if not ratio or ratio.get("ratio") is None:
        return "n/a"
    if ratio.get("n", 1) < 2 or ratio.get("low") is None:
        return times(ratio["ratio"], digits)
    spread = "" if ratio.get("interval") == "ci95" else "range "
    return (f"{times(ratio['ratio'], digits)} "
            f"({spread}{ratio['low']:.{digits}f}-{ratio['high']:.{digits}f})")


def centre(summary: dict[str, Any], framework: str, key: str) -> float | None:
    """A framework's centre of one figure over its seeds (None where no seed gave it)."""
    figure = summary["frameworks"][framework].get(key) or {}
    value = figure.get("centre")
    return None if value is None else float(value)


def gpu_name(summary: dict[str, Any]) -> str:
    """The GPU's model as the tables write it ("H200", "H100" for "NVIDIA H100 80GB HBM3")."""
    named = str(summary["machine"]["device"]).removeprefix("GPU: ").removeprefix("NVIDIA ")
    return named.split()[0]


def precision(summary: dict[str, Any]) -> str:
    """The compute type both frameworks trained in."""
    resolved = summary["config"].get("precision_resolved") or {}
    return str(resolved.get("gpu", {}).get("compute_type") or summary["config"]["precision"])


def at_defaults(summary: dict[str, Any]) -> str:
    """Each framework at its own default: the comparison's own ratio where it ran both at
    theirs, else the defaults run beside it, else why there is none."""
    states = summary.get("compile_states") or {}
    if states and all(state["is_default"] for state in states.values()):
        return ratio_cell(summary["ratios"].get("train_time_s"))
    if summary.get("defaults"):
        return ratio_cell(summary["defaults"]["time_ratio"])
    return "not run"


def matched(summary: dict[str, Any]) -> str:
    """The matched ratio and what both frameworks ran as."""
    state = "compiled" if summary["config"].get("compile") else "eager"
    return f"{ratio_cell(summary['ratios'].get('train_time_s'))}, {state}"


def accuracy(summary: dict[str, Any]) -> str:
    """Final test accuracy, TF / PyTorch, the centres over seeds."""
    shown = [centre(summary, fw, "final_test_accuracy") for fw in ("tf", "torch")]
    return " / ".join("n/a" if v is None else f"{100 * v:.2f}%" for v in shown)


def to_target(summary: dict[str, Any]) -> str:
    """Time to the target accuracy, TF / PyTorch; 'not reached' where no seed reached it."""
    target = summary["config"].get("target_accuracy")
    if target is None:
        return "no target"
    shown = [centre(summary, fw, "time_to_target_s") for fw in ("tf", "torch")]
    cells = " / ".join("not reached" if v is None else f"{v:.1f} s" for v in shown)
    return f"{cells} (to {100 * target:.1f}%)"


def seeds(summary: dict[str, Any]) -> int:
    """How many seeds the matched ratio pairs."""
    return int(summary["ratios"]["train_time_s"]["n"])


def gpu_table() -> str:
    """The README's table: one row per GPU comparison shipped."""
    lines = ["| GPU | network, recipe | precision | seeds | TF / PyTorch at defaults "
             "| matched | steady, matched | test accuracy TF / PyTorch | time to target "
             "TF / PyTorch | read with |", "|" + "---|" * 10]
    for comparison in GPU_COMPARISONS:
        summary = load(f"{comparison.folder}/summary.json")
        cells = [gpu_name(summary), f"{comparison.recipe}, {summary['config']['epochs']} "
                 f"epochs, batch {summary['config']['batch_size']}", precision(summary),
                 str(seeds(summary)), at_defaults(summary), matched(summary),
                 ratio_cell(summary["ratios"].get("steady_train_time_s")), accuracy(summary),
                 to_target(summary), f"{comparison.read_with} "
                 f"([summary](benchmarks/results/{comparison.folder}/summary.json))"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Claim:
    """One performance claim: what it says, the file that holds it, how its figure is read
    there, and the script that wrote the file."""
    claim: str
    file: str
    figure: Callable[[Any], str]
    script: str


def _summary_ratio(*keys: str) -> Callable[[Any], str]:
    """A ratio cell read from a summary.json along keys."""
    def read(data: Any) -> str:
        for key in keys:
            data = data[key]
        return ratio_cell(data, digits=3)
    return read


def _rows(data: Any, framework: str, **match: str) -> dict[str, Any]:
    """The row of a benchmark's table for one framework (and config)."""
    return next(row for row in data["rows"] if row["framework"] == framework
                and all(row[k] == v for k, v in match.items()))


def _both(config: str | None = None) -> Callable[[Any], str]:
    """TF's and PyTorch's ratio of a setting_ab or tool_overhead table."""
    match = {} if config is None else {"config": config}
    return lambda data: (f"TF {times(_rows(data, 'tf', **match)['ratio'], 3)}, "
                         f"PyTorch {times(_rows(data, 'torch', **match)['ratio'], 3)}")


def _quickstart(data: Any) -> str:
    """The README's first command: median and range of its runs, in seconds."""
    runs = data["this_s"]
    return f"{data['this_median_s']:.1f} s ({min(runs):.1f}-{max(runs):.1f} s, {len(runs)} runs)"


def _ported(data: Any) -> str:
    """How many zoo classifiers ported to the other framework and back, with proof."""
    done = [entry for entry in data["entries"] if round_trip(entry)]
    return f"{len(done)} of {len(data['entries'])}"


def _slip_margin(data: Any) -> str:
    """The smallest factor by which a slip of meaning exceeds the parity check's gate."""
    return f"{min(row['times_limit'] for row in data['rows'] if row['applies']):.1e}x its gate"


def _ceiling(data: Any) -> str:
    """airbench94's accuracy with test-time augmentation on the same data (mean of its runs)."""
    tta = data["accuracy_tta"]
    return f"{100 * tta['mean']:.2f}% ({tta['runs']} runs)"


def _own(framework: str) -> Callable[[Any], str]:
    """A framework's shared / own loop ratio of the median step."""
    return _summary_ratio("own_loops", framework, "time_ratio")


H200 = "gpu-h200-resnet9-verdict/summary.json"
H100 = "gpu-h100-resnet9-verdict/summary.json"
CLAIMS = (
    Claim("ResNet-9, TF / PyTorch training time, each at its defaults", H200,
          _summary_ratio("defaults", "time_ratio"), BATTERY),
    Claim("ResNet-9, TF / PyTorch training time, both compiled", H200,
          _summary_ratio("ratios", "train_time_s"), BATTERY),
    Claim("ResNet-9, TF / PyTorch, epochs after the first, both compiled", H200,
          _summary_ratio("ratios", "steady_train_time_s"), BATTERY),
    Claim("ResNet-9, TF / PyTorch training time, each at its defaults", H100,
          _summary_ratio("defaults", "time_ratio"), BATTERY),
    Claim("ResNet-9, TF / PyTorch training time, both compiled", H100,
          _summary_ratio("ratios", "train_time_s"), BATTERY),
    Claim("Shared loop / Keras `fit`, median step", "gpu-h100-resnet9-own/summary.json",
          _own("tf"), BATTERY),
    Claim("Shared loop / plain PyTorch loop, median step", "gpu-h100-resnet9-own/summary.json",
          _own("torch"), BATTERY),
    Claim("The data's ceiling: airbench94 on the same CIFAR-10 copy",
          "gpu-h100-rental3/reference/reference.json", _ceiling,
          "benchmarks/reference_trainer.py"),
    Claim("Shared loop / own loop, LeNet batch 4, training time",
          "cpu-xeon-2core/overhead.json", _both("lenet:4"), "benchmarks/tool_overhead.py"),
    Claim("Shared loop / own loop, LeNet batch 32, training time",
          "cpu-xeon-2core/overhead.json", _both("lenet:32"), "benchmarks/tool_overhead.py"),
    Claim("Mixed precision (bfloat16) / float32 on a CPU, LeNet", "cpu-xeon-2core/precision.json",
          _both(), "benchmarks/setting_ab.py"),
    Claim("Mixed precision (bfloat16) / float32 on a CPU, ResNet-9",
          "cpu-epyc-2core/precision-resnet9.json", _both(), "benchmarks/setting_ab.py"),
    Claim("A distribution wrapper on one replica / none", "cpu-xeon-2core/strategy.json",
          _both(), "benchmarks/setting_ab.py"),
    Claim("A slip of meaning (an epsilon, a padding side, a layout) against the parity gate",
          "cpu-epyc-avx2-2core/parity_slips.json", _slip_margin,
          "benchmarks/parity_float64.py"),
    Claim("The README's first command, a new clone with an empty cache",
          "cpu-epyc-2core/quickstart_time-fresh-clone.json", _quickstart,
          "benchmarks/quickstart_time.py"),
    Claim("The README's first command, its dataset cache warm",
          "cpu-xeon-2core/quickstart_time.json", _quickstart, "benchmarks/quickstart_time.py"),
    Claim("The README's first command, its dataset cache warm",
          "cpu-epyc-avx2-2core/quickstart_time.json", _quickstart,
          "benchmarks/quickstart_time.py"),
    Claim("torchvision and Keras Applications classifiers ported with proof, and back",
          "port_coverage.json", _ported, "benchmarks/port_coverage.py"),
)


CPU_KINDS = {  # the folder of a CPU's results -> the CPU in words (the folders' files say less)
    "cpu-xeon-2core": "2-core Intel Xeon (AMX, AVX512-BF16)",
    "cpu-epyc-2core": "2-core AMD EPYC (AVX-512, AVX512-BF16)",
    "cpu-epyc-avx2-2core": "2-core AMD EPYC (AVX2 only)",
}


def machine(file: str, data: Any) -> str:
    """The machine a result file was measured on: its CPU kind's folder, or the file's own
    words."""
    if file.split("/")[0] in CPU_KINDS:
        return CPU_KINDS[file.split("/")[0]]
    named = data.get("machine") or data.get("cpu") or data.get("gpu")
    if isinstance(named, dict):
        return gpu_name(data)
    return str(named).removeprefix("a ").removeprefix("GPU: ").removeprefix("NVIDIA ")


def claims_table() -> str:
    """docs/benchmarks.md's table: one row per claim, its figure read from its file."""
    lines = ["| claim | figure | machine | script | result file |", "|---|---|---|---|---|"]
    for claim in CLAIMS:
        data = load(claim.file)
        lines.append(f"| {claim.claim} | {claim.figure(data)} | {machine(claim.file, data)} | "
                     f"`{claim.script}` | `benchmarks/results/{claim.file}` |")
    return "\n".join(lines)


QUICKSTART_TIMES = (  # the README's first command as it states it, one file per CPU kind
    "cpu-epyc-2core/quickstart_time-fresh-clone.json",
)


def quickstart_time() -> str:
    """The README's sentence on how long its first command takes, on each CPU kind measured as
    the README states it (a new clone, an empty cache, after the install)."""
    parts = []
    for file in QUICKSTART_TIMES:
        data = load(file)
        runs = data["this_s"]
        over = ", over a minute" if max(runs) > 60 else ""
        parts.append(f"{data['this_median_s']:.0f} s (median of {len(runs)} runs, "
                     f"{min(runs):.0f}-{max(runs):.0f} s{over}) on a "
                     f"{machine(file, data)} (`benchmarks/quickstart_time.py` → "
                     f"`benchmarks/results/{file}`)")
    sentence = ("After the install, in a new clone with an empty cache, it takes "
                + "; ".join(parts) + ".")
    return textwrap.fill(sentence, width=100, break_long_words=False, break_on_hyphens=False)


SCHEDULE_BEFORE_AFTER = (  # every comparison; then batch 32 again, alone
    "cpu-xeon-2core/schedule-before-after.json",
    "cpu-xeon-2core/schedule-before-after-batch32.json")


def schedule_before_after() -> str:
    """The research page's tables: what `compare` measured before and after its timing
    schedule became one object (benchmarks/checkout_ab.py), each with its command and machine."""
    from benchmarks.checkout_ab import table
    blocks = []
    for file in SCHEDULE_BEFORE_AFTER:
        data = load(file)
        blocks.append(f"`{data['command']}` on a {machine(file, data)}, before {data['before']}, "
                      f"after {data['after']}, {data['repeats']} repeats of each "
                      f"(`benchmarks/results/{file}`):\n\n" + table(data).rstrip("\n"))
    return "\n\n".join(blocks)


MARKERS: dict[tuple[str, str], Callable[[], str]] = {  # (page, table's name) -> its maker
    ("README.md", "gpu-table"): gpu_table,
    ("README.md", "quickstart-time"): quickstart_time,
    ("docs/benchmarks.md", "claims"): claims_table,
    ("docs/research/schedule-before-after.md", "schedule-before-after"): schedule_before_after,
}


def regenerated(page: str, text: str) -> str:
    """The page's text with each of its generated blocks made afresh between its markers."""
    for (named_page, name), make in MARKERS.items():
        if named_page != page:
            continue
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin not in text or end not in text:
            raise SystemExit(f"{page}: the markers {begin} and {end} are missing")
        before, rest = text.split(begin, 1)
        text = f"{before}{begin}\n{make()}\n{end}{rest.split(end, 1)[1]}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table differs from its files")
    args = parser.parse_args(argv)
    stale = []
    for page in dict.fromkeys(page for page, _ in MARKERS):
        path = REPO / page
        text = path.read_text()
        fresh = regenerated(page, text)
        if fresh != text:
            stale.append(page)
            if not args.check:
                path.write_text(fresh)
    verb = "differs from its files" if args.check else "rewritten"
    for page in stale:
        print(f"{page}: table {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
