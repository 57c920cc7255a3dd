"""PyTorch's best runs replay CUDA graphs where they pay over the comparison's own length at its
cache state (compare.experiment.best.GraphsRule): the rule on injected epoch times, its trials
planned from the queue, read from their summaries and applied to PyTorch's best runs alone."""

from __future__ import annotations

import pytest
from conftest import tiny_config

from compare import files
from compare.experiment.best import EpochTimes, GraphsRule
from compare.experiment.config import ComparisonConfig
from compare.process import comparison

# The H200's ResNet-9 with torch.compile, 24 epochs: a cold first epoch without graphs and with
# them, then each mode's steady epoch, in seconds (shaped on gpu-h200-rental3's runs)
WITHOUT = EpochTimes(first_s=4.29, steady_s=0.90)
COLD_GRAPHS = EpochTimes(first_s=21.14, steady_s=0.56)
WARM_GRAPHS = EpochTimes(first_s=5.00, steady_s=0.56)


def test_graphs_pay_only_where_the_whole_run_is_shorter_with_them():
    cold = GraphsRule(24, WITHOUT, COLD_GRAPHS, "cold")
    assert not cold.pays  # 21.14 + 23 x 0.56 = 34.0 s against 4.29 + 23 x 0.90 = 25.0 s
    assert cold.break_even_epochs == pytest.approx(1 + (21.14 - 4.29) / 0.34)
    assert GraphsRule(60, WITHOUT, COLD_GRAPHS, "cold").pays  # past the break-even
    warm = GraphsRule(24, WITHOUT, WARM_GRAPHS, "warm")
    assert warm.pays and warm.break_even_epochs == pytest.approx(1 + 0.71 / 0.34)
    slower = GraphsRule(24, WITHOUT, EpochTimes(4.0, 0.95), "warm")
    assert not slower.pays and slower.break_even_epochs is None
    assert warm.words() == (
        "CUDA graphs on in PyTorch's best runs: 24 epochs at 17.9 s with them against 25.0 s "
        "without (first epoch 5.0 s against 4.3 s, then 0.56 s against 0.90 s an epoch; "
        "compile caches warm; repaid from 3.1 epochs)")
    assert cold.to_dict()["pays"] is False and "never" in slower.words()


def _summary(first: float, total: float, epochs: int = 2) -> dict:
    return {"warmup_time_s": first, "train_time_s": total, "epochs_completed": epochs}


def test_the_rule_is_read_from_both_trials_or_graphs_stay_off():
    rule = comparison.graphs_rule(24, "warm", _summary(4.29, 5.19), _summary(5.0, 5.56))
    assert rule == GraphsRule(24, EpochTimes(4.29, pytest.approx(0.90)),
                              EpochTimes(5.0, pytest.approx(0.56)), "warm")
    assert comparison.graphs_rule(24, "cold", _summary(4.29, 5.19), None) is None
    assert comparison.graphs_rule(24, "cold", _summary(4.29, 5.19),
                                  _summary(20.0, 20.0, epochs=1)) is None  # no steady epoch


def test_the_trials_run_pytorchs_best_both_ways_and_the_rule_turns_graphs_on_there_alone(
        tmp_path):
    directory = files.ComparisonDir(tmp_path / "cmp")
    config = tiny_config(tmp_path, epochs=24, compile_cache="warm", compile=True)
    queue = comparison.planned_runs(config, ComparisonConfig(seeds=2, best=True,
                                                             own_loops=False),
                                    directory, False, device_kind="gpu")
    without, with_graphs = comparison.graphs_trials(queue, directory)
    folder = str(directory.path / "compile-cache" / "best-torch")
    assert [(t.config.cuda_graphs, t.config.epochs, t.config.compile_cache_dir)
            for t in (without, with_graphs)] == [(False, 2, folder), (True, 2, f"{folder}-graphs")]
    assert all(t.config.variant == "best" and t.config.framework == "torch"
               and t.config.out.startswith(str(directory.best)) for t in (without, with_graphs))
    ruled = comparison.with_graphs_rule(queue, GraphsRule(24, WITHOUT, WARM_GRAPHS, "warm").pays)
    changed = [(q.config.framework, q.config.variant, q.config.seed, q.config.compile_cache_dir)
               for q, r in zip(queue, ruled) if q.config != r.config]
    assert changed == [("torch", "best", 0, folder), ("torch", "best", 1, folder)]
    assert all(r.config.cuda_graphs and r.config.compile_cache_dir == f"{folder}-graphs"
               for q, r in zip(queue, ruled) if q.config != r.config)
    assert comparison.with_graphs_rule(queue, GraphsRule(24, WITHOUT, COLD_GRAPHS,
                                                         "cold").pays) == queue
    assert comparison._saved_graphs_rule(directory) is False  # no trial yet: graphs off
    directory.best.mkdir(parents=True)
    files.write_json(directory.best / comparison.GRAPHS_RULE, {"pays": True})
    assert comparison._saved_graphs_rule(directory) is True  # a resume keeps the rule
    no_best = comparison.planned_runs(config, ComparisonConfig(own_loops=False), directory,
                                      False, device_kind="gpu")
    assert comparison.graphs_trials(no_best, directory) is None
