"""The cross-machine overview states each framework's compile state beside every TF / PyTorch
ratio, and the ratio with each framework at its own defaults, also for results written before
compile states were recorded (read from their runs' settings by Keras' rule)."""

from __future__ import annotations

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
