"""Each framework at its own best (compare --best), as the matched report quotes it: best
against best (the comparison in DIR/best), the settings in which the two best runs differ
(from their manifests), and the advice each framework took, with its source.
"""

from __future__ import annotations

from pathlib import Path

from compare import files, schema
from compare.experiment import best as best_advice
from compare.figures import TRAIN_TIME
from compare.report import defaults, words
from compare.report.labels import plain


def load(directory: Path) -> schema.Summary | None:
    """The best-settings comparison beside the matched one in `directory`, if any."""
    return schema.read_summary_if_any(
        files.ComparisonDir(files.ComparisonDir(directory).best).summary)


def summarise(best: schema.Summary | None) -> dict | None:
    """`time_ratio` (TF / PyTorch, best against best), the completed runs, the manifest
    settings that differ between the two best runs, and the advice each side took."""
    if not best:
        return None
    manifests = best.get("fairness") or {}
    tf, torch = manifests.get("tf") or {}, manifests.get("torch") or {}
    differ = [{"setting": key, "tf": plain(tf.get(key)), "torch": plain(torch.get(key))}
              for key, field in schema.MANIFEST.items()
              if field.comparable and tf.get(key) != torch.get(key)]
    kind = tf.get("device_kind") or torch.get("device_kind") or "cpu"
    return {**defaults.beside(best, "best/report.html"), "settings_differ": differ,
            "advice": best_advice.advice_rows(kind)}


def sentence(summary: schema.Summary) -> str | None:
    """Best against best beside the matched ratio, in one sentence, each in the words its
    interval supports."""
    best = summary.get("best") or {}
    ratio = best.get("time_ratio") or {}
    if ratio.get("ratio") is None:
        return None
    matched = (summary.get("ratios") or {}).get(TRAIN_TIME.key) or {}
    return (f"Each at its own guide's best settings (--best), "
            f"{words.time_ratio(ratio, 'training time')}"
            + ("; matched, " + words.time_ratio(matched, "training time",
                                                 defaults.below_default_mark(summary))
               if matched.get("ratio") else "") + ".")
