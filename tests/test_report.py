"""Reports rendered from fixture results: figures, verdict, unreadable files, several machines
(the page in a headless browser: test_report_browser.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from report_runs import H100, LAPTOP_CPU, PASSED, Collector, fake_result, three_seeds, write_runs

from compare import files, report
from compare.process import runner


def test_report_figures_match_summary_json(tmp_path):
    three_seeds(tmp_path)
    paths = report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    tf = summary["frameworks"]["tf"]
    assert tf["train_time_s"]["centre"] == pytest.approx((10 * 12 * 11) ** (1 / 3))
    assert tf["train_time_s"]["n"] == 3 and tf["train_time_s"]["interval"] == "ci95"
    assert 0 < tf["train_time_s"]["low"] < 10 and 12 < tf["train_time_s"]["high"]
    assert "log" in tf["train_time_s"]["method"]
    assert "binomial" in tf["final_test_accuracy"]["method"]
    assert 0 < tf["final_test_accuracy"]["low"] < 0.61 < tf["final_test_accuracy"]["high"] < 1
    time_ratio = summary["ratios"]["train_time_s"]["ratio"]
    assert time_ratio == pytest.approx((10 * 12 * 11 / 8 ** 3) ** (1 / 3))
    assert summary["accuracy_difference"]["mean"] == pytest.approx(0.03)
    assert summary["accuracy_equivalence"]["equivalent"] is False
    assert len(summary["runs"]) == 4 + 2 and summary["skipped"] == []
    assert summary["machine"]["device"] == "CPU" and "glibc2.36" in summary["machine"]["host"]
    markdown = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    for row in report.verdict_rows(summary):  # every figure in the page is the summary's
        for page in (markdown, html):
            assert row["tf"] in page and row["torch"] in page
    assert "10.97 s [" in markdown and "3 seeds per framework: brackets hold the 95% interval" \
        in markdown and "+3.00 pts" in markdown
    assert "1.371x" in markdown and "log" in markdown
    assert "synthetic" in markdown and "not CIFAR-10" in markdown
    assert [p.name for p in paths] == ["summary.json", "report.md", "report.html"]


def test_the_verdict_names_the_faster_framework_and_the_accuracy_outcome(tmp_path):
    three_seeds(tmp_path)
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    sentences = summary["verdict"]
    assert sentences == report.verdict_sentences(summary)
    assert sentences[0].startswith("PyTorch trained 1.37x faster than TensorFlow/Keras")
    assert "95% CI" in sentences[0]
    assert "not shown equivalent within +-0.5 points" in sentences[1]
    assert "TensorFlow/Keras scored 3.00 points higher" in sentences[1]
    assert "Measured on CPU" in sentences[2] and "precision fp32" in sentences[2]
    assert sentences[3].startswith("No fairness caveat")
    markdown = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert markdown.index(sentences[0]) < markdown.index("Side by side")  # the page opens with it
    assert html.index("PyTorch trained 1.37x faster") < html.index("Side by side")


def test_the_verdict_declares_equal_accuracy_equivalent_and_tf_faster(tmp_path):
    three_seeds(tmp_path, tf_times=(5.0, 5.5, 5.2), tf_accuracy=(0.58, 0.58, 0.58))
    summary = report.summarise(report.load_runs([tmp_path]), PASSED, None)
    speed, accuracy = report.verdict_sentences(summary)[:2]
    assert speed.startswith("TensorFlow/Keras trained 1.53x faster than PyTorch")
    assert accuracy.startswith("Final test accuracy is equivalent within +-0.5 points")


def test_the_verdict_states_caveats_and_too_few_seeds(tmp_path):
    write_runs(tmp_path, [fake_result("tf", 0, 10.0, 0.6), fake_result("torch", 0, 8.0, 0.58),
                          fake_result("torch", 1, 8.0, 0.58, status="failed", epochs=0,
                                      error="boom")])
    runs = report.load_runs([tmp_path])
    runs[0]["fairness"]["device_kind"] = "gpu"  # tf on a GPU, PyTorch on the CPU
    summary = report.summarise(runs, {"passed": False, "steps": 3}, None)
    sentences = report.verdict_sentences(summary)
    assert sentences[0].startswith("Training time: TF / PyTorch 1.25 from one seed, which "
                                   "cannot tell a difference from run-to-run noise")
    assert "faster" not in sentences[0] and "slower" not in sentences[0]
    assert sentences[1].startswith("Not enough seeds to test equivalence")
    caveat = sentences[-1]
    assert "parity check FAILED and was ignored" in caveat
    assert "different device kinds" in caveat and "PyTorch seed 1 failed" in caveat


def _verdict(tmp_path, tf_times, torch_times, epochs=4):
    write_runs(tmp_path, [fake_result(fw, seed, t, 0.6, epochs=epochs)
                          for fw, times in (("tf", tf_times), ("torch", torch_times))
                          for seed, t in enumerate(times)])
    return report.verdict_sentences(report.summarise(report.load_runs([tmp_path]), PASSED, None))


@pytest.mark.parametrize("tf_times, torch_times, says", [
    # both seeds have PyTorch faster: the range supports the word
    ((12.0, 12.2), (10.0, 10.0), "PyTorch trained 1.21x faster than TensorFlow/Keras "
                                 "(training time, range 1.20x-1.22x over 2 seeds)."),
    # TF / PyTorch 0.95 and 1.33: the range holds no difference, so no comparative word
    ((10.0, 13.3), (10.5, 10.0), "Training time is not resolved at n=2: TF / PyTorch 1.13 "
                                 "(range 0.95x-1.33x over 2 seeds, which includes no "
                                 "difference); about 18 seeds would resolve"),
    # three seeds whose 95% interval holds 1.00
    ((10.0, 12.0, 9.0), (10.0, 10.0, 10.0), "Training time is not resolved at n=3: TF / "
                                            "PyTorch 1.03 (95% CI"),
    ((10.0, 10.4, 10.2), (8.0, 8.1, 8.0), "PyTorch trained 1.27x faster than TensorFlow/Keras "
                                          "(training time, 95% CI"),
])
def test_comparative_words_follow_the_interval(tmp_path, tf_times, torch_times, says):
    speed = _verdict(tmp_path, tf_times, torch_times)[0]
    assert speed.startswith(says), speed
    resolved = "faster" in says
    assert (" faster " in speed) == resolved and " slower " not in speed


def test_start_up_and_steady_are_told_apart_when_the_first_epoch_is_over_a_third(tmp_path):
    """The fixture's first epoch is a share 1/epochs of the training time."""
    two = _verdict(tmp_path / "two", (12.0, 12.2), (10.0, 10.0), epochs=2)[0]
    assert "The first epoch (tracing, compilation, warm-up) is over a third of the training " \
           "time (TensorFlow/Keras 50%, PyTorch 50%)" in two
    assert "start-up, PyTorch trained 1.21x faster than TensorFlow/Keras (first epoch" in two
    assert "steady training, PyTorch trained 1.21x faster than TensorFlow/Keras (epochs " \
           "after the first" in two
    assert two.endswith("The headline is training time, first epoch included.")
    four = _verdict(tmp_path / "four", (12.0, 12.2), (10.0, 10.0), epochs=4)[0]
    assert "first epoch" not in four


