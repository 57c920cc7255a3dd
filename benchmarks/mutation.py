"""Mutation testing of the pure logic: mutmut changes each module a little (an operator, a
constant, a string, a default) and runs the unit tests that reach the change; a mutant no test
notices survives. Runs mutmut as [tool.mutmut] in pyproject.toml sets it up, then scores each
module: killed / (mutants - the survivors listed in EQUIVALENT, each with why no test can
kill it), and fails below MIN_SCORE. Writes DIR/mutation.json and DIR/mutation.md.

    python -m benchmarks.mutation --out benchmarks/results/mutation   # about 5 minutes, 2 cores
    python -m benchmarks.mutation --scores-only --out /tmp/m          # score the last run again
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from compare.machine.cpu import cpu_name

ROOT = Path(__file__).resolve().parent.parent
MIN_SCORE = 0.90
# mutmut's statuses a test caught: a failing test, a mutant that hangs (it never returns, so
# a run of it never passes), a segfault
CAUGHT = {"killed", "timeout", "segfault"}

# Survivors that behave exactly as the original on every input the module accepts: per module,
# by mutmut's name within it as of this commit (a renumbered mutant shows as a new survivor:
# read it with `mutmut show`, then list it here).
FLOAT64 = "astype(None) is astype(float64)"
EQUIVALENT: dict[str, dict[str, str]] = {
    "compare/report/stats.py": {
        "x__clean__mutmut_2": "np.array(floats, dtype=None) is float64",
        "x__clean__mutmut_4": "np.array(floats) is float64",
        "x_paired_difference__mutmut_9": "differences of floats are float64",
        "x_paired_difference__mutmut_11": "differences of floats are float64",
        "x_equivalence_test__mutmut_9": "differences of floats are float64",
        "x_equivalence_test__mutmut_11": "differences of floats are float64",
        "x_equivalence_test__mutmut_111": "p == alpha: a float never lands on it",
        "x_seeds_to_resolve__mutmut_31": "< or <= between two computed floats",
    },
    "compare/report/defaults.py": {
        "x_below_default_mark__mutmut_2": "only TensorFlow/Keras can run below its default "
                                          "(PyTorch's is eager): one item, no separator",
    },
    "compare/report/words.py": {
        "x_loop_ratio__mutmut_49": "rounding 100 x a ratio to 6 or 7 decimals before ceil: the "
                                   "same integer",
    },
    "compare/experiment/plan.py": {
        "x_epoch_plan__mutmut_26": "rng.integers(high) draws as rng.integers(0, high)",
        "x_epoch_plan__mutmut_41": "rng.integers(high) draws as rng.integers(0, high)",
        "x_epoch_plan__mutmut_84": "rng.integers(high) draws as rng.integers(0, high)",
        "x_augment_batch__mutmut_9": "an extra padded image after the batch is never gathered",
    },
    "compare/experiment/weights.py": {
        "x_read_file__mutmut_2": "np.load's allow_pickle is off by default",
        "x_read_file__mutmut_4": "np.load's allow_pickle is off by default",
        "x_chw_to_hwc_rows__mutmut_27": "numpy reads reshape(-2) as reshape(-1)",
        "x_hwc_to_chw_rows__mutmut_27": "numpy reads reshape(-2) as reshape(-1)",
        "x_flatten_input_shape__mutmut_11": "stopping at index 0 or -1 both end on no Flatten",
        "x_flatten_input_shape__mutmut_12": "stopping at index 0 or -1 both end on no Flatten",
        "x_flatten_input_shape__mutmut_16": "in a valid spec a dense layer after no Flatten "
                                            "sees no 3-D map",
    },
    "compare/experiment/parity.py": {name: FLOAT64 for name in (
        "x_relative_differences__mutmut_7", "x_relative_differences__mutmut_13",
        "x_running_stats_in_biased_form__mutmut_29", "x_compare_probes__mutmut_33",
        "x_compare_probes__mutmut_54", "x_compare_probes__mutmut_64",
        "x_compare_probes__mutmut_73")},
    "compare/records.py": {
        "xǁJsonRecordǁto_dict__mutmut_2": "typing.cast does nothing at run time",
    },
    "compare/run/kernels.py": {
        "x_per_step__mutmut_59": "typing.cast does nothing at run time",
    },
    "compare/run/schedule.py": {
        "xǁTimingWindowsǁend_epoch__mutmut_7": "np.median of no values is nan too (with a "
                                                "warning)",
        "xǁTimingWindowsǁend_epoch__mutmut_12": "sizing None or False: both falsy",
        "xǁTimingWindowsǁend_epoch__mutmut_14": "sizing None or False: both falsy",
        "xǁHandoverǁjoin__mutmut_5": "socket.SOCK_STREAM == socket.AF_UNIX == 1 on Linux",
        "xǁHandoverǁjoin__mutmut_6": "SOCK_STREAM is socket.socket's default type",
        "xǁHandoverǁ_wait_for_go__mutmut_4": "the parent sends one GO, then waits for a PASS: "
                                              "recv(2) reads the same byte",
        "xǁHandoverǁ_wait_for_go__mutmut_5": "any answer but GO leaves",
        "xǁHandoverǁ_wait_for_go__mutmut_6": "any answer but GO leaves",
        "xǁScheduleǁ_before_window__mutmut_10": "(a - seed) and (a + seed) have one parity",
        "xǁScheduleǁ_offer_turn__mutmut_11": "> or >= against a bound 1e-9 below the share",
    },
    "compare/experiment/parity_record.py": {
        "x_from_json__mutmut_4": "typing.cast does nothing at run time",
    },
    "compare/report/verdict.py": {
        "x_timing__mutmut_8": "needed starts at 1 or 2: every case found needs at least 2x "
                              "(2 s over under 1 s, or (error / 1%)^2 over 4)",
        "x_timing__mutmut_59": "> or >= between two computed floats",
        "x__spread_sentence__mutmut_18": "< or <= between a computed spread and 0.03",
        "x__spread_sentence__mutmut_33": "< or <= between two computed floats",
        "x__phase_spread_sentence__mutmut_52": "< or <= between two computed floats",
        "x__accuracy_sentence__mutmut_63": "p == 0.001: a float never lands on it",
        "x__accuracy_sentence__mutmut_94": "a mean of exactly 0 reads 'neither' before the sign",
    },
}
RESULT = re.compile(r"^\s*(?P<name>\S+): (?P<status>.+)$")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the scores go")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2,
                        help="mutants run at once [default: the CPU count]")
    parser.add_argument("--scores-only", action="store_true",
                        help="score the mutants/ directory of the last run, run nothing")
    return parser.parse_args()


def mutmut(*args: str) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).with_name("mutmut")
    return subprocess.run([str(binary), *args], cwd=ROOT, capture_output=True, text=True)


def statuses() -> dict[str, str]:
    """Each mutant's status from `mutmut results --all true`."""
    done = mutmut("results", "--all", "true")
    if done.returncode != 0:
        sys.exit(f"mutmut results failed: {done.stderr.strip()[-500:]}")
    return {m["name"]: m["status"] for line in done.stdout.splitlines()
            if (m := RESULT.match(line))}


