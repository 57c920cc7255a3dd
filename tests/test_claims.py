"""Every GPU claim of docs/gpu.md has a GPU test that proves it, and each such test quotes its
claim: docs/gpu.md's claims table against the GPU test files, on any machine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPU_TEST_FILES = ("tests/test_gpu.py", "tests/test_gpu_features.py")


def claims() -> dict[str, list[str]]:
    """The claims table's rows, each with the tests it names."""
    text = (REPO / "docs" / "gpu.md").read_text()
    table = text[text.index("| On a GPU | proved by"):].split("\n\n", 1)[0].splitlines()[2:]
    found = {}
    for row in table:
        claim, tests = (cell.strip() for cell in row.strip("|").split("|"))
        found[claim] = re.findall(r"`(test_\w+)`", tests)
    return found


def gpu_tests() -> dict[str, str]:
    """test name -> docstring of every test function in the GPU test files."""
    return {node.name: " ".join((ast.get_docstring(node) or "").split())
            for path in GPU_TEST_FILES for node in ast.parse((REPO / path).read_text()).body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_gpu_claim_has_a_test_that_quotes_it():
    found, tests = claims(), gpu_tests()
    assert len(found) >= 10
    for claim, names in found.items():
        assert names, f"no test named for: {claim}"
        for name in names:
            assert name in tests, f"{name} (for: {claim}) is in no GPU test file"
            assert tests[name].startswith(f"Claim: {claim}"), (name, tests[name][:120])


def test_every_gpu_test_proves_a_claim_and_is_named_for_its_framework():
    named = {name for names in claims().values() for name in names}
    for name in gpu_tests():
        assert name in named, f"{name} proves no claim of docs/gpu.md's table"
        assert name.startswith(("test_torch_", "test_tf_", "test_both_")), name
