"""Every GPU figure that README.md and docs/gpu.md quote is the shipped result file's.

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
README, GPU = "README.md", "docs/gpu.md"
text_of = functools.cache(  # a document, every run of whitespace one space (texts cross lines)
    lambda doc: re.sub(r"\s+", " ", (ROOT / doc).read_text()))
SECTIONS = {README: [("**Status:**", "## Why the comparison"),  # (from, up to this text)
                      ("## Measured so far", "On a 2-core Intel Xeon CPU")],
            GPU: [("## Measured on an NVIDIA H200", "## What is claimed on a GPU")]}
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
    "H1": "gpu-h100", "H1B": "gpu-h100-rental2", "H2": "gpu-h200", "H2B": "gpu-h200-rental2"}
RUNS = {"tf": "tf-seed0", "pt": "torch-seed0", "tf1": "tf-seed1", "pt1": "torch-seed1",  # NAME.RUN
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
    "n": ("", 1, 0), "points": (" points", 100, 2), "%nvml": ("%", 1, 0)}  # NVML: per cent
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
_wall = lambda log: json.loads(re.search(r"cnncompare-wall-time: (\{.*\})", log)[1])  # noqa
READERS: dict[str, Callable[..., Any]] = {  # @name in TABLE: a function of the loaded files
    "idle": lambda r: r["profile"]["device_idle_ms"] / r["profile"]["step_ms"],
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
    "xla_off": lambda _: "XLA was off in TensorFlow/Keras" if len(runs := [  # and torch.compile
        json.loads(p.read_text()) for p in RESULTS.glob("gpu-*/**/result.json")]) >= 20 and all(
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
TABLE = """
== README.md :: ## Measured so far
short of the 94% this ... no time to 94% :: - :: =94% ; =94%
XLA was off in TensorFlow/Keras and torch.compile off in PyTorch :: CUT :: @xla_off -> str
PyTorch trained in 21.9 s (69,104 img/s, MFU 15.9%, 1,234 MiB peak, 6.6 mJ per image) :: CUT ::
  torch.time ; torch.rate ; torch.mfu ; torch.mem ; torch.mj
in 63.7 s (21,111 img/s, MFU 4.9%, 1,696 MiB, 20.2 mJ per image): 2.91x the time :: CUT :: tf.time ;
  tf.rate ; tf.mfu ; tf.mem ; tf.mj ; ratio.time
