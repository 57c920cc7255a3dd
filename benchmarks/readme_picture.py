"""The README's picture: a comparison's report at a glance (its verdict, the headline table
and test accuracy against training time), drawn from the comparison's own summary.json and
result files, as a small PNG.

    python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/cnncompare compare \\
        --dataset synthetic --epochs 2 --seeds 2 --out runs/quickstart      # the quickstart
    .venv/bin/python -m benchmarks.readme_picture --source runs/quickstart --out docs/report.png
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("runs/quickstart"),
                        help="a `cnncompare compare` directory [default: runs/quickstart]")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report.png",
                        help="[default: docs/report.png]")
    return parser.parse_args()


def draw(source: Path, out: Path) -> Path:
    """The picture of the comparison in `source`, written to `out` (PNG)."""
    from compare import files, report, schema
    from compare.report import plots, tables
    summary = schema.read_summary(files.ComparisonDir(source).summary)[0]
    runs = report.load_runs([source / "runs"])
    plots.matplotlib_agg()
    import matplotlib.pyplot as plt
    text = "\n".join(textwrap.fill(s, 135) for s in summary.get("verdict") or [])
    verdict_inches = 0.16 * (text.count("\n") + 1) + 0.45  # 8.8-point lines, and the title
    fig = plt.figure(figsize=(10, verdict_inches + 1.6 + 3.9), dpi=80)
    grid = fig.add_gridspec(3, 3, height_ratios=(verdict_inches, 1.6, 3.9),
                            width_ratios=(0.15, 1, 0.15))
    verdict = fig.add_subplot(grid[0, :])
    verdict.axis("off")
    verdict.text(0, 1, text, va="top", ha="left", fontsize=8.8)
    verdict.set_title(f"cnncompare: {source / 'report.html'}", loc="left", fontsize=10.5,
                      fontweight="bold")
    table_axes = fig.add_subplot(grid[1, :])
    table_axes.axis("off")
    rows = [[r["figure"], r["tf"], r["torch"], r["versus"]]
            for r in tables.verdict_rows(summary, headline=True)
            if (r["tf"], r["torch"]) != ("n/a", "n/a")]
    if rows:
        table = table_axes.table(cellText=rows, colLabels=["Figure", "TensorFlow/Keras",
                                                           "PyTorch", "TF vs PyTorch"],
                                 colWidths=(0.23, 0.29, 0.29, 0.19), loc="upper center",
                                 cellLoc="left")
        table.auto_set_font_size(False)
        table.set_fontsize(7.8)
        table.scale(1, 1.45)
    plots.draw_headline(fig.add_subplot(grid[2, 1]), runs)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def main() -> None:
    args = arguments()
    print(f"wrote {draw(args.source, args.out)}")


if __name__ == "__main__":
    main()