def test_a_run_too_short_to_time_says_so_first_and_marks_its_ratios(tmp_path):
    """1.0 s of training in 2 epochs: 0.5 s of steady training, under the 1-s threshold."""
    sentences = _verdict(tmp_path / "short", (1.0, 1.01), (0.8, 0.8), epochs=2)
    assert sentences[0].startswith("Too short to time: steady training (the epochs after the "
                                   "first, per seed): TensorFlow/Keras 0.50 s, under 1 s; "
                                   "PyTorch 0.40 s, under 1 s.")
    assert "About --epochs 6 on the same data would time enough." in sentences[0]
    assert "(training time, too short to time, range" in sentences[1]
    long_enough = _verdict(tmp_path / "long", (10.0, 10.1), (8.0, 8.0), epochs=2)
    assert not any("too short" in s.lower() for s in long_enough)


def test_two_seeds_show_a_range_not_a_t_interval(tmp_path):
    write_runs(tmp_path, [fake_result("tf", 0, 1.0, 0.97), fake_result("tf", 1, 3.0, 0.99),
                          fake_result("torch", 0, 2.0, 0.96), fake_result("torch", 1, 2.0, 0.98)])
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    tf_time = summary["frameworks"]["tf"]["train_time_s"]
    assert (tf_time["low"], tf_time["high"], tf_time["interval"]) == (1.0, 3.0, "range")
    markdown = (tmp_path / "report.md").read_text()
    assert "| 1.73 s [1.00 s, 3.00 s] |" in markdown  # what brackets are: said once
    assert "| 0.9800 [0.9700, 0.9900] |" in markdown
    assert markdown.count("brackets hold the min-max range") == 1
    assert "(n=2: range)" not in markdown
    assert "n=2: range (min-max over the seeds" in markdown  # named under how measured
    assert summary["accuracy_equivalence"]["equivalent"] is not None  # TOST runs from n=2


