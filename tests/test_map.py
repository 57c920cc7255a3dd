"""The map of where to change what, docs/architecture.md's table "Where to change what" (the
README links to it), says exactly where: every file or folder it names exists, and every
name it gives beside them (`KINDS`, `KERAS_LAYERS`...) is defined at the top level of one of
the Python files named in the same clause (a clause: the text up to a semicolon; a folder
stands for its modules). A moved file or a renamed
declaration fails here, naming the row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TICKED = re.compile(r"`([^`]+)`")
REPOSITORY_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?|[\w.-]+/")  # with at least one slash
NAME = re.compile(r"[A-Za-z_]\w*")


def _table() -> list[tuple[str, str]]:
    """docs/architecture.md's rows: (what to change, where)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("\n## Where to change what\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert all(len(cells) == 2 for cells in rows), rows  # past the header and its rule
    return [(f"docs/architecture.md: {what}", where) for what, where in rows]


ENTRIES = _table()


def _clauses(text: str) -> list[tuple[list[str], list[str]]]:
    """Each clause's named paths and names, in backticks."""
    found = []
    for clause in text.split(";"):
        ticked = TICKED.findall(clause)
        found.append(([t for t in ticked if REPOSITORY_PATH.fullmatch(t)],
                      [t for t in ticked if NAME.fullmatch(t)]))
    return found


def _defined(path: Path) -> set[str]:
    """The top-level names a Python file, or the modules of a folder, define (classes,
    functions, assignments; not imports)."""
    modules = [path] if path.is_file() else sorted(path.rglob("*.py"))
    names = set()
    for module in modules:
        if module.suffix != ".py":
            continue
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t)
                             if isinstance(n, ast.Name))
    return names


def test_the_map_has_its_rows_and_items():
    whats = [where for where, _ in ENTRIES]
    assert len(_table()) >= 7, whats
    for where, text in ENTRIES:  # each says where: a path at least
        assert any(paths for paths, _ in _clauses(text)), where


@pytest.mark.parametrize(("where", "text"), ENTRIES, ids=[where for where, _ in ENTRIES])
def test_every_named_path_exists(where, text):
    missing = [path for paths, _ in _clauses(text) for path in paths
               if not (REPO / path).exists()]
    assert missing == [], where


@pytest.mark.parametrize(("where", "text"), ENTRIES, ids=[where for where, _ in ENTRIES])
def test_every_name_beside_a_path_is_defined_there(where, text):
    undefined = []
    for paths, names in _clauses(text):
        defined = set().union(*(_defined(REPO / path) for path in paths
                                if (REPO / path).exists()))
        undefined += [f"{name} (in none of {paths})" for name in names if name not in defined]
    assert undefined == [], where
