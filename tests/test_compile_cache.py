"""Both compilers start alike (compare.run.compile_cache): each run's compile caches cold (a
folder of its own, empty, removed after) or warm (filled by an untimed run), what each
framework's compilers found there recorded per run, the state in the manifest and the
verdict's words, and `compare`'s untimed warm-up; in the heavy tier, XLA and torch.compile on
the CPU finding their caches warm and missing them cold, in a run and in a comparison."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import tiny_config
from report_runs import fake_result

from compare import files
from compare.cli import cli
from compare.experiment.config import ComparisonConfig
from compare.experiment.datasets.cache import home
from compare.process import comparison
from compare.report import verdict
from compare.run import compile_cache


def test_a_folders_entries_show_what_was_saved_and_what_was_read(tmp_path):
    """Entries there at the start, entries written since (new or rewritten: compiled afresh),
    entries of the start read since (where the filesystem shows reads)."""
    for name in ("a", "b", "sub/c"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"program")
    before = compile_cache.entries(tmp_path)
    assert sorted(before.modified) == ["a", "b", "sub/c"]
    (tmp_path / "a").read_bytes()  # a hit: read, not written
    (tmp_path / "b").write_bytes(b"compiled again")  # a miss: rewritten
    os.utime(tmp_path / "b", ns=(1, before.modified["b"] + 10**9))
    (tmp_path / "d").write_bytes(b"new program")  # a miss: new
    found = compile_cache.found(before)
    assert found["entries_found"] == 3 and found["entries_saved"] == 2
    assert found["entries_read"] == (1 if before.reads_show else None)
    assert not list(tmp_path.glob(".read-probe-*"))  # the probe leaves nothing behind
    nothing = compile_cache.found(compile_cache.entries(tmp_path / "none"))
    assert nothing == {"entries_found": 0, "entries_saved": 0, "entries_read": 0}


class _Framework:
    """A framework's module as compile_cache sees it: the variable its compilers read."""

    @staticmethod
    def compile_cache_environment(directory: Path, gpu: bool) -> dict[str, str]:
        return {"CNNCOMPARE_TEST_CACHE": str(directory / "compiler")}


def test_a_cold_run_gets_an_empty_folder_of_its_own_and_a_warm_one_keeps_its(tmp_path,
                                                                             monkeypatch):
    monkeypatch.delenv("CNNCOMPARE_TEST_CACHE", raising=False)
    config = tiny_config(tmp_path, framework="torch")
    with compile_cache.in_place(_Framework, config) as cold:
        assert os.environ["CNNCOMPARE_TEST_CACHE"] == str(cold / "compiler")
        assert cold.is_dir() and not any(cold.iterdir())
        (cold / "compiler").mkdir()
    assert not cold.exists()  # removed: the next cold run starts empty too
    assert "CNNCOMPARE_TEST_CACHE" not in os.environ  # the environment as it was
    with compile_cache.in_place(_Framework, config.replace(compile_cache="warm")) as warm:
        (warm / "entry").write_text("kept")
    assert warm == home() / "compile-cache" / "torch" and (warm / "entry").exists()
    named = config.replace(compile_cache="warm", compile_cache_dir=str(tmp_path / "filled"))
    with compile_cache.in_place(_Framework, named) as folder:
        assert folder == tmp_path / "filled"
    assert compile_cache.warm_folder(config) is None


def test_a_warm_comparison_warms_each_cache_folder_once_untimed(tmp_path):
    """One warm-up per framework and form of run that compiles, for one epoch, its own loop
    beside it, out of the report's reach; a cold or uncompiled comparison has none."""
    directory = files.ComparisonDir(tmp_path / "cmp")
    config = tiny_config(tmp_path, compile=True, compile_cache="warm", epochs=3)
    plan = comparison.planned_runs(config, ComparisonConfig(seeds=2), directory, False)
    folders = {q.config.framework: q.config.compile_cache_dir for q in plan}
    assert folders == {fw: str(directory.path / "compile-cache" / f"matched-{fw}")
                       for fw in ("tf", "torch")}
    warm = comparison.warm_ups(plan, directory)
    assert [(q.config.framework, q.config.epochs, q.config.seed) for q in warm] == [
        ("tf", 1, 0), ("torch", 1, 0)]
    for queued in warm:
        assert queued.config.out == str(directory.path / "warm-up" /
                                        f"matched-{queued.config.framework}")
        assert queued.config.own_loop_beside == f"{queued.config.out}/own-loop"
        assert queued.config.compile_cache_dir == folders[queued.config.framework]
    filled = Path(folders["tf"])  # a resumed comparison's: only the empty folder is warmed
    filled.mkdir(parents=True)
    (filled / "xla").mkdir()
    assert len(comparison.warm_ups(plan, directory)) == 2  # an empty folder holds nothing yet
    (filled / "xla" / "program.pb").write_bytes(b"compiled")
    assert len(comparison.warm_ups(plan, directory)) == 2  # its warm-up did not complete
    warmed = directory.warm_up / "matched-tf" / "result.json"
    files.write_json(warmed, fake_result("tf", 0, 1.0, 0.5))
    assert [q.config.framework for q in comparison.warm_ups(plan, directory)] == ["torch"]
    trial = directory.graphs_trial / "with-graphs" / "result.json"
    files.write_json(trial, fake_result("torch", 0, 1.0, 0.5))
    timed = directory.run("tf", 0).result
    timed.parent.mkdir(parents=True)
    timed.write_text("{}")
    assert files.results_under(directory.path) == [timed]  # no report reads the untimed
    cold = comparison.planned_runs(config.replace(compile_cache="cold"), ComparisonConfig(),
                                   directory, False)
    assert {q.config.compile_cache_dir for q in cold} == {None}
    assert comparison.warm_ups(cold, directory) == []
    eager = comparison.planned_runs(config.replace(compile=False), ComparisonConfig(),
                                    directory, False)
    assert comparison.warm_ups(eager, directory) == []