def test_a_failed_framework_renders_and_the_other_is_still_reported(tmp_path):
    write_runs(tmp_path, [fake_result("tf", 0, 10.0, 0.6, status="failed", epochs=0,
                                      error="out of device memory at --batch-size 512; "
                                            "try --batch-size 256"),
                          fake_result("torch", 0, 8.0, 0.58)])
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["frameworks"]["tf"]["completed"] == 0
    assert summary["frameworks"]["torch"]["completed"] == 1
    assert summary["frameworks"]["tf"]["train_time_s"]["centre"] is None
    assert summary["ratios"]["train_time_s"]["ratio"] is None
    html = (tmp_path / "report.html").read_text()
    assert "failed" in html and "try --batch-size 256" in html
    assert "8.00 s" in html  # PyTorch's figures are still there
    assert summary["verdict"][0] == "Nothing to compare: no seed completed in both frameworks."
    assert "TensorFlow/Keras seed 0 failed" in summary["verdict"][-1]


def test_html_parses_and_references_nothing_external(tmp_path):
    three_seeds(tmp_path)
    report.rebuild(tmp_path, [tmp_path])
    html = (tmp_path / "report.html").read_text()
    collector = Collector()
    collector.feed(html)
    collector.close()
    assert collector.external == []
    # the headline (accuracy against time), curves, step times, time breakdown: inline
    assert collector.tags.count("svg") == 4
    assert "training loss per step" in html and "6 windows" in html
    assert not re.search(r"url\((?!#)", html)  # only in-page references: clip-path="url(#id)"
    assert "@import" not in html and "<!DOCTYPE svg" not in html
    for start, end in (("<html", "</html>"), ("<body", "</body>"), ("<table", "</table>")):
        assert html.count(start) == html.count(end)


def test_window_step_times_are_per_step_ms_of_the_later_epochs(tmp_path):
    write_runs(tmp_path, [fake_result("torch", 0, 8.0, 0.58)])
    run = report.load_runs([tmp_path])[0]
    assert report.window_step_ms(run) == pytest.approx([8.0, 8.8])  # epoch 2 only
    smoothed = report.smooth(report.read_csv(Path(run["path"]).parent / "steps.csv")["loss"], 10)
    assert smoothed[0] == pytest.approx(2.3) and smoothed[-1] > 2.3 / (1 + 0.1 * 19)


def test_report_without_results_is_a_clear_error(tmp_path):
    from compare.errors import UserError
    with pytest.raises(UserError, match="no readable result"):
        report.rebuild(tmp_path, [tmp_path])


def _cli_report(*args: str):
    from compare.cli import cli
    return CliRunner().invoke(cli, ["report", *args])


def test_a_torn_result_alone_is_named_and_exits_non_zero(tmp_path):
    torn = tmp_path / "runs" / "tf-seed0" / "result.json"
    torn.parent.mkdir(parents=True)
    torn.write_text('{"framework": "tf", "summ')
    outcome = _cli_report(str(tmp_path))
    assert outcome.exit_code != 0
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no readable result")
    assert str(torn) in lines[0] and "not valid JSON (torn?)" in lines[0]
    assert not (tmp_path / "report.html").exists()


def test_unreadable_results_are_listed_apart_in_the_report_and_on_stderr(tmp_path):
    three_seeds(tmp_path)
    torn = tmp_path / "runs" / "tf-seed7" / "result.json"
    torn.parent.mkdir(parents=True)
    torn.write_text('{"framework": "tf", "summ')
    future = fake_result("torch", 8, 8.0, 0.58)
    future["schema_version"] = 99
    files.write_json(tmp_path / "runs" / "torch-seed8" / "result.json", future)
    lacking = fake_result("torch", 9, 8.0, 0.58)
    del lacking["summary"]["status"]
    files.write_json(tmp_path / "runs" / "torch-seed9" / "result.json", lacking)
    outcome = _cli_report(str(tmp_path))
    assert outcome.exit_code == 0, outcome.output
    assert "skipped" in outcome.stderr and str(torn) in outcome.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    reasons = {Path(s["path"]).parent.name: s["reason"] for s in summary["skipped"]}
    assert set(reasons) == {"tf-seed7", "torch-seed8", "torch-seed9"}
    assert "not valid JSON" in reasons["tf-seed7"] and "schema version 99" in reasons["torch-seed8"]
    assert "summary lacks status" in reasons["torch-seed9"]
    assert {r["seed"] for r in summary["runs"]} == {0, 1, 2}  # not counted as runs
    assert "3 result file(s) could not be read" in summary["verdict"][-1]
    html = (tmp_path / "report.html").read_text()
    assert "Result files that could not be read" in html and "schema version 99" in html


