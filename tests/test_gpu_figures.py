"""Every GPU figure docs/gpu.md quotes is the shipped result file's (the README's are generated).

TABLE declares each figure the GPU sections quote: the text around it as written, the file under
benchmarks/results/ it comes from, how to read the value there and how the text rounds it; the
text must hold the file's value, so rounded, or the figure drifted from its file (an edit, or
one worked out by hand over other epochs). Every number with a unit in the GPU sections must be
one TABLE checks, so no new hand-copied figure slips in unchecked. No framework is imported.
"""
from __future__ import annotations

import csv
import functools
import json
import math
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GPU = "docs/gpu.md"
text_of = functools.cache(  # a document, every run of whitespace one space (texts cross lines)
    lambda doc: re.sub(r"\s+", " ", (ROOT / doc).read_text()))
# (from, up to this text); the README's GPU figures are its generated table
# (benchmarks/claims.py, tests/test_claims_tables.py), so none of its prose is checked here
SECTIONS = {GPU: [("## The verdict: ResNet-9 on an NVIDIA H200", "## What is claimed on a GPU")]}
_N = r"\d+(?:,\d{3})*(?:\.\d+)?"
UNIT_FIGURE = re.compile(  # a number with a unit ("8x8" is a shape; "2 seeds" has no unit)
    rf"(?<![\w.,])[+-]?{_N}(?:\s?(?:-|to)\s?{_N})?\s?(?:img/s|ms|s|MiB|mJ|J|%|x|pts|points)"
    r"(?![\w/])")
DIRS = {  # the folders under benchmarks/results/ that TABLE's file names start with
    "CUT": "gpu-h200-resnet9-cutout", "LONG": "gpu-h200-resnet9-48-epochs",
    "R9": "gpu-h200-resnet9-mixed", "LENET": "gpu-h200-lenet-mixed", "XEON": "cpu-xeon-2core",
    "R18": "gpu-h100-resnet18-mixed", "R18_1": "gpu-h100/resnet18-mixed",
    "MOB": "gpu-h100/mobilenetv2-mixed", "MOB_TF": "gpu-h100-rental2/mobilenetv2-mixed",
    "STRATEGY": "gpu-h100-rental2/strategy", "SHARED": "gpu-h100-rental2/shared-chip",
    "GRAPHS": "gpu-h200/cuda-graphs", "SHARED200": "gpu-h200-rental2/shared-chip",
    "H1": "gpu-h100", "H1B": "gpu-h100-rental2", "H2": "gpu-h200", "H2B": "gpu-h200-rental2",
    "H3": "gpu-h100-rental3", "H4": "gpu-h100-rental4", "V": "gpu-h100-resnet9-verdict",
    "VD": "gpu-h100-resnet9-verdict/defaults", "OB": "gpu-h100-resnet9-own-best",
    "OBB": "gpu-h100-resnet9-own-best/best", "H5": "gpu-h100-rental5",
    "OWN": "gpu-h100-resnet9-own", "H6": "gpu-h100-rental6", "V2": "gpu-h200-resnet9-verdict",
    "V2D": "gpu-h200-resnet9-verdict/defaults", "H7": "gpu-h200-rental3"}
RUNS = {"tf": "tf-seed0", "pt": "torch-seed0", "tf1": "tf-seed1", "pt1": "torch-seed1",  # NAME.RUN
        "tf2": "tf-seed2", "pt2": "torch-seed2",
        "none": "tf-strategy_none", "mirrored": "tf-strategy_mirrored", "one": "tf-devices_1",
        "two": "tf-devices_2"}


@functools.cache
def load(name: str) -> Any:
    """A file by its name in TABLE, parsed by its kind (a junit xml as its testsuite)."""
    if "/" in name:  # NAME/PATH
        path = RESULTS / DIRS[name.split("/")[0]] / name.split("/", 1)[1]
    else:  # NAME (its summary.json, or sweep.json), NAME.RUN (result.json), .win, .log
        base, run, kind = (name.split(".") + ["", ""])[:3]
        path = RESULTS / DIRS[base] / (f"runs/{RUNS[run]}/" + {"": "result.json", "win":
                                       "windows.csv", "log": "log.txt"}[kind]
                                       if run else "summary.json")
        path = path if path.exists() else path.with_name("sweep.json")
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".xml":
        return next(ET.parse(path).getroot().iter("testsuite"))
    return list(csv.DictReader(path.open())) if path.suffix == ".csv" else path.read_text()