def _run(tmp_path: Path, framework: str, name: str, cache: str) -> dict:
    """A compiled run of `framework` on tiny synthetic data with its caches `cache`."""
    out = tmp_path / name
    outcome = CliRunner().invoke(cli, [
        "run", "--framework", framework, "--model", "lenet", "--dataset", "synthetic",
        "--synthetic-size", "256", "--epochs", "1", "--batch-size", "32", "--compile",
        "--compile-cache", cache, "--precision", "fp32", "--device", "cpu", "--quiet",
        "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    return json.loads((out / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_a_warm_run_finds_what_the_last_one_compiled_and_a_cold_one_nothing(tmp_path,
                                                                           framework):
    """XLA and torch.compile on the CPU: the first warm run compiles and saves; the second
    reads it back (hits recorded, nothing compiled afresh; torch.compile's own compile
    seconds fall); a cold run starts from nothing again and leaves nothing behind."""
    first, second = (_run(tmp_path, framework, name, "warm") for name in ("first", "second"))
    cold = _run(tmp_path, framework, "cold", "cold")
    found = [r["compilation"]["cache"] for r in (first, second, cold)]
    assert [r["fairness"]["compile_cache"] for r in (first, second, cold)] == [
        "warm", "warm", "cold"]
    assert found[0]["entries_found"] == 0 and found[0]["misses"] >= 1
    assert found[1]["entries_found"] >= 1 and found[1]["misses"] == 0
    assert found[1]["entries_saved"] == 0 and found[1]["hits"] >= 1
    assert found[2]["entries_found"] == 0 and found[2]["misses"] >= 1 and found[2]["hits"] == 0
    if framework == "torch":  # dynamo times its own compiling; XLA reports none
        assert found[1]["compile_s"] < found[0]["compile_s"] / 2
    else:
        assert found[0]["compile_s"] is None


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_a_compiled_comparison_records_both_caches_and_its_verdict_says_which(tmp_path, cache):
    """`compare --compile` on the CPU: every run's manifest says the state, each compiler's
    record what it found (warm: the untimed warm-up's programs read back, nothing compiled
    afresh), and the verdict's start-up words name it for both."""
    out = tmp_path / "cmp"
    outcome = CliRunner().invoke(cli, [
        "compare", "--model", "lenet", "--dataset", "synthetic", "--synthetic-size", "256",
        "--epochs", "2", "--seeds", "1", "--batch-size", "32", "--compile",
        "--compile-cache", cache, "--precision", "fp32", "--device", "cpu", "--no-own-loops",
        "--quiet", "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads((out / "summary.json").read_text())
    assert verdict.compile_caches_phrase(summary) == f"; both compilers' caches {cache}"
    for framework in ("tf", "torch"):  # the first epoch split alike for both
        assert summary["frameworks"][framework]["startup_overhead_s"]["centre"] > 0
        result = json.loads((out / "runs" / f"{framework}-seed0" / "result.json").read_text())
        found = result["compilation"]["cache"]
        assert result["fairness"]["compile_cache"] == cache
        if cache == "warm":
            assert found["hits"] >= 1 and found["misses"] == 0, (framework, found)
            assert (out / "warm-up" / f"matched-{framework}" / "result.json").exists()
        else:
            assert found["entries_found"] == 0 and found["misses"] >= 1, (framework, found)
            assert not (out / "warm-up").exists()
    assert "compilers' caches started in different states" not in (out / "report.md").read_text()