its kernels about 4x slower ... Both reached 90.84% test accuracy (91.54% in 48 epochs :: CUT ::
  CUT.tf+CUT.pt:@kernels_ratio -> x0 ; @both_acc -> %2 ; LONG:torch.acc
TensorFlow 0.77x PyTorch's training time (range 0.76x-0.79x), both host-bound at 2-3 ms :: LENET ::
  ratio.time ; ratios.time.low -> x ; ratios.time.high -> x ; tf.step -> n ; torch.step -> ms0
54.62% and 54.67% test :: LENET :: tf.acc ; torch.acc
== README.md :: On one NVIDIA H100, the same data
PyTorch trained in 59.8 s (9,730 img/s, MFU 3.3%, 475 MiB peak, 22.0 mJ per image) :: R18 ::
  torch.time ; torch.rate ; torch.mfu ; torch.mem ; torch.mj
in 84.0 s (6,807 img/s, MFU 2.3%, 720 MiB, 42.3 mJ per image): 1.40x :: R18 :: tf.time ; tf.rate ;
  tf.mfu ; tf.mem ; tf.mj ; ratio.time
13.6 s against 8.8 s in the first ... the 1.40x understated ... idle 87% and 65% of a profiled ...
  86.79% and 86.67% test :: R18 :: torch.warmup ; R18_1:torch.warmup ; ratio.time ;
  R18.pt:@idle -> %0 ; R18.tf:@idle -> %0 ; torch.acc ; tf.acc
== docs/gpu.md :: ## Measured on an NVIDIA H200
XLA was off in TensorFlow/Keras and torch.compile off in PyTorch :: CUT :: @xla_off -> str
== docs/gpu.md :: | ResNet-9, DAWNBench's recipe, mixed, 24 epochs, 1 seed |
| 21.9 s | 63.7 s | 2.91x | ... | 69,104 img/s | 21,111 img/s | ... | 6.9 ms | 24.3 ms | :: CUT ::
  time* ; rate+ ; step+
| 1,234 MiB | 1,696 MiB | 1.38x | ... | 15.9% | 4.9% | ... | 6.6 mJ | 20.2 mJ | :: CUT :: mem* ;
  mfu+ ; mj+
| 90.84% | 90.84% | +0.00 pts | ... | 35.9 s, 91.54% | :: CUT :: acc+ ; gap ; LONG:torch.time ;
  LONG:torch.acc
== docs/gpu.md :: | mixed precision (float16, loss scaling) |
| 22.4 s | 63.9 s | 2.85x | ... | 67,986 img/s | 21,126 img/s | ... | 7.5 ms | 24.3 ms | 3.23x | ::
  R9 :: time* ; rate+ ; step* -> x
| 1.7 ms, 2.9 ms | 7.3 ms, 12.4 ms | :: R9.pt :: fwd ; bwd ; R9.tf:fwd ; R9.tf:bwd
| 1,234 MiB | 1,696 MiB | 1.38x | ... | 15.6% | 4.9% | ... | 6.6 mJ | 19.6 mJ | 2.95x | :: R9 ::
  mem* ; mfu+ ; mj+ ; ratio.energy
| 90.68% | 90.74% | +0.06 pts | :: R9 :: acc+ ; gap
| 78.8 s | 60.9 s | 0.772x [0.758x, 0.787x] | ... | 3.01 ms | 2.35 ms | ...
  | 54.67% | 54.62% | -0.05 pts | :: LENET :: time+ ; ratio.time -> x3 ; ratios.time.low -> x3 ;
  ratios.time.high -> x3 ; torch.step -> ms2 ; tf.step -> ms2 ; acc+ ; gap
== docs/gpu.md :: What these say
not the 94% the recipe ... no time to 94% ... over the 5% the defaults aim for :: - :: =94% ; =94% ;
  =5%
reached 90.7% in both ... without cutout, 90.84% with ... and 91.54% over twice :: R9 ::
  @both_acc -> % ; CUT:torch.acc ; LONG:torch.acc
by 0.10 points (TensorFlow) and 0.16 points (PyTorch), twice the epochs by 0.70 points :: CUT+R9 ::
  @tf_gain -> points ; @torch_gain -> points ; LONG+CUT:@torch_gain -> points
agree to 0.06 points or closer :: CUT+R9+LENET :: @largest_gap -> points
kernels take about 4x ... (input wait 0.6%) ... batches 6.6% of ...
  (7.1% in the first rental), TensorFlow 0.6%; :: CUT :: CUT.tf+CUT.pt:@kernels_ratio -> x0 ;
  tf.wait ; torch.wait ; R9:torch.wait ; tf.wait
window, about 50 ms ... 47.8 ms down to 2.3 ms on a CPU ... (10-25% GPU use :: CUT.pt.win ::
  @epoch_start_ms -> tens-ms ;
  XEON/epoch_start.json:iterator.new each epoch.first_batch_ms_median -> ms ;
  XEON/epoch_start.json:iterator.runs on.first_batch_ms_median -> ms ;
  LENET.tf+LENET.tf1+LENET.pt+LENET.pt1:epochs.*.gpu.utilisation_pct_mean -> %nvml-range
stage, gave 69,394 img/s, against 67,986 and 69,104 in the two :: GRAPHS ::
  {cuda-graphs=False}.rate ; R9:torch.rate -> n ; CUT:torch.rate -> n
1.53x the eager steady throughput (105,974 against 69,394 img/s; epochs 2-3 against 2-10, ::
  GRAPHS :: {cuda-graphs=True}.speedup -> x ; {cuda-graphs=True}.rate -> n ;
  {cuda-graphs=False}.rate ; {cuda-graphs=True}.epochs_completed -> 2-N ;
  {cuda-graphs=False}.epochs_completed -> 2-N
within 0.1% of eager's ... took 17.8 s against 2.0 s ... read 89 MiB against eager's 1,234 MiB ::
  GRAPHS :: H2/logs/cuda-graphs-torch.log:@graphs_loss_gap -> within-0.1% ;
  {cuda-graphs=True}.warmup ; {cuda-graphs=False}.warmup ; {cuda-graphs=True}.mem ;
  {cuda-graphs=False}.mem
0.902x one process's throughput (15,908 against 17,645 img/s), final accuracy 53.84% against 54.11%
  :: SHARED200 :: {devices=2}.speedup -> x3 ; {devices=2}.rate -> n ; {devices=1}.rate ;
  {devices=2}.acc ; {devices=1}.acc
== docs/gpu.md :: | ResNet-18 (pytorch-cifar), mixed, batch 128, 10 epochs, 1 seed |
| 59.8 s | 84.0 s | 1.40x | ... | 9,730 img/s | 6,807 img/s | ...
  | 13.05 ms | 18.45 ms | 1.41x | ... | 13.6 s | 18.0 s | :: R18 :: time* ; rate+ ;
  torch.step -> ms2 ; tf.step -> ms2 ; ratio.step -> x ; warmup+
| 0.9 ms, 1.6 ms; 87% | 3.6 ms, 5.8 ms; 65% | :: R18.pt :: fwd ; bwd ; @idle -> %0 ; R18.tf:fwd ;
  R18.tf:bwd ; R18.tf:@idle -> %0
| 3.5% | 0.7% | ... | 475 MiB | 720 MiB | 1.51x | ... | 3.3% | 2.3% | ...
  | 22.0 mJ | 42.3 mJ | 1.92x | ... | 86.79% | 86.67% | -0.12 pts | :: R18 :: wait+ ; mem* ; mfu+ ;
  mj+ ; ratio.energy ; acc+ ; gap
from 19:54:22, done in 118 s), ... about 100 s into the queue :: H1B/queue.log ::
  @stage -> 1st ; @stage -> 2nd ; H1B/commands.md:@unpacked_s -> s0
Its first epoch took 13.6 s, against 8.8 s in the first rental ... the 1.40x (1.41x a step) ::
  R18 :: torch.warmup ; R18_1:torch.warmup ; ratio.time ; ratio.step -> x
nothing for 87% (PyTorch) and 65% (TensorFlow) ... (forward 3.6 against 0.9 ms) :: R18.pt ::
  @idle -> %0 ; R18.tf:@idle -> %0 ; R18.tf:fwd -> n1 ; fwd
gradient difference 2.6e-13 :: R18 :: parity.grad_max_rel_diff -> e
== docs/gpu.md :: | TensorFlow/Keras on one H100 |
| 10,394 img/s | 3.07 ms | 53.80% | ... | 10,955 img/s (1.054x) | 2.91 ms | 55.61% | :: STRATEGY ::
  {strategy=none}.rate ; {strategy=none}.step.median -> ms2 ; {strategy=none}.acc ;
  {strategy=mirrored}.rate ; {strategy=mirrored}.speedup -> x3 ;
  {strategy=mirrored}.step.median -> ms2 ; {strategy=mirrored}.acc
| 21,914 img/s | 2.91 ms | 54.44% | ... | 14,275 img/s (0.651x) | 4.27 ms | 53.80% | :: SHARED ::
  {devices=1}.rate ; {devices=1}.step.median -> ms2 ; {devices=1}.acc ; {devices=2}.rate ;
  {devices=2}.speedup -> x3 ; {devices=2}.step.median -> ms2 ; {devices=2}.acc
by less than 0.001 in :: STRATEGY.none+STRATEGY.mirrored :: @loss_gap -> under-0.001
(1.6617 and 1.6625 in the first, 1.3304 and 1.3296 in the second ... (55.61% against 53.80%) ...
  (48.41% against 51.12%) :: STRATEGY.none :: epochs.0.train_loss -> n4 ;
  STRATEGY.mirrored:epochs.0.train_loss -> n4 ; epochs.1.train_loss -> n4 ;
  STRATEGY.mirrored:epochs.1.train_loss -> n4 ; STRATEGY.mirrored:summary.acc ; summary.acc ;
  STRATEGY.mirrored:epochs.0.test_accuracy -> %2 ; epochs.0.test_accuracy -> %2
one: 0.651x one device's throughput, final training loss 1.3353 against 1.3391. ...
  an H200 kept 0.902x :: SHARED :: {devices=2}.speedup -> x3 ;
  SHARED.two:epochs.-1.train_loss -> n4 ; SHARED.one:epochs.-1.train_loss -> n4 ;
  SHARED200:{devices=2}.speedup -> x3
== docs/gpu.md :: ### MobileNetV2 (both rentals)
for 63 of its 68 s ... up to 3,600 MiB in epoch 3 and 2,311 MiB in each epoch from 4 ::
  R18_1.pt.log+MOB.pt.log :: @beside -> n ; R18_1.pt.log:@run_s -> s0 ;
  MOB.pt:epochs.2.gpu.memory_used_bytes_max -> MiB ;
  MOB.pt:epochs.>3.*.gpu.memory_used_bytes_max -> MiB
| 4,180 img/s | epochs 2-8 | ... | 31.1 ms | epochs 2-8 | ... | 19-22% | :: MOB.pt :: summary.rate ;
  @rate_epochs -> str ; summary.step.median -> ms ; @window_epochs -> str ;
  epochs.>3.*.gpu.utilisation_pct_mean -> %nvml-range
| 57.5 mJ | epochs 1-8 | ... | 951 MiB | ... | 39.7 s | ...
  | 81.34% | epoch 8 of 10: the stage's 150 s limit :: MOB.pt :: summary.mj ;
  @energy_epochs -> str ; summary.mem ; summary.warmup ; summary.acc ;
  summary.epochs_completed -> str ; config.epochs -> str ; H1/battery.json:stages.1.limit_s -> s0
its first took 61.9 s (43 s of it the first 32 steps, ...
  its second 18.8 s, 2,655 img/s (a 48.1 ms median step), 56.75% test :: MOB_TF.tf ::
  summary.warmup ; MOB_TF.tf.win:0.seconds -> s0 ; MOB_TF.tf.win:0.steps -> str ; epochs.1.time ;
  summary.rate ; summary.step.median -> ms ; summary.acc
PyTorch's 31.1 ms step that is 1.54x :: MOB.pt :: summary.step.median -> ms ;
  MOB_TF.tf+MOB.pt:@step_ratio -> x
12,500 steps took 195.5 s, 15.6 ms a step (the median window 14.5 ms, windows from 2.9 to 242 ms) ::
  H1/cpu-vs-gpu/torch-device_cpu/windows.csv :: @steps -> n ; @seconds -> s ; @ms_a_step -> ms ;
  @median_window -> ms ; @fastest_window -> n1 ; @slowest_window -> ms0
== docs/gpu.md :: ### The GPU tests
12 passed, 2 skipped (they need two GPUs) in 45 s :: H1/pytest-gpu-torch.xml :: @outcomes -> str ;
  H1/logs/gpu-tests-torch.log:@pytest_s -> s0
11 of its 19 tests ran in the stage's 278 s: 9 passed, 1 failed, 1 skipped :: H1/commands.md ::
  @reached -> 1st ; @reached -> 2nd ; H1/battery.json:stages.3.seconds -> s0 ;
  H1/logs/gpu-tests-tf.log:@progress -> str
the 8 the first did not reach: 9 passed in 209 s :: H1B/pytest-gpu-tf.xml :: @tests -> less-one ;
  @outcomes -> str ; H1B/logs/gpu-tests-tf.log:@pytest_s -> s0
PyTorch 10 passed, 1 failed, 2 skipped in 36 s; TensorFlow 10 passed, 7 failed, 1 skipped in 300 s.
  :: H2B/pytest-gpu-torch.xml :: @outcomes -> str ; H2B/logs/gpu-tests-torch.log:@pytest_s -> s0 ;
  H2B/pytest-gpu-tf.xml:@outcomes -> str ; H2B/logs/gpu-tests-tf.log:@pytest_s -> s0
down to 2^-7 ... (65,536 at the end of each epoch until it doubled after 2,000 finite ...
  at 8,192 to 16,384 in PyTorch :: LONG.pt :: H2B/pytest-gpu-torch.xml:@scale_floor -> power-of-2 ;
  CUT.tf+CUT.pt+R9.tf+R9.pt+LONG.pt:@never_overflowed -> n ;
  config.loss_scale_growth_interval -> n ; LENET.pt+LENET.pt1:epochs.*.loss_scale -> to-range
"""
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
    return show(spec, values[0] if len(data) == 1 else [v for vs in values for v in vs])


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