KEYS = {  # short names in TABLE's paths, each with how the documents round its figure
    "time": ("train_time_s", "s"), "rate": ("images_per_s", "img/s"), "mfu": ("mfu", "%"),
    "step": ("steady_step_time_ms", "ms"), "mem": ("peak_device_memory_bytes", "MiB"),
    "mj": ("energy_per_image_j", "mJ"), "acc": ("final_test_accuracy", "%2"),
    "wait": ("input_wait_fraction", "%"), "warmup": ("warmup_time_s", "s"),
    "gap": ("accuracy_difference.centre", "pts"), "fwd": ("profile.phases_ms.forward", "ms"),
    "bwd": ("profile.phases_ms.backward", "ms"), "energy": ("energy_j", "x")}


def read_path(data: Any, path: str) -> Any:
    """A dotted path into JSON, KEYS expanded: in a summary.json "tf.K" and "torch.K" are the
    framework's centre of K, "ratio.K" the TF / PyTorch ratio; "{devices=2}" a sweep's row of
    that setting; ">3" a list from item 3; "*" maps the rest of the path over a list."""
    keys = ".".join(KEYS.get(k, (k,))[0] for k in path.split(".")).split(".")
    if keys[0] in ("tf", "torch") and "frameworks" in data:
        keys = ["frameworks", *keys, "centre"]
    elif keys[0] == "ratio" and "ratios" in data:
        keys = ["ratios", *keys[1:], "ratio"]
    for i, key in enumerate(keys):
        if key == "*":
            return [read_path(item, ".".join(keys[i + 1:])) for item in data]
        if match := re.fullmatch(r"\{(.+)=(.+)\}", key):
            row = next(r for r in data["rows"] if str(r["settings"][match[1]]) == match[2])
            data = {**row["summary"], "speedup": row["speedup"]}
        else:
            data = data[int(key[1:]):] if key[0] == ">" else data[int(key)] if isinstance(
                data, list) else data[key]
    return data


UNITS = {  # how the documents write a figure: its unit, the file's value scaled, decimals
    "s": (" s", 1, 1), "ms": (" ms", 1, 1), "x": ("x", 1, 2), "%": ("%", 100, 1),
    "MiB": (" MiB", 2 ** -20, 0), "mJ": (" mJ", 1000, 1), "img/s": (" img/s", 1, 0),
    "n": ("", 1, 0), "J": (" J", 1, 0), "points": (" points", 100, 2),
    "%nvml": ("%", 1, 0)}  # NVML: per cent
SHOW: dict[str, Callable[[Any], str]] = {  # other ways the documents write figures
    "pts": lambda v: f"{100 * v:+.2f} pts", "e": lambda v: f"{v:.1e}", "str": str,
    "to-range": lambda vs: f"{min(vs):,.0f} to {max(vs):,.0f}", "2-N": lambda n: f"2-{n}",
    "tens-ms": lambda v: f"{round(v, -1):.0f} ms", "less-one": lambda n: str(n - 1),
    "within-0.1%": lambda v: "0.1%" if v <= 0.001 else repr(v),  # bounds as the text says
    "under-0.001": lambda v: "0.001" if v < 0.001 else repr(v), "1st": lambda t: t[0],
    "power-of-2": lambda v: f"2^{round(math.log2(v))}", "2nd": lambda t: t[1]}


def show(spec: str, value: Any) -> str:
    """A value as the document writes it: a SHOW name, or a UNITS unit then its decimals
    ('%2'); '-range' writes a list's smallest and largest, a list otherwise shows alike."""
    if spec in SHOW:
        return SHOW[spec](value)
    unit, range_, digits = re.fullmatch(r"(.+?)(-range)?(\d?)", spec).groups()
    suffix, scale, default = UNITS[unit]
    one = lambda v: f"{float(v) * scale:,.{int(digits or default)}f}"  # noqa: E731
    if range_:
        return f"{one(min(value))}-{one(max(value))}{suffix}"
    shown = {one(v) for v in (value if isinstance(value, list) else [value])}
    return f"{shown.pop()}{suffix}" if len(shown) == 1 else f"differing: {sorted(shown)}"


_acc = lambda s, fw: s["frameworks"][fw]["final_test_accuracy"]["centre"]  # noqa: E731
_ms = lambda rows: [1000 * float(r["seconds"]) / int(r["steps"]) for r in rows]  # noqa: E731
_kernel = lambda r, name: next(  # noqa: E731 - a kernel of the profile's longest, by name
    k for k in r["profile"]["kernels"]["top"] if k["name"] == name)