def test_two_machines_stay_apart_and_a_shipped_summary_reads_beside_runs(tmp_path):
    h100, laptop = tmp_path / "h100", tmp_path / "laptop"
    three_seeds(h100, tf_times=(1.0, 1.1, 1.05), torch_times=(0.5, 0.5, 0.55), environment=H100)
    three_seeds(laptop, environment=LAPTOP_CPU)
    report.rebuild(h100, [h100])  # the H100's own summary.json, as it would be shipped
    shipped = tmp_path / "benchmarks" / "h100" / "summary.json"
    shipped.parent.mkdir(parents=True)
    shutil.copy(h100 / "summary.json", shipped)
    shutil.rmtree(h100)

    outcome = _cli_report(str(shipped), str(laptop))
    assert outcome.exit_code == 0, outcome.output
    combined = json.loads((laptop / files.COMBINED).read_text())  # first directory given
    assert "groups" not in json.loads((laptop / "summary.json").read_text())  # one comparison
    devices = [g["machine"]["device"] for g in combined["groups"]]
    assert sorted(devices) == ["CPU", "GPU: NVIDIA H100 80GB HBM3"]
    by_device = {g["machine"]["device"]: g for g in combined["groups"]}
    gpu_time = by_device["GPU: NVIDIA H100 80GB HBM3"]["frameworks"]["tf"]["train_time_s"]
    cpu_time = by_device["CPU"]["frameworks"]["tf"]["train_time_s"]
    assert gpu_time["centre"] == pytest.approx((1.0 * 1.1 * 1.05) ** (1 / 3))  # not averaged
    assert cpu_time["centre"] == pytest.approx((10 * 12 * 11) ** (1 / 3)) and cpu_time["n"] == 3
    markdown = (laptop / "report.md").read_text()
    assert "A machine is the device" in markdown
    assert markdown.count("Measured on ") == 2  # a verdict per machine
    assert "GPU: NVIDIA H100 80GB HBM3" in markdown and "glibc2.36" in markdown
    html = (laptop / "report.html").read_text()
    assert html.count("<svg") == 4  # the headline and 3 plots of the machine with runs; no plots
    # for the summary


def test_runs_of_two_machines_in_one_directory_are_split_and_out_is_honoured(tmp_path):
    three_seeds(tmp_path / "a", environment=H100)
    three_seeds(tmp_path / "b", environment=LAPTOP_CPU)
    built = report.build([tmp_path], tmp_path / "both")
    assert len(built.groups) == 2 and {g.summary["frameworks"]["tf"]["completed"]
                                       for g in built.groups} == {3}
    assert (tmp_path / "both" / files.COMBINED).exists()
    assert (tmp_path / "both" / "report.html").exists()


def test_multi_machine_gpu_runs_of_both_frameworks_form_one_comparison(tmp_path):
    """Each framework words its device its own way ("worker 0 of 2 on 2 machine(s)" against
    "on 2 machines"); the hardware both record alike puts the two into one comparison."""
    platform = "Linux-6.8-x86_64-with-glibc2.39"
    hardware = {"device_kind": "gpu", "device_model": "NVIDIA H100 80GB HBM3",
                "device_count": 8, "nodes": 2, "label": "GPU: 8x NVIDIA H100 80GB HBM3"}
    tf_env = {"device_used": "GPU: " + ", ".join(["NVIDIA H100 80GB HBM3"] * 4)
                             + ", worker 0 of 2 on 2 machine(s)",
              "platform": platform, "hardware": hardware}
    torch_env = {"device_used": "GPU: " + ", ".join(["NVIDIA H100 80GB HBM3"] * 8)
                                + " on 2 machines", "platform": platform, "hardware": hardware}
    write_runs(tmp_path / "tf-run", [fake_result("tf", 0, 10.0, 0.6, environment=tf_env)])
    write_runs(tmp_path / "torch-run", [fake_result("torch", 0, 8.0, 0.6,
                                                    environment=torch_env)])
    built = report.build([tmp_path / "tf-run", tmp_path / "torch-run"], tmp_path / "both")
    assert len(built.groups) == 1
    summary = built.groups[0].summary
    assert summary["machine"]["device"] == "GPU: 8x NVIDIA H100 80GB HBM3"
    assert summary["ratios"]["train_time_s"]["ratio"] == pytest.approx(10.0 / 8.0)
    # results written before the hardware record group by the same words
    from compare.machine import devices
    assert devices.label_of({"device_used": tf_env["device_used"]}) == \
        "GPU: 4x NVIDIA H100 80GB HBM3"
    assert devices.hardware("gpu", "NVIDIA H100 80GB HBM3", 1, 1)["label"] == \
        "GPU: NVIDIA H100 80GB HBM3"
    assert devices.hardware("cpu", None, 2, 1)["label"] == "CPU"
    # devices carved from one GPU (--share-device) group apart from as many GPUs
    shared = devices.hardware("gpu", "NVIDIA H100 80GB HBM3", 2, 1, shared_chip=True)
    assert shared["label"] == "GPU: NVIDIA H100 80GB HBM3 shared by 2 devices"
    assert shared["shared_chip"] and shared["device_count"] == 2


