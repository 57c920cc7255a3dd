"""The shape of the code: the two framework packages mirror each other, and compare/ stays
framework-neutral. These fail on drift, before a reader has to find it."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience

from compare.run import interface

REPO = Path(__file__).resolve().parent.parent
MIRRORED_MODULES = ("model", "data", "device", "optimizer", "train", "manifest", "scalars",
                    "profile", "own_loop", "port")


def _public(module) -> dict[str, object]:
    """Public functions and classes defined in `module` itself (not imported into it)."""
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module.__name__}


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", MIRRORED_MODULES)
def test_both_packages_expose_the_same_functions_with_the_same_parameters(name, tf_two_cpus):
    import importlib
    tf_module = importlib.import_module(f"tf_impl.{name}")
    torch_module = importlib.import_module(f"torch_impl.{name}")
    tf_public, torch_public = _public(tf_module), _public(torch_module)
    tf_functions = {n for n, v in tf_public.items() if inspect.isfunction(v)}
    torch_functions = {n for n, v in torch_public.items() if inspect.isfunction(v)}
    assert tf_functions == torch_functions
    for function in sorted(tf_functions):
        assert _parameters(tf_public[function]) == _parameters(torch_public[function]), function
    # Classes that exist in both have the same public methods with the same parameters.
    for cls in sorted(set(tf_public) & set(torch_public) - tf_functions):
        tf_methods = {m for m in vars(tf_public[cls]) if not m.startswith("_")}
        torch_methods = {m for m in vars(torch_public[cls]) if not m.startswith("_")}
        assert tf_methods == torch_methods, cls
        for method in sorted(["__init__", *tf_methods]):
            a, b = getattr(tf_public[cls], method), getattr(torch_public[cls], method)
            if callable(a) and callable(b):
                assert _parameters(a) == _parameters(b), f"{cls}.{method}"


def test_the_public_functions_come_in_the_same_order(tf_two_cpus):
    """So that `diff` of a tf_impl module against its torch_impl twin lines up the twins."""
    for name in MIRRORED_MODULES:
        orders = []
        for package in ("tf_impl", "torch_impl"):
            tree = ast.parse((REPO / package / f"{name}.py").read_text())
            orders.append([n.name for n in tree.body
                           if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                           and not n.name.startswith("_")])
        common = set(orders[0]) & set(orders[1])
        assert [n for n in orders[0] if n in common] == [n for n in orders[1] if n in common], name


def test_both_train_modules_satisfy_the_framework_protocols(tf_two_cpus):
    from torch_impl import train as torch_train
    assert interface.check_module(tf_two_cpus) == []
    assert interface.check_module(torch_train) == []
    for module in (tf_two_cpus, torch_train):
        assert _parameters(module.Trainer.__init__) == ["self", "config", "dataset", "choice"]


def test_a_module_missing_a_method_is_named():
    import types

    class Incomplete:
        def batches(self, epoch):
            return iter(())

    module = types.ModuleType("fake_impl.train")
    module.FRAMEWORK, module.Trainer = "fake", Incomplete
    missing = interface.check_module(module)
    assert "fake_impl.train.select_device" in missing
    assert "fake_impl.train.Trainer.train_step" in missing
    assert "fake_impl.train.Trainer.batches" not in missing


def test_compare_never_imports_a_framework():
    """compare/ is framework-neutral: importing all of it loads neither TensorFlow nor torch."""
    modules = sorted(".".join(p.relative_to(REPO).with_suffix("").parts)
                     for p in (REPO / "compare").rglob("*.py") if p.stem != "__main__")
    code = ("import sys\n"
            + "".join(f"import {m}\n" for m in modules)
            + "print(sorted(m for m in ('tensorflow', 'torch', 'keras', 'torchvision') "
              "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_lines_fit_in_100_columns_and_blank_runs_stay_short():
    offenders = []
    for path in [*REPO.glob("compare/**/*.py"), *REPO.glob("tf_impl/*.py"),
                 *REPO.glob("torch_impl/*.py"), *REPO.glob("tests/*.py"),
                 *REPO.glob("benchmarks/*.py"), *REPO.glob("benchmarks/research/*.py"),
                 *REPO.glob("tests/research/*.py")]:
        blank_run = 0
        for number, line in enumerate(path.read_text().splitlines(), 1):
            blank_run = blank_run + 1 if not line.strip() else 0
            if len(line) > 100 or blank_run > 2:
                offenders.append(f"{path.relative_to(REPO)}:{number}")
    assert offenders == []


def _shapes(path: Path) -> list[tuple[int, str]]:
    """The file's code lines as shapes: names, one-line strings and numbers replaced by
    placeholders (keywords kept), the lines of a longer string (a docstring) as written;
    blank, comment-only, import and lone-punctuation lines left out. Each with its line
    number."""
    import keyword
    import tokenize
    lines: dict[int, list[str]] = {}
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            if token.type == tokenize.NAME:
                text = token.string if keyword.iskeyword(token.string) else "N"
            elif token.type == tokenize.STRING and token.start[0] != token.end[0]:
                for number, text in enumerate(token.string.splitlines(), token.start[0]):
                    lines.setdefault(number, []).append(text.strip())  # prose, word for word
                continue
            elif token.type in (tokenize.STRING, getattr(tokenize, "FSTRING_START", None)):
                text = "S"  # (Python 3.12 tokenises inside f-strings: their names count)
            elif token.type == tokenize.NUMBER:
                text = "0"
            elif token.type == tokenize.OP:
                text = token.string
            else:
                continue
            lines.setdefault(token.start[0], []).append(text)
    shapes = []
    for number, words in sorted(lines.items()):
        if words[0] in ("import", "from") or not any(w.isalnum() for w in words):
            continue
        shapes.append((number, " ".join(words)))
    return shapes


def test_no_block_of_six_lines_repeats_between_the_twins():
    """What the two framework packages share belongs in compare/: no run of 6 code lines is
    alike (up to names, strings and numbers) in tf_impl/ and torch_impl/."""
    run = 6

    def windows(package: str) -> dict[tuple[str, ...], str]:
        found = {}
        for path in sorted((REPO / package).glob("*.py")):
            shapes = _shapes(path)
            for i in range(len(shapes) - run + 1):
                block = tuple(shape for _, shape in shapes[i:i + run])
                found.setdefault(block, f"{package}/{path.name}:{shapes[i][0]}")
        return found

    tf_blocks, torch_blocks = windows("tf_impl"), windows("torch_impl")
    assert [f"{tf_blocks[b]} ~ {torch_blocks[b]}" for b in tf_blocks if b in torch_blocks] == []


def test_every_named_compare_module_exists():
    """Code, docs and templates that name a `compare.…` module, function or constant name
    one that exists (a module moved without its mentions leaves a stale map)."""
    import importlib
    import re
    files = [REPO / name for name in subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.j2"], cwd=REPO, capture_output=True, text=True,
        check=True).stdout.split()]
    stale = set()
    for path in files:
        if not path.exists():
            continue
        for ref in set(re.findall(r"\bcompare(?:\.[a-z_0-9]+)+", path.read_text())):
            if ref == "compare.json":  # a file the tool writes, not a module
                continue
            parts = ref.split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    found = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                for attribute in parts[cut:]:
                    found = getattr(found, attribute, None)
                if found is None:
                    stale.add(f"{path.relative_to(REPO)}: {ref}")
                break
    assert sorted(stale) == [], "\n".join(sorted(stale))


def test_every_named_repository_path_exists():
    """README, docs, code and templates that name a file of this repository
    (`compare/run/loop.py`, `benchmarks/setting_ab.py`, `docs/commands.md`...) name one that
    exists: a moved file leaves no stale pointer."""
    import re
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.split())
    folders = {str(Path(name).parent) for name in tracked}
    pattern = re.compile(r"(?<![\w./-])((?:compare|tf_impl|torch_impl|benchmarks|tests|docs)"
                         r"(?:/[\w.-]+)*/?)")
    stale = set()
    for name in tracked:
        if not name.endswith((".py", ".md", ".j2", ".toml")) \
                or name.startswith("benchmarks/results/"):
            continue
        for ref in pattern.findall((REPO / name).read_text()):
            ref = ref.rstrip("./")
            if "/" not in ref:  # a bare word: `compare`, `tests`
                continue
            if ref not in tracked and ref not in folders and not (REPO / ref).exists():
                stale.add(f"{name}: {ref}")
    assert sorted(stale) == [], "\n".join(sorted(stale))


PACKAGES = ("compare", "tf_impl", "torch_impl", "tests", "benchmarks", "examples")


def test_every_module_says_its_job_in_its_first_line():
    """A module holds one job and says which in its docstring's first line, so a reader sees
    it before the code and a second job shows as a second sentence to write: split the module
    by job then, not by a line count (a count invites moving code to meet it). Every
    package's, the tests' and the benchmarks' included."""
    import ast
    silent = [str(path.relative_to(REPO)) for package in PACKAGES
              for path in (REPO / package).rglob("*.py")
              if not (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n")[0].strip()]
    assert silent == []


def test_framework_processes_find_the_repository_first():
    """A framework subprocess gets the repository root (compare, tf_impl, torch_impl) at the
    head of its PYTHONPATH, so the checkout runs without being installed."""
    import os

    from compare.process import runner
    first = Path(runner.child_environment()["PYTHONPATH"].split(os.pathsep)[0])
    assert all((first / package / "__init__.py").exists()
               for package in ("compare", "tf_impl", "torch_impl"))


def test_both_own_loop_modules_satisfy_their_protocol(tf_two_cpus):
    """compare.run.own_loop finds `<package>.own_loop` with the members OwnLoopModule names."""
    import importlib

    from compare.run import interface
    members = [n for n in vars(interface.OwnLoopModule) if not n.startswith("_")]
    members += list(interface.OwnLoopModule.__annotations__)
    for package in ("tf_impl", "torch_impl"):
        module = importlib.import_module(f"{package}.own_loop")
        assert [m for m in members if not hasattr(module, m)] == [], package
        assert isinstance(module.LOOP, str) and module.LOOP


def test_both_port_modules_satisfy_their_protocol(tf_two_cpus):
    """compare.run.port_worker finds `<package>.port` with the members PortModule names."""
    import importlib

    from compare.run import interface
    members = [n for n in vars(interface.PortModule) if not n.startswith("_")]
    members += list(interface.PortModule.__annotations__)
    assert {"load", "read", "outputs", "framework_model", "SOURCE_KIND"} <= set(members)
    for package in ("tf_impl", "torch_impl"):
        module = importlib.import_module(f"{package}.port")
        assert [m for m in members if not hasattr(module, m)] == [], package


def test_every_quoted_figure_names_the_script_and_file_that_hold_it():
    """README and docs (research pages included) quote a measured figure beside "`<a script in
    benchmarks>` → `FILE`": the script exists, the file is in the repository and names the
    script (its command: `python -m benchmarks.NAME`, or the path to its file as older results
    were run), and every figure of three decimals in that paragraph is in the file."""
    import re
    marker = re.compile(r"`(benchmarks/[\w/]+\.py)` →\s+`(benchmarks/results/[\w./-]+)`")
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "docs" / "research").glob("*.md"))]
    found = 0
    for page in pages:
        for paragraph in page.read_text().split("\n\n"):
            sources = marker.findall(paragraph)
            for script, output in sources:
                found += 1
                assert (REPO / script).exists(), (page.name, script)
                text = (REPO / output).read_text()
                module = script.removesuffix(".py").replace("/", ".")
                # the research scripts ran as benchmarks.NAME before they moved under research/
                ran_as = {module, module.replace(".research.", ".")}
                assert script in text or any(f"-m {name}" in text for name in ran_as), (
                    page.name, output, "does not name", script)
            if sources:
                held = " ".join((REPO / output).read_text() for _, output in sources)
                for figure in re.findall(r"(?<![\d.])\d+\.\d{3}(?!\d)", paragraph):
                    assert figure in held, (page.name, figure, [o for _, o in sources])
    assert found >= 6  # the README's and docs/benchmarks.md's


def test_every_benchmark_script_runs_by_its_path_as_docs_name_it():
    """Each script in benchmarks/ runs by its path with --help, as docs/benchmarks.md and
    the results' commands write it, from outside the checkout: the benchmarks package is
    found."""
    scripts = [path for path in sorted((REPO / "benchmarks").glob("*.py"))
               + sorted((REPO / "benchmarks" / "research").glob("*.py"))
               if 'if __name__ == "__main__":' in path.read_text()]
    assert len(scripts) > 10
    for script in scripts:
        done = subprocess.run([sys.executable, str(script), "--help"], cwd="/",
                              capture_output=True, text=True, timeout=patience(60))
        assert done.returncode == 0 and "usage" in done.stdout, (script.name, done.stderr[-500:])
