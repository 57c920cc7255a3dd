"""Floors that run one way: each package imports only the floors below it, as a user's request
flows down from the command to the description of the experiment. The order is written once,
in docs/architecture.md's "Floors" list; this test reads it there and checks every import of
compare/, tf_impl/ and torch_impl/ against it, those inside functions included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("compare", "tf_impl", "torch_impl")
ARCHITECTURE = REPO / "docs" / "architecture.md"


def written_floors(text: str) -> list[list[str]]:
    """The "## Floors" section's numbered list, top floor first: each floor's places as
    dotted module prefixes ("compare/run/" -> "compare.run", "compare/schema.py" ->
    "compare.schema")."""
    section = re.search(r"^## Floors\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "docs/architecture.md has no '## Floors' section"
    floors = []
    for line in section.group(1).splitlines():
        if re.match(r"\d+\. ", line):
            places = re.findall(r"`([\w/.]+)`", line.split(":")[0])
            floors.append([p.removesuffix("/").removesuffix(".py").replace("/", ".")
                           for p in places])
    return floors


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES
            for path in sorted((REPO / package).rglob("*.py"))}


def imported(path: Path, source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every import of this repository's modules in `source` (the text of
    `path`), at any depth; `from package import name` counts as package.name where that is a
    module."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found += [(node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
                      for a in node.names]
    return [(line, target) for line, target in found if target.split(".")[0] in PACKAGES]


def holds(place: str, module: str) -> bool:
    """A place holds its modules; "compare.__init__" holds the package module alone."""
    return module in (place, place.removesuffix(".__init__")) or module.startswith(place + ".")


def floor_of(module: str, floors: list[list[str]]) -> int | None:
    """The index of the floor whose longest place holds `module` (0 is the top floor)."""
    matches = [(len(place), index) for index, places in enumerate(floors) for place in places
               if holds(place, module)]
    return max(matches)[1] if matches else None


def place_of(module: str, floors: list[list[str]]) -> str:
    return max((p for places in floors for p in places if holds(p, module)), key=len)


def arrows_against(floors: list[list[str]], planted: dict[Path, str] | None = None) -> list[str]:
    """'file:line: A -> B runs up (floor i imports floor j)' for every import that runs up or
    sideways; `planted`: modules that are not in the tree, with their text, checked as if."""
    sources = {path: path.read_text() for path in modules().values()} | (planted or {})
    known = set(modules()) | {module_name(path) for path in sources}
    wrong = []
    for path, source in sources.items():
        name = module_name(path)
        here = floor_of(name, floors)
        for line, target in imported(path, source, known):
            there = floor_of(target, floors)
            if there is None or place_of(target, floors) == place_of(name, floors):
                continue
            if there <= here:
                direction = "up" if there < here else "sideways"
                wrong.append(f"{path.relative_to(REPO)}:{line}: {place_of(name, floors)} -> "
                             f"{place_of(target, floors)} runs {direction} (floor {here + 1} "
                             f"imports floor {there + 1})")
    return wrong


FLOORS = written_floors(ARCHITECTURE.read_text())


def test_every_module_stands_on_a_written_floor():
    unplaced = [name for name in modules() if floor_of(name, FLOORS) is None]
    assert not unplaced, f"place these in docs/architecture.md's Floors: {unplaced}"
    places = [p for places in FLOORS for p in places]
    assert len(places) == len(set(places)), "a place is written on two floors"
    for place in places:
        path = REPO / place.replace(".", "/")
        assert path.is_dir() or Path(f"{path}.py").is_file(), f"{place} does not exist"


def test_every_import_runs_down_the_written_floors():
    wrong = arrows_against(FLOORS)
    assert not wrong, "imports against the floors of docs/architecture.md:\n" + "\n".join(wrong)


UPWARD = Path("compare", "run", "an_upward_import.py")  # planted in the check, never written
SIDEWAYS = Path("tf_impl", "a_sideways_import.py")


@pytest.mark.parametrize("source, expected", [
    ("from compare.cli import app\n", f"{UPWARD}:1: compare.run -> compare.cli runs up (floor"),
    ("def later():\n    from compare.process import runner\n",
     f"{UPWARD}:2: compare.run -> compare.process runs up (floor"),
    ("from ..report import words\n", f"{UPWARD}:1: compare.run -> compare.report runs up (floor"),
])
def test_an_upward_import_is_named_with_its_file_line_and_arrow(source, expected):
    """The check itself, against a module made to import upwards (also inside a function and
    relatively): it fails naming the file, the line and the arrow."""
    planted = {REPO / UPWARD: source}
    wrong = arrows_against(FLOORS, planted)
    assert [w for w in wrong if w.startswith(expected)], wrong


def test_a_sideways_import_between_twins_is_refused():
    """tf_impl and torch_impl share a floor: neither may import the other."""
    planted = {REPO / SIDEWAYS: "import torch_impl.model\n"}
    floor = floor_of("tf_impl", FLOORS) + 1
    assert (f"{SIDEWAYS}:1: tf_impl -> torch_impl runs sideways (floor "
            f"{floor} imports floor {floor})") in arrows_against(FLOORS, planted)