_family = lambda r, kind: r["profile"]["kernels"]["families_ms"].get(kind, 0.0)  # noqa: E731
_wall = lambda log: json.loads(re.search(r"cnncompare-wall-time: (\{.*\})", log)[1])  # noqa
READERS: dict[str, Callable[..., Any]] = {  # @name in TABLE: a function of the loaded files
    "idle": lambda r: r["profile"]["device_idle_ms"] / r["profile"]["step_ms"],
    "kernels_ms": lambda r: read_path(r, "fwd") + read_path(r, "bwd"),  # GPU clock, a step
    "kernels_ratio": lambda tf, pt: (read_path(tf, "fwd") + read_path(tf, "bwd")) / (
        read_path(pt, "fwd") + read_path(pt, "bwd")),  # on the GPU's clock
    "rate_epochs": lambda r: f"2-{len(r['epochs'])}" if math.isclose(  # images_per_s's epochs
        r["summary"]["images_per_s"], sum(x["images"] for x in r["epochs"][1:])
        / sum(x["train_time_s"] for x in r["epochs"][1:])) else "other",
    "never_overflowed": lambda *runs: [c["loss_scale_initial"] if all(  # each run's initial
        e["loss_scale"] == c["loss_scale_initial"] * 2 ** (sum(  # scale, where each epoch ends
            x["steps"] for x in r["epochs"][:i + 1]) // c["loss_scale_growth_interval"])  # at it
        for i, e in enumerate(r["epochs"])) else "overflowed"  # doubled once per growth interval
        for r in runs for c in [r["config"]]],  # of finite steps: no step ever skipped
    "energy_epochs": lambda r: f"1-{len(r['epochs'])}" if math.isclose(
        sum(e["gpu"]["energy_j"] for e in r["epochs"]), r["summary"]["energy_j"]) else "other",
    "window_epochs": lambda r: f"2-{len(r['epochs'])}" if r["summary"]["steady_step_time_ms"][
        "windows"] == 13 * (len(r["epochs"]) - 1) else "other",  # 13 windows an epoch
    "both_acc": lambda s: [_acc(s, "tf"), _acc(s, "torch")],
    "tf_gain": lambda now, then: _acc(now, "tf") - _acc(then, "tf"),
    "torch_gain": lambda now, then: _acc(now, "torch") - _acc(then, "torch"),
    "largest_gap": lambda *s: max(abs(x["accuracy_difference"]["centre"]) for x in s),
    "step_ratio": lambda tf, pt: read_path(tf, "summary.step.median") / read_path(
        pt, "summary.step.median"),
    "loss_gap": lambda a, b: max(abs(x["train_loss"] - y["train_loss"])
                                 for x, y in zip(a["epochs"], b["epochs"])),
    "graphs_loss_gap": lambda log: max(abs(g - e) / e for e, g in zip(*(  # epochs both ran
        [float(v) for v in re.findall(rf"cuda-graphs={on} .*train_loss ([\d.]+)", log)]
        for on in (False, True)))),
    "epoch_start_ms": lambda rows: statistics.median(  # each epoch's first window, from 2 on
        1000 * float(r["input_wait_s"]) for i, r in enumerate(rows)
        if i and r["epoch"] != rows[i - 1]["epoch"]),
    "steps": lambda rows: sum(int(r["steps"]) for r in rows),
    "seconds": lambda rows: sum(float(r["seconds"]) for r in rows),
    "ms_a_step": lambda rows: 1000 * READERS["seconds"](rows) / READERS["steps"](rows),
    "median_window": lambda rows: statistics.median(_ms(rows)),
    "fastest_window": lambda rows: min(_ms(rows)), "slowest_window": lambda rows: max(_ms(rows)),
    "beside": lambda r18, mob: _wall(r18)["ended"] - _wall(mob)["started"],
    "run_s": lambda log: _wall(log)["ended"] - _wall(log)["started"],
    "outcomes": lambda s: re.sub(r"^0 passed, |, 0 \w+", "", "{} passed, {} failed, {} skipped"
        .format(*(lambda t, f, k: (t - f - k, f, k))(int(s.get("tests")), int(s.get(  # junit
            "failures")) + int(s.get("errors")), int(s.get("skipped"))))),
    "progress": lambda log: (lambda line: f"{line.count('.')} passed, {line.count('F')} "
                             f"failed, {line.count('s')} skipped")(next(  # -q's progress line
        s.strip() for s in log.splitlines() if re.fullmatch(r"[.FEsx]+", s.strip()))),
    "tests": lambda s: int(s.get("tests")),
    "pytest_s": lambda log: float(re.findall(r" in ([\d.]+)s", log)[-1]),
    "scale_floor": lambda s: float(re.search(r"assert \(([\d.]+) <",
                                             s.find(".//failure").get("message"))[1]),
    "stage": lambda q: re.search(  # PyTorch's ResNet-18 stage: when it started, its seconds
        r"^\[(\S+) .*stage resnet18-mixed \(torch\).*\n.*\n\s+ok in (\d+) s", q, re.M).groups(),
    "unpacked_s": lambda md: re.search(r"unpacked about (\d+) s into the queue", md)[1],
    "reached": lambda md: re.search(r"(\d+) of (\d+) run in", md).groups(),
    "below_published": lambda ref: 0.9401 - ref["accuracy_tta"]["mean"],  # airbench's README
    "less_a_point": lambda ref: ref["accuracy_tta"]["mean"] - 0.01,
    "verdict_start": lambda q: re.search(  # seconds into the queue, seconds left
        r"\+(\d+)s\] stage resnet9-verdict \(both\), (\d+) s left", q).groups(),
    "mul_ms": lambda r: _kernel(r, "Mul_GPU_DT_FLOAT_DT_FLOAT_kernel")["ms"],
    "addv2_ms": lambda r: _kernel(r, "AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel")["ms"],
    "update_calls": lambda r: "{:g} `Mul` and {:g} `AddV2`".format(*(_kernel(r, name)["calls"]
        for name in ("Mul_GPU_DT_FLOAT_DT_FLOAT_kernel", "AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel"))),
    "update_ms": lambda r: READERS["mul_ms"](r) + READERS["addv2_ms"](r),
    "catch_up": lambda tf, pt: 1 + (  # epochs until TF's faster steady epochs make up its
        read_path(tf, "tf.warmup") - read_path(pt, "torch.warmup")) / ((  # longer first one
        read_path(pt, "torch.steady_train_time_s") - read_path(tf, "tf.steady_train_time_s"))
        / (tf["config"]["epochs"] - 1)),
    "graphs_catch_up": lambda sweep: (lambda off, on: 1 + (on["warmup_time_s"] - off[
        "warmup_time_s"]) / ((off["train_time_s"] - off["warmup_time_s"]) - (on[
            "train_time_s"] - on["warmup_time_s"])) * (off["epochs_completed"] - 1))(
        *(row["summary"] for row in sweep["rows"])),  # the rows: off, on
    "h2d_calls": lambda r: _kernel(r, "MemcpyH2D")["calls"],  # TensorFlow's name, PyTorch's:
    "pinned_h2d_calls": lambda r: _kernel(r, "Memcpy HtoD (Pinned -> Device)")["calls"],
    "conv_spread": lambda *rs: (lambda v: max(v) - min(v))(
        [_family(r, "convolution") for r in rs]),
    "generated_ms": lambda r: _family(r, "generated reduction") + _family(
        r, "generated pointwise"),
    "eager_library_ms": lambda r: sum(_family(r, kind) for kind in (
        "normalization", "pooling", "elementwise")),
    "reduction_gap": lambda tf, pt: _family(tf, "generated reduction") - _family(
        pt, "generated reduction"),
    "kernels_range": lambda *rs: [r["profile"]["kernels"]["total_ms"] for r in rs],
    "tail_acc": lambda log: float(re.findall(r"test_acc ([\d.]+)", log)[-1]),
    "tail_train_s": lambda log: [float(x) for x in re.findall(r" train ([\d.]+)s", log)],
    "tail_rates": lambda log: [float(x.replace(",", "")) for x in re.findall(
        r"([\d,]+) img/s", log)],
    "xla_off": lambda _: "XLA was off in TensorFlow/Keras" if len(runs := [  # and torch.compile
        json.loads(p.read_text()) for p in RESULTS.glob("gpu-*/**/result.json")  # before the
        if not {DIRS[d] for d in ("V", "H4", "OB", "H5", "OWN", "V2", "H7")}  # the verdicts'
        & set(p.parts)]) >= 20 and all(
        (r["fairness"]["compile"], r["config"]["compile"], r["compilation"]["compiled"])
        == ("off", False, False) for r in runs) else "a GPU run compiled"}  # in every GPU run


def parse(table: str) -> list[tuple[str, str, str, list[str]]]:
    """TABLE's rows: (document, passage, text, its figures as 'FILE:reader -> show')."""
    rows, doc, after = [], "", ""
    for line in re.sub(r"\n +", " ", table.strip()).splitlines():  # indented lines go on
        if line.startswith("== "):
            doc, after = line[3:].split(" :: ")
            continue
        text, file, figures = line.split(" :: ")
        figures = re.sub(r"(\w+)\*", r"\1+ ; ratio.\1", figures)  # K* -> K+ ; ratio.K
        figures = re.sub(r"(\w+)\+(?= |$)", r"torch.\1 ; tf.\1", figures)  # K+ -> both
        rows.append((doc, after, text, [f if re.match(r"[^ {]+:[^ ]", f) else f"{file}:{f}"
                                        for f in figures.split(" ; ")]))
    return rows


# A row: its text (" ... " skips what lies between) :: its file (see DIRS; '+' passes several)
# :: its figures in the text's order, ' ; ' apart: a path (KEYS shorten it; "K+" is torch.K ;
# tf.K, "K*" adds ratio.K) or a READERS @name, 'FILE:' before it for another file, '-> SHOW' where
# KEYS give no rounding; '=TEXT' is no measurement. Indented lines go on. '== DOC :: PASSAGE'.
TABLE = "\n".join(line for line in (ROOT / "tests" / "gpu_figures_table.txt")
                  .read_text().splitlines() if not line.startswith("#"))
ROWS = parse(TABLE)


def written(figure: str) -> str:
    """A figure as its file(s) give it, rounded as the document rounds it."""
    (files, reader), spec = figure.partition(" -> ")[0].split(":", 1), figure.partition(" -> ")[2]
    if reader.startswith("="):  # a number that is no measurement, as written
        return reader[1:]
    data = [load(name) for name in files.split("+")]
    if reader.startswith("@"):
        return show(spec, READERS[reader[1:]](*data))
    spec = spec or ("x" if reader.startswith("ratio") else KEYS[reader.split(".")[-1]][1])
    values = [read_path(d, reader) for d in data]  # several files: the path's values pooled
    return show(spec, values[0] if len(data) == 1 else [
        v for vs in values for v in (vs if isinstance(vs, list) else [vs])])


def spans(doc: str, after: str, text: str, figures: list[str]) -> list[tuple[int, int]]:
    """Where each figure of a row is in the document: in its text's parts, in order."""
    parts, at = [], text_of(doc).find(after)
    assert at >= 0, f"{doc}: {after!r} not found"
    for part in text.split(" ... "):
        at = text_of(doc).find(part, at)
        assert at >= 0, f"{doc}: {part!r} not found after {after!r} (and the text before it)"
        parts, at = parts + [(at, part)], at + len(part)
    found, k, position = [], 0, 0
    for figure in figures:
        value = written(figure)
        while (where := parts[k][1].find(value, position)) < 0:
            k, position = k + 1, 0
            assert k < len(parts), f"{doc} says {text!r}; {figure} gives {value!r}"
        found.append((parts[k][0] + where, parts[k][0] + where + len(value)))
        position = where + len(value)
    return found


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}: {r[2][:40]}" for r in ROWS])
def test_each_quoted_figure_is_its_files(row: tuple) -> None:
    """The text is in the document and holds each file's value, rounded as quoted, in order."""
    assert len(spans(*row)) == len(row[3])


@pytest.mark.parametrize("doc", sorted(SECTIONS))
def test_no_figure_with_a_unit_in_the_gpu_sections_goes_unchecked(doc: str) -> None:
    """Each number of every figure with a unit in the GPU sections is in a span TABLE checks."""
    text, covered = text_of(doc), [s for row in ROWS if row[0] == doc for s in spans(*row)]
    unchecked = [f"{m.group()!r} in '...{text[m.start() - 50:m.end() + 10]}...'"
                 for begin, end in SECTIONS[doc]
                 for m in UNIT_FIGURE.finditer(text, text.index(begin),
                                               text.index(end, text.index(begin)))
                 if not all(any(a <= m.start() + n.start() and m.start() + n.end() <= b
                                for a, b in covered) for n in re.finditer(_N, m.group()))]
    assert not unchecked, f"{doc}: figures no TABLE row checks:\n" + "\n".join(unchecked)
