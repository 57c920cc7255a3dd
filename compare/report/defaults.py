"""Each framework at its own defaults, as the matched report quotes it: on a GPU, where
Keras' own default compiles with XLA and the matched runs do not (or the reverse with
--compile), `compare` trains the framework whose default differs at it (DIR/defaults, a
comparison of its own, beside the other framework's matched runs, which are its defaults
runs too). Read here: its ratio and each framework's compile state in it.
"""

from __future__ import annotations

from pathlib import Path

from compare import files, schema
from compare.experiment.compile_state import CompileState, framework_default
from compare.experiment.frameworks import FRAMEWORK_NAMES, FRAMEWORKS
from compare.figures import TRAIN_TIME
from compare.report import words

REPORT = "defaults/report.html"  # relative to the matched comparison's directory


def load(directory: Path) -> schema.Summary | None:
    """The defaults comparison beside the matched one in `directory`, if any."""
    return schema.read_summary_if_any(
        files.ComparisonDir(files.ComparisonDir(directory).defaults).summary)


def states(summary: schema.Summary) -> dict[str, CompileState]:
    """Each framework's compile state in a comparison, from its runs' manifests; results
    written before the states were recorded give theirs from the manifest's compile setting,
    device kind, distribution wrapper and determinism, by the same rule (compile_state)."""
    found = {}
    for fw, manifest in (summary.get("fairness") or {}).items():
        record = (manifest or {}).get("compile_state")
        if isinstance(record, dict):
            found[fw] = CompileState.from_dict(record)
        elif (state := _from_older_manifest(fw, manifest or {})) is not None:
            found[fw] = state
    return found


def _from_older_manifest(framework: str, manifest: dict) -> CompileState | None:
    compiled, kind = manifest.get("compile"), manifest.get("device_kind")
    if not isinstance(compiled, str) or kind not in ("gpu", "cpu"):
        return None
    wrapper = (manifest.get("strategy") or {}).get("wrapper")
    default = framework_default(framework, kind, wrapped=wrapper is not None,
                                deterministic=bool(manifest.get("deterministic")))
    return CompileState(framework, compiled != "off", default.compiled,
                        f"{default.rule} (read from the run's settings: its result predates "
                        f"recorded compile states)", kind)


def summarise(defaults: schema.Summary | None) -> dict | None:
    """`time_ratio` (TF / PyTorch, each at its own defaults), the accuracy difference, the
    completed runs and each framework's compile state there."""
    return beside(defaults, REPORT) if defaults else None


def beside(comparison: schema.Summary, report: str) -> dict:
    """What a comparison run beside the matched one (each framework at its defaults, or at
    its best) gives the matched report: `time_ratio` (TF / PyTorch), the accuracy
    difference, the completed runs, each framework's compile state there, and its `report`."""
    return {"time_ratio": (comparison.get("ratios") or {}).get(TRAIN_TIME.key),
            "accuracy_difference": comparison.get("accuracy_difference"),
            "completed": {fw: (comparison.get("frameworks") or {}).get(fw, {}).get("completed", 0)
                          for fw in FRAMEWORKS},
            "compile_states": {fw: s.to_dict() for fw, s in states(comparison).items()},
            "report": report}


def states_phrase(compile_states: dict[str, CompileState]) -> str:
    """'TensorFlow/Keras with XLA and PyTorch eager' (the states alone)."""
    return " and ".join(compile_states[fw].state_words() for fw in FRAMEWORKS
                        if fw in compile_states)


def below_default(summary: schema.Summary) -> list[CompileState]:
    """The frameworks of this comparison that ran below their own default (eager where the
    framework itself would compile)."""
    return [s for s in states(summary).values() if s.below_default]


def below_default_mark(summary: schema.Summary) -> str:
    """', TensorFlow/Keras below its own default: without XLA, which Keras uses by default on
    this GPU' for each framework of this comparison that ran eager where it would compile by
    default: every TF/PyTorch ratio of such a comparison carries it."""
    return "".join(f", {FRAMEWORK_NAMES[s.framework]} below its own default: "
                   f"{s.how()}{s.default_words()}" for s in below_default(summary))


def sentence(summary: schema.Summary) -> str | None:
    """The ratio with each framework at its own defaults, beside the matched one, each in the
    words its interval supports; None without a defaults comparison."""
    defaults = summary.get("defaults") or {}
    ratio = defaults.get("time_ratio") or {}
    if ratio.get("ratio") is None:
        return None
    at = {fw: CompileState.from_dict(r) for fw, r in (defaults.get("compile_states") or
                                                         {}).items()}
    return (f"Each framework at its own defaults ({states_phrase(at)}), "
            f"{words.time_ratio(ratio, 'training time')}.")
