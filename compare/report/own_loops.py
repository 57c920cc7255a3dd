"""The shared loop against each framework's own loop (compare.run.own_loop): is the harness
handicapping a framework? Per framework, the shared loop's median step time over its own
loop's on the same seeds (both over the synchronised windows after the first epoch), both
final accuracies, and how closely their first epoch's losses agree; the verdict's sentence
and, past CAVEAT_RATIO, its caveat.

The median of the windows, not the sum of the epochs: on a busy host a burst of other work
lands in one window or two and moves a sum by all of its length, while the median moves
little, so the ratio tells the loops apart rather than the bursts each happened to meet.
Own-loop files written before the windows were recorded give the training time after the
first epoch instead, and the sentences say which measure they use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from compare import files, schema
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS
from compare.records import OwnLoopRecord
from compare.report import stats, words
from compare.report.labels import seed_of
from compare.run.own_loop import APART, running_means, steady_seconds

# shared / own training time above this: the shared loop may be handicapping that
# framework, and the TF/PyTorch ratio may be partly the harness's
CAVEAT_RATIO = 1.05
OWN_LOOP_NAMES = {"tf": "Keras fit", "torch": "a plain PyTorch loop"}
# the measure of every ratio here, in the words the sentences use
STEP_MEASURE = "median step time after the first epoch"
TIME_MEASURE = "training time after the first epoch"
# the loops trained a window each in turn: each seed's ratio comes from its pairs (pairs_ratio)
PAIR_MEASURE = "step time in adjacent windows after the first epoch, pair by pair"


def load(directories: list[Path]) -> list[OwnLoopRecord]:
    """The own-loop records of these comparison directories (unreadable ones left out)."""
    records = []
    for directory in directories:
        for path in sorted(files.ComparisonDir(directory).own_loops.glob(f"*/{files.OWN_LOOP}")):
            try:
                records.append(schema.read_own_loop(path))
            except schema.SchemaError:
                continue
    return records


def summarise(runs: list[schema.Result], records: list[OwnLoopRecord]) -> dict | None:
    """Per framework: `time_ratio` (shared / own on `measure`, paired by seed),
    `throughput_ratio` (its inverse), both loops' training time after the first epoch and
    mean final accuracies, the first epoch's largest relative loss difference, and the loop;
    `own_ratio`: TF / PyTorch with each in its own loop, `shared_ratio` the same in the shared
    loop, on the same measure and seeds. The measure is STEP_MEASURE where every run and own
    loop recorded its windows, else TIME_MEASURE. None without a completed own loop."""
    completed = [r for r in records if r.status == "completed"]
    if not completed:
        return None
    shared_runs = {fw: {seed: r for r in runs if r["framework"] == fw
                        and r["summary"].status == "completed"
                        and (seed := seed_of(r)) is not None} for fw in FRAMEWORKS}
    own_runs = {fw: {r.seed: r for r in completed if r.framework == fw}
                for fw in FRAMEWORKS}
    by_step = all(_own_step_ms(r) is not None for r in completed) and all(
        _shared_step_ms(r) is not None for shared in shared_runs.values()
        for r in shared.values())
    shared_figure, own_figure = ((_shared_step_ms, _own_step_ms) if by_step
                                 else (_shared_steady_s, _own_steady_s))
    by_pairs = by_step and all(r.window_pairs for r in completed)
    summary: dict = {"caveat_ratio": CAVEAT_RATIO,
                     "measure": PAIR_MEASURE if by_pairs else
                     STEP_MEASURE if by_step else TIME_MEASURE}
    own_values: dict[str, dict[int, float]] = {}
    shared_values: dict[str, dict[int, float]] = {}
    for framework in FRAMEWORKS:
        own, shared = own_runs[framework], shared_runs[framework]
        own_values[framework] = {s: v for s, r in own.items() if (v := own_figure(r))}
        shared_values[framework] = {s: v for s, r in shared.items() if (v := shared_figure(r))}
        if by_pairs:
            ratio = stats.seed_ratios({s: pairs_ratio(r.window_pairs, r.own_first)
                                       for s, r in own.items()
                                       if s in shared}, "shared/own loop")
        else:
            ratio = stats.paired_ratio(shared_values[framework], own_values[framework],
                                       "shared/own loop")
        seeds = ratio["seeds"]
        summary[framework] = {
            "loop": next((r.loop for r in own.values()), None),
            # where they trained (compare.run.own_loop: APART, BESIDE); "" in older records
            "trained": sorted({r.trained or APART for r in own.values()}),
            "own_runs": len(own), "seeds": seeds,
            "time_ratio": ratio,
            "throughput_ratio": 1 / ratio["ratio"] if ratio["ratio"] else None,
            "shared_time_s": _mean([_shared_steady_s(shared[s]) for s in seeds]),
            "own_time_s": _mean([_own_steady_s(own[s]) for s in seeds]),
            "shared_accuracy": _mean([shared[s]["summary"].final_test_accuracy
                                      for s in seeds]),
            "own_accuracy": _mean([own[s].final_test_accuracy for s in seeds]),
            "loss_difference": _max([_loss_difference(shared[s], own[s]) for s in seeds]),
        }
    # TF / PyTorch with each in its own loop, and in the shared loop on the same measure and
    # the same seeds, so the two compare like for like
    summary["own_ratio"] = stats.paired_ratio(own_values["tf"], own_values["torch"])
    seeds = set(summary["own_ratio"]["seeds"])
    tf_shared, torch_shared = ({s: t for s, t in shared_values[fw].items() if s in seeds}
                               for fw in FRAMEWORKS)
    summary["shared_ratio"] = stats.paired_ratio(tf_shared, torch_shared)
    return summary


def pairs_ratio(window_pairs: list[list[float]], own_first: list[bool] | None = None) -> float:
    """Shared / own from [shared, own] step times of adjacent windows: the median of the
    pairs' log ratios, exponentiated. Each pair met the same moment of the host, so a slow
    spell divides out, where it moves a median of either loop's windows alone.

    With `own_first` (which window of each pair came first) holding both orders, the mean of
    the two orders' medians: the window that comes back to the processor after something
    else ran pays for it (caches, thread pools waking), and that cost, the same whichever
    loop pays it, cancels between a pair where the shared loop pays and one where the own
    loop does, instead of splitting the pairs into two groups the median falls between."""
    logs = np.log([shared / own for shared, own in window_pairs])
    if own_first and len(own_first) == len(logs) and 0 < sum(own_first) < len(logs):
        first = np.array(own_first, dtype=bool)
        return float(np.exp((np.median(logs[first]) + np.median(logs[~first])) / 2))
    return float(np.exp(np.median(logs)))


def _shared_step_ms(run: schema.Result) -> float | None:
    return run["summary"].steady_step_time_ms.median


def _own_step_ms(record: OwnLoopRecord) -> float | None:
    return record.steady_step_time_ms.median if record.steady_step_time_ms else None


def _shared_steady_s(run: schema.Result) -> float:
    return steady_seconds(schema.epoch_seconds(run))


def _own_steady_s(record: OwnLoopRecord) -> float:
    return steady_seconds(record.epoch_times_s)


def measure(summary: schema.Summary) -> str:
    """The measure of the own-loop ratios in `summary` (older summaries: TIME_MEASURE)."""
    return (summary.get("own_loops") or {}).get("measure") or TIME_MEASURE


def sentence(summary: schema.Summary, mark: str = "") -> str | None:
    """One verdict sentence: how close the shared loop ran to each framework's own, in the
    words the per-seed interval (or range) supports; `mark` follows its measure (e.g. ", too
    short to time")."""
    own = summary.get("own_loops") or {}
    parts = [p for fw in FRAMEWORKS if (p := words.loop_ratio(
        (own.get(fw) or {}).get("time_ratio") or {}, OWN_LOOP_NAMES[fw], CAVEAT_RATIO))]
    if not parts:
        return None
    seeds = {fw: len((own.get(fw) or {}).get("seeds") or []) for fw in FRAMEWORKS
             if ((own.get(fw) or {}).get("time_ratio") or {}).get("ratio") is not None}
    n = (f"n={next(iter(seeds.values()))}" if len(set(seeds.values())) == 1 else
         ", ".join(f"n={count} for {FRAMEWORK_NAMES[fw]}" for fw, count in seeds.items()))
    return (f"The shared loop ran {' and '.join(parts)} on the same recipe "
            f"({measure(summary)}{mark}, {n}).")


def caveats(summary: schema.Summary) -> list[str]:
    """A caveat for each framework the shared loop slowed past CAVEAT_RATIO, its interval (or
    range) wholly above it, with what it could explain: the TF/PyTorch ratio with each
    framework in its own loop against the same ratio in the shared loop, both on the own
    loops' measure and the same seeds."""
    own = summary.get("own_loops") or {}
    found = []
    for framework in FRAMEWORKS:
        ratio = (own.get(framework) or {}).get("time_ratio") or {}
        if stats.side(ratio, CAVEAT_RATIO) == 1:
            found.append(f"the shared loop took {ratio['ratio']:.2f}x the time of "
                         f"{OWN_LOOP_NAMES[framework]} for {FRAMEWORK_NAMES[framework]} "
                         f"({words.spread(ratio)})")
    shared = (own.get("shared_ratio") or {}).get("ratio")
    each_own = (own.get("own_ratio") or {}).get("ratio")
    if found and shared and each_own:
        found[-1] += (f", so up to that much of the TF/PyTorch ratio may be the harness's "
                      f"({measure(summary)}, TF / PyTorch: {each_own:.2f} "
                      f"each in its own loop, against {shared:.2f} in the shared loop)")
    return found


def _loss_difference(run: schema.Result, record: OwnLoopRecord) -> float | None:
    """The largest relative difference between the own loop's running mean losses in the
    first epoch and the shared loop's at the same steps (from its steps.csv)."""
    steps = files.read_csv(files.RunDir(Path(run["path"]).parent).steps)
    pairs = record.mean_losses
    if not steps or not pairs:
        return None
    losses = steps["loss"][steps["epoch"] == 1].tolist()
    counts = [int(s) for s, _ in pairs if int(s) <= len(losses)]
    if not counts:
        return None
    shared = running_means(losses, counts)
    return max(abs(own - ref) / max(abs(ref), 1e-12)
               for (_, own), ref in zip(pairs, shared))


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _max(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None