def split(mutant: str) -> tuple[str, str]:
    """(the module's file, the mutant's name within it) of a mutant named by mutmut."""
    module, name = re.split(r"\.(?=x_|xǁ)", mutant, maxsplit=1)
    return module.replace(".", "/") + ".py", name


def scores(found: dict[str, str]) -> dict[str, dict]:
    modules: dict[str, dict] = {}
    for mutant, status in found.items():
        module, name = split(mutant)
        entry = modules.setdefault(module, {"mutants": 0, "killed": 0, "equivalent": [],
                                            "survived": []})
        entry["mutants"] += 1
        if status in CAUGHT:
            entry["killed"] += 1
        elif name in EQUIVALENT.get(module, {}):
            entry["equivalent"].append(name)
        else:
            entry["survived"].append(f"{module}: {name}: {status}")
    for entry in modules.values():
        judged = entry["mutants"] - len(entry["equivalent"])
        entry["score"] = entry["killed"] / judged if judged else 1.0
    return dict(sorted(modules.items()))


def markdown(modules: dict[str, dict], seconds: float | None) -> str:
    lines = ["| module | mutants | killed | equivalent | survived | score |",
             "|---|---:|---:|---:|---:|---:|"]
    for module, e in modules.items():
        lines.append(f"| `{module}` | {e['mutants']} | {e['killed']} | {len(e['equivalent'])} | "
                     f"{len(e['survived'])} | {100 * e['score']:.1f}% |")
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines += ["", f"`python -m benchmarks.mutation`{took} on {cpu_name()} ({os.cpu_count()} "
              f"CPUs); score = killed / (mutants - equivalent).", ""]
    for module, e in modules.items():
        lines += [f"- {m}" for m in e["survived"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = arguments()
    seconds = None
    if not args.scores_only:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)  # mutate the code as it is now
        began = time.perf_counter()
        done = mutmut("run", "--max-children", str(args.max_children))
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            sys.exit(f"mutmut run failed: {(done.stdout + done.stderr).strip()[-2000:]}")
    modules = scores(statuses())
    if not modules:
        sys.exit("no mutants found: run without --scores-only first")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mutation.json").write_text(json.dumps(
        {"modules": modules, "seconds": seconds, "min_score": MIN_SCORE,
         "measured_by": "python -m benchmarks.mutation"}, indent=2) + "\n")
    table = markdown(modules, seconds)
    (args.out / "mutation.md").write_text(table)
    print(table)
    low = [m for m, e in modules.items() if e["score"] < MIN_SCORE]
    if low:
        sys.exit(f"below {MIN_SCORE:.0%}: {', '.join(low)}")


if __name__ == "__main__":
    main()
