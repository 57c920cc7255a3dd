"""Each framework at its own defaults in the report: the cross-machine overview states each
framework's compile state beside every TF / PyTorch ratio, and the ratio at each one's
defaults, also for results written before compile states were recorded (read from their runs'
settings by Keras' rule); the defaults comparison gives the matched report its figures and its
sentence."""

from __future__ import annotations

from pathlib import Path

from compare.report import defaults, tables

GPU_EAGER = {"compile": "off", "device_kind": "gpu", "deterministic": False,
             "strategy": {"wrapper": None}}


def _summary(tf: dict, torch: dict, **more) -> dict:
    return {"fairness": {"tf": tf, "torch": torch}, "frameworks": {}, "ratios": {}, **more}


def test_an_older_gpu_result_reads_tensorflow_below_its_default():
    states = defaults.states(_summary(GPU_EAGER, GPU_EAGER))
    assert states["tf"].below_default and not states["tf"].compiled
    assert states["torch"].is_default and not states["torch"].compiled
    assert "predates recorded compile states" in states["tf"].rule
    summary = _summary(GPU_EAGER, GPU_EAGER)
    assert tables.compile_cell(summary) == ("TF without XLA (below default); "
                                            "PyTorch eager (default)")
    assert tables.defaults_cell(summary) == "not run"  # no defaults runs beside it


def test_keras_default_read_from_older_settings_follows_its_rule():
    """Keras keeps XLA off under a strategy, with determinism on, and on a CPU: eager there
    is its default, and both ratios are the same."""
    for tf in ({**GPU_EAGER, "strategy": {"wrapper": "MirroredStrategy"}},
               {**GPU_EAGER, "deterministic": True}, {**GPU_EAGER, "device_kind": "cpu"}):
        summary = _summary(tf, GPU_EAGER)
        assert not defaults.states(summary)["tf"].below_default
        assert tables.compile_cell(summary) == "TF without XLA (default); PyTorch eager (default)"
        assert tables.defaults_cell(summary) == "as matched"
    compiled = _summary({**GPU_EAGER, "compile": "XLA jit_compile (forward+backward)"},
                        {**GPU_EAGER, "compile": "torch.compile"})
    assert tables.compile_cell(compiled) == ("TF with XLA (default); "
                                             "PyTorch with torch.compile (above default)")


def test_a_recorded_state_wins_and_the_defaults_ratio_is_shown():
    recorded = {"framework": "tf", "compiled": True, "default": True, "rule": "r",
                "device_kind": "gpu"}
    summary = _summary({**GPU_EAGER, "compile_state": recorded}, GPU_EAGER,
                       defaults={"time_ratio": {"ratio": 2.374, "low": 2.159, "high": 2.611}})
    assert defaults.states(summary)["tf"].compiled  # not the "off" beside it
    assert tables.defaults_cell(summary) == "2.374x [2.159x, 2.611x]"


def test_what_cannot_be_read_says_so():
    assert tables.compile_cell(_summary({}, {})) == "not recorded"
    assert tables.defaults_cell(_summary({}, {})) == "n/a"
    only_torch = {"fairness": {"torch": GPU_EAGER}, "frameworks": {}, "ratios": {}}
    assert tables.compile_cell(only_torch) == "PyTorch eager (default)"
    assert tables.defaults_cell(only_torch) == "n/a"


def test_an_older_state_keeps_its_device_and_framework_in_its_words():
    state = defaults.states(_summary(GPU_EAGER, GPU_EAGER))["tf"]
    assert (state.framework, state.device_kind) == ("tf", "gpu")
    assert state.phrase() == ("TensorFlow/Keras without XLA, which Keras uses by default on "
                              "this GPU")
    assert defaults.below_default_mark(_summary(GPU_EAGER, GPU_EAGER)) == (
        ", TensorFlow/Keras below its own default: without XLA, which Keras uses by default "
        "on this GPU")
    assert defaults.below_default_mark(_summary({**GPU_EAGER, "device_kind": "cpu"},
                                                GPU_EAGER)) == ""


AT_DEFAULTS = {  # the H100 verdict's defaults comparison, as compare summarises it
    "ratios": {"train_time_s": {"ratio": 2.374, "low": 2.159, "high": 2.611, "n": 3,
                                "interval": "ci95"}},
    "accuracy_difference": {"centre": 0.0005, "n": 3},
    "frameworks": {"tf": {"completed": 3}, "torch": {"completed": 2}},
    "fairness": {"tf": {**GPU_EAGER, "compile": "XLA jit_compile (forward+backward)"},
                 "torch": GPU_EAGER}}


def test_the_defaults_comparison_gives_the_matched_report_its_ratio_and_states():
    assert defaults.summarise(None) is None and defaults.summarise({}) is None
    got = defaults.summarise(AT_DEFAULTS)
    assert got is not None
    assert got["time_ratio"] == AT_DEFAULTS["ratios"]["train_time_s"]
    assert got["accuracy_difference"] == {"centre": 0.0005, "n": 3}
    assert got["completed"] == {"tf": 3, "torch": 2}
    assert got["report"] == "defaults/report.html"
    assert {fw: s["words"] for fw, s in got["compile_states"].items()} == {
        "tf": "TensorFlow/Keras with XLA, Keras' default on this GPU",
        "torch": "PyTorch eager, its default"}
    beside_best = defaults.beside({}, "best/report.html")  # nothing run: every figure absent
    assert beside_best == {"time_ratio": None, "accuracy_difference": None,
                           "completed": {"tf": 0, "torch": 0}, "compile_states": {},
                           "report": "best/report.html"}


def test_the_defaults_sentence_names_each_state_and_the_ratio_in_its_words():
    matched = _summary(GPU_EAGER, GPU_EAGER, defaults=defaults.summarise(AT_DEFAULTS))
    assert defaults.sentence(matched) == (
        "Each framework at its own defaults (TensorFlow/Keras with XLA and PyTorch eager), "
        "PyTorch trained 2.37x faster than TensorFlow/Keras (training time, 95% CI "
        "2.16x-2.61x over 3 seeds).")
    assert defaults.sentence(_summary(GPU_EAGER, GPU_EAGER)) is None  # no defaults runs
    unrun = _summary(GPU_EAGER, GPU_EAGER, defaults={"time_ratio": {"ratio": None}})
    assert defaults.sentence(unrun) is None
    no_states = _summary(GPU_EAGER, GPU_EAGER, defaults={
        "time_ratio": AT_DEFAULTS["ratios"]["train_time_s"]})
    assert defaults.sentence(no_states).startswith("Each framework at its own defaults (), ")


def test_the_defaults_comparison_is_read_from_beside_the_matched_one(tmp_path):
    verdict = Path(__file__).resolve().parents[1] / "benchmarks/results/gpu-h100-resnet9-verdict"
    found = defaults.load(verdict)
    assert found is not None and found["frameworks"]["torch"]["completed"] == 3
    assert defaults.states(found)["torch"].phrase() == "PyTorch eager, its default"
    assert defaults.load(tmp_path) is None