def test_devices_carved_from_one_board_are_sampled_once():
    """NVML samples a board once however many logical GPUs or processes share it (its energy
    would otherwise count twice); without NVML the CUDA ordinals stand in."""
    from compare.machine import gpu_metrics
    assert gpu_metrics.nvml_indices(["", ""], ("cuda:0", "cuda:0")) == [0]
    assert gpu_metrics.nvml_indices(["", ""], ("cuda:0", "cuda:1")) == [0, 1]


def test_a_rerun_with_fewer_completed_runs_never_overwrites_the_fuller_report(tmp_path):
    """`compare` again into the same directory, failing early: the earlier report stays."""
    import json

    from compare import report
    out = tmp_path / "cmp"
    out.mkdir()
    fuller = {"runs": [{"framework": fw, "seed": 0, "status": "completed"}
                       for fw in ("tf", "torch")], "marker": "earlier"}
    (out / "summary.json").write_text(json.dumps(fuller))
    (out / "report.md").write_text("earlier report\n")
    report.write(out, [], None, "cnncompare compare (rerun)",
                 [{"framework": "tf", "seed": 0, "reason": "parity check failed"}])
    kept = list((out / "earlier").glob("*/summary.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["marker"] == "earlier"
    assert (kept[0].parent / "report.md").read_text() == "earlier report\n"
    assert "marker" not in json.loads((out / "summary.json").read_text())  # the new one
    report.write(out, [], None, "cnncompare compare (again)")  # 0 vs 0: overwritten in place
    assert len(list((out / "earlier").glob("*/summary.json"))) == 1


def test_the_command_line_loads_the_report_libraries_only_when_asked():
    """Starting cnncompare imports none of the report's libraries (about 2 s of imports on
    a 2-core Xeon); preload(background=True) imports every one of them, matplotlib on Agg,
    from a thread at the lowest CPU priority, leaving the calling process's own as it was."""
    code = ("import os, sys, threading\n"
            "import compare.cli.app\n"
            "from compare.report.builder import REPORT_IMPORTS\n"
            "before = [m for m in REPORT_IMPORTS if m in sys.modules]\n"
            "from compare import report\n"
            "nice = []\n"
            "def load():\n"
            "    report.preload(background=True)\n"
            "    nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))\n"
            "thread = threading.Thread(target=load)\n"
            "thread.start(); thread.join()\n"
            "import matplotlib\n"
            "print(before, [m for m in REPORT_IMPORTS if m not in sys.modules], nice,\n"
            "      os.getpriority(os.PRIO_PROCESS, 0), matplotlib.get_backend().lower())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.split() == ["[]", "[]", "[19]", str(os.getpriority(os.PRIO_PROCESS, 0)),
                                  "agg"]


def test_a_report_library_that_fails_to_import_is_left_to_the_report_to_say(monkeypatch):
    """compare's background preload swallows an import that fails (a thread's traceback
    would reach the terminal raw); the report's own import raises it, in the command's error
    handling."""
    from compare.report import builder
    monkeypatch.setattr(builder, "REPORT_IMPORTS", ("json", "no_such_report_library"))
    # on a thread of its own, as compare runs it: the thread keeps its lowest priority
    raised = runner.concurrently([lambda: builder.preload(background=True)])
    assert raised == [None]
    with pytest.raises(ImportError, match="no_such_report_library"):
        builder.preload()
