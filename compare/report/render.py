"""report.md and report.html: each comparison's sections (compare.report.sections), written
once as Markdown and once as a self-contained HTML page (plots inline, nothing fetched)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compare import files, schema
from compare.experiment.config import FRAMEWORK_NAMES
from compare.report import sections, tables
from compare.report.labels import MACHINE_IDENTITY
from compare.report.sections import Group
from compare.report.verdict import verdict_sentences

if TYPE_CHECKING:  # annotations only
    import jinja2
    import markdown


def data_note(summary: schema.Summary) -> str:
    """What the data was, in one Markdown line; synthetic data is never taken for CIFAR-10."""
    data = summary.get("data")
    if not data:
        return ""
    if data.get("source") == "synthetic":
        return f"Data: **synthetic** generated images ({data.get('origin')}), not CIFAR-10."
    return (f"Data: {data.get('source')} ({data.get('train_size')} train / "
            f"{data.get('test_size')} test images, {data.get('origin')}).")


def title(groups: list[Group]) -> str:
    if len(groups) > 1:
        return (f"cnncompare: {FRAMEWORK_NAMES['tf']} vs {FRAMEWORK_NAMES['torch']} on "
                f"{len(groups)} machines and settings")
    summary = groups[0].summary
    model = (summary.get("model") or {}).get("name", "?")
    source = (summary.get("data") or {}).get("source", "?")
    return f"cnncompare: {model} on {source}, {FRAMEWORK_NAMES['tf']} vs {FRAMEWORK_NAMES['torch']}"


def _context(groups: list[Group]) -> dict[str, Any]:
    shown = []
    for index, g in enumerate(groups):
        shown.append({"index": index, "label": g.label, "source": g.source,
                      "sentences": verdict_sentences(g.summary),
                      "data_note": data_note(g.summary),
                      "sections": sections.of_group(g)})
    overview = [tables.overview_row(g.summary, g.source) for g in groups]
    return {"title": title(groups), "groups": shown, "combined": len(groups) > 1,
            "names": FRAMEWORK_NAMES,
            "overview_columns": OVERVIEW_COLUMNS,
            "overview": [[row[key] for key in OVERVIEW_COLUMNS.values()] for row in overview],
            "machine_identity": MACHINE_IDENTITY,
            "skipped": [[f"`{s['path']}`", s["reason"]] for g in groups
                        for s in g.summary.get("skipped") or []],
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


# The cross-machine table: column -> overview row key (compare.report.tables.overview_row)
OVERVIEW_COLUMNS = {"Machine (device)": "device", "Host": "host", "Precision": "precision",
                    "Model on data": "model", "Seeds": "seeds", "TF training time": "tf_time",
                    "PyTorch training time": "torch_time", "TF / PyTorch time": "time_ratio",
                    "Compile states": "compile",
                    "TF / PyTorch time, each at its defaults": "defaults_ratio",
                    "TF final accuracy": "tf_accuracy",
                    "PyTorch final accuracy": "torch_accuracy", "Source": "source"}


def environment() -> jinja2.Environment:
    import jinja2
    import markdown
    import markupsafe
    env = jinja2.Environment(loader=jinja2.PackageLoader("compare.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                             lstrip_blocks=True)
    # Markdown text (a section's intro and notes) as HTML; its source is the report's own
    # sentences and the results' values, escaped by Markdown's own rules. One converter of
    # each kind, reset between texts: markdown.markdown() builds a new one for every call,
    # hundreds of times a report
    block = markdown.Markdown(extensions=["sane_lists"])
    inline = markdown.Markdown()

    def html(converter: markdown.Markdown, text: str) -> str:
        return converter.reset().convert(
            str(markupsafe.escape(text)).replace("&#34;", '"').replace("&#39;", "'"))
    env.filters["md"] = lambda text: markupsafe.Markup(html(block, text))
    env.filters["inline_md"] = lambda text: markupsafe.Markup(
        html(inline, text)[3:-4])  # without its <p>...</p>
    env.filters["cell"] = lambda value: str(value).replace("|", "\\|").replace("\n", " ")
    return env


def render(groups: list[Group], out_dir: Path) -> list[Path]:
    """report.md and report.html in out_dir: one comparison, or several side by side."""
    env, context = environment(), _context(groups)
    written = []
    for name in files.REPORT_PAGES:
        text = env.get_template(f"{name}.j2").render(**context)
        written.append(files.write_text(Path(out_dir) / name, text))
    return written
