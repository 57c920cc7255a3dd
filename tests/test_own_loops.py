"""Each framework's own loop and its own best settings beside the matched runs: the queue
`compare` plans, what the report makes of them, and both end to end on tiny data. (That an
own loop trains the shared loop's very steps is tests/test_frameworks.py's.) And that
Keras' fit traces its step once."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from conftest import patience, tiny_config, trainer_for

from compare import files
from compare.cli import cli
from compare.experiment import best as best_advice
from compare.experiment import datasets
from compare.experiment.config import ComparisonConfig, RunConfig
from compare.process.comparison import planned_runs
from compare.records import OwnLoopRecord, RunSummary, StepTimes
from compare.report import best as best_report
from compare.report import own_loops, sections, stats


def test_own_loops_train_in_their_runs_process_unless_resumed_or_spread(tmp_path):
    """Each run carries its own-loop twin's folder (trained in its process, a window of each
    loop in turn); a resumed comparison, or a run over several devices, queues each twin as
    a process of its own beside its run, taking turns first."""
    directory = files.ComparisonDir(tmp_path)
    twins = {str(directory.own_loop(fw, s).path) for fw in ("tf", "torch") for s in (0, 1)}
    queue = planned_runs(RunConfig(), ComparisonConfig(seeds=2), directory, resume=False)
    assert [(q.config.framework, q.config.seed, q.own_loop) for q in queue] == [
        ("tf", 0, False), ("torch", 0, False), ("torch", 1, False), ("tf", 1, False)]
    assert {q.config.own_loop_beside for q in queue} == twins
    for resume, devices in ((True, 1), (False, 2)):
        queue = planned_runs(RunConfig(devices=devices), ComparisonConfig(seeds=2), directory,
                             resume=resume)
        assert [(q.config.framework, q.config.seed, q.own_loop) for q in queue] == [
            ("tf", 0, False), ("tf", 0, True), ("torch", 0, False), ("torch", 0, True),
            ("torch", 1, True), ("torch", 1, False), ("tf", 1, True), ("tf", 1, False)]
        assert {q.config.out for q in queue if q.own_loop} == twins
        assert not any(q.config.own_loop_beside for q in queue)
    plain = planned_runs(RunConfig(), ComparisonConfig(seeds=2, own_loops=False), directory,
                         resume=False)
    assert not any(q.own_loop or q.config.own_loop_beside for q in plain) and len(plain) == 4


def test_each_framework_profiles_its_first_seed_alone(tmp_path):
    """One phase profile per framework and form (--best's too): the first seed's, whatever
    that seed is; the other seeds train no profile steps (own loops never profile)."""
    directory = files.ComparisonDir(tmp_path)
    queue = planned_runs(RunConfig(seed=7, profile_steps=16),
                         ComparisonConfig(seeds=3, best=True), directory, resume=False)
    runs = [q for q in queue if not q.own_loop]
    profiled = [(q.config.framework, q.config.variant, q.config.seed)
                for q in runs if q.config.profile_steps]
    assert sorted(profiled) == [("tf", "best", 7), ("tf", "matched", 7),
                                ("torch", "best", 7), ("torch", "matched", 7)]
    assert len(runs) == 12 and all(q.config.profile_steps in (0, 16) for q in runs)


def test_best_runs_take_each_frameworks_own_advice(tmp_path):
    directory = files.ComparisonDir(tmp_path)
    queue = planned_runs(RunConfig(pipeline=RunConfig().pipeline.preset("naive")),
                         ComparisonConfig(seeds=1, own_loops=False, best=True), directory,
                         resume=False, device_kind="gpu")
    best = {q.config.framework: q.config for q in queue if q.config.variant == "best"}
    matched = [q.config for q in queue if q.config.variant == "matched"]
    assert len(matched) == 2 and all(not c.compile for c in matched)
    assert best["tf"].compile and best["tf"].precision == "mixed" and best["tf"].tf32
    assert best["torch"].compile and best["torch"].channels_last and best["torch"].tf32
    assert best["tf"].pipeline.kind == best["torch"].pipeline.kind == "tuned"
    assert best["torch"].out == str(files.ComparisonDir(directory.best).run("torch", 0).path)
    for (framework, kind), advice in best_advice.BEST.items():  # each with its source
        assert advice and all(a.source and hasattr(RunConfig(), a.setting) for a in advice)
    cpu = best_advice.best_config(RunConfig(), "torch", "cpu")
    assert cpu.channels_last and cpu.compile and cpu.precision == "auto"


def _ratio(*per_seed: float) -> dict:
    """A paired ratio over seeds 0, 1, ... with these per-seed values, as the summary has it."""
    return stats.paired_ratio(dict(enumerate(per_seed)), {s: 1.0 for s in range(len(per_seed))})


def _summary(tf: tuple, torch: tuple, shared: float = 1.3, own: float = 1.1) -> dict:
    def entry(per_seed):
        ratio = _ratio(*per_seed)
        return {"time_ratio": ratio, "seeds": ratio["seeds"]}
    return {"ratios": {"train_time_s": _ratio(1.5, 1.6)},
            "own_loops": {"tf": entry(tf), "torch": entry(torch), "own_ratio": _ratio(own, own),
                          "shared_ratio": _ratio(shared, shared),
                          "caveat_ratio": own_loops.CAVEAT_RATIO}}


def test_the_verdict_says_how_close_the_shared_loop_ran_in_the_words_its_range_supports():
    close = _summary(tf=(0.99, 1.04), torch=(0.97, 0.99))
    assert own_loops.sentence(close) == (
        "The shared loop ran within 4% of Keras fit (range 0.99x-1.04x over 2 seeds) and 2% "
        "faster than a plain PyTorch loop on the same recipe (training time after the first "
        "epoch, n=2).")
    assert own_loops.caveats(close) == []
    slow = _summary(tf=(1.18, 1.22), torch=(1.0, 1.02))
    assert "20% slower than Keras fit" in own_loops.sentence(slow)
    (caveat,) = own_loops.caveats(slow)
    assert caveat.startswith("the shared loop took 1.20x the time of Keras fit for "
                             "TensorFlow/Keras (range 1.18x-1.22x over 2 seeds)")
    # like for like: both TF / PyTorch ratios of training time after the first epoch
    assert caveat.endswith("(training time after the first epoch, TF / PyTorch: 1.10 each in "
                           "its own loop, against 1.30 in the shared loop)")
    # 1.12 on average, but a range of 0.95-1.33 says nothing: no word, no caveat
    unresolved = _summary(tf=(0.95, 1.33), torch=(1.0, 1.01))
    assert ("1.12x the time of Keras fit, not resolved at n=2 (range 0.95x-1.33x over 2 seeds)"
            in own_loops.sentence(unresolved))
    assert own_loops.caveats(unresolved) == []
    # each framework's seeds, where they differ (a comparison cut short in one framework)
    cut = _summary(tf=(0.95, 0.96, 0.955), torch=(0.996, 0.998))
    assert own_loops.sentence(cut).endswith(
        "(training time after the first epoch, n=3 for TensorFlow/Keras, n=2 for PyTorch).")
    assert "0.3% faster than a plain PyTorch loop" in own_loops.sentence(cut)


def test_a_run_too_short_to_time_raises_no_harness_caveat_and_marks_the_sentence():
    from compare.report import verdict
    slow = _summary(tf=(1.18, 1.22), torch=(1.0, 1.02))
    assert own_loops.caveats(slow)  # 1.18-1.22: past 1.05 when timed long enough

    def steady(seconds):
        return {"steady_train_time_s": {"centre": seconds},
                "steady_step_time_ms": {"centre": 5.0}, "steady_step_time_p90_ms": {"centre": 5.5}}
    short = {**slow, "frameworks": {"tf": steady(0.5), "torch": steady(0.5)}}
    assert not any("shared loop" in c for c in verdict.fairness_caveats(short))
    assert any("shared loop" in c for c in verdict.fairness_caveats(
        {**slow, "frameworks": {"tf": steady(5.0), "torch": steady(5.0)}}))
    said = next(s for s in verdict.verdict_sentences(short) if s.startswith("The shared loop"))
    assert "(training time after the first epoch, too short to time, n=2)" in said


def test_the_own_loop_caveat_compares_the_same_measure_on_both_sides(tmp_path):
    """own_ratio and shared_ratio are both of the epochs after the first, on the same seeds;
    a first epoch ten times the others' does not enter either."""
    def run(framework, seed, epochs):
        return {"framework": framework, "config": {"seed": seed}, "path": str(tmp_path / "r"),
                "summary": RunSummary(status="completed", replicas=1, train_flops_per_image=1,
                                      final_test_accuracy=0.5),
                "epochs": [{"train_time_s": t} for t in epochs]}

    def own(framework, seed, epochs):
        return OwnLoopRecord(schema_version=2, framework=framework, seed=seed,
                             status="completed", config={}, device_used="CPU", loop="x",
                             epoch_times_s=epochs, final_test_accuracy=0.5)
    runs = [run("tf", s, [10.0, 2.2, 2.2]) for s in (0, 1)] + [
        run("torch", s, [1.0, 2.0, 2.0]) for s in (0, 1)]
    records = [own("tf", s, [9.0, 2.0, 2.0]) for s in (0, 1)] + [
        own("torch", s, [1.0, 2.0, 2.0]) for s in (0, 1)]
    found = own_loops.summarise(runs, records)
    assert found["shared_ratio"]["ratio"] == pytest.approx(1.1)  # 4.4 s / 4.0 s
    assert found["own_ratio"]["ratio"] == pytest.approx(1.0)  # 4.0 s / 4.0 s
    assert found["tf"]["time_ratio"]["ratio"] == pytest.approx(1.1)


def test_the_own_loop_ratios_take_the_median_window_step_time_where_every_run_has_one(tmp_path):
    """A burst of other work on the host that doubles one own-loop epoch moves the sums by
    half, the windows' median not at all: the ratios are of the medians, and say so. One
    record written before windows were recorded turns every ratio back to the sums."""
    def run(framework, seed, epochs, step_ms):
        return {"framework": framework, "config": {"seed": seed}, "path": str(tmp_path / "r"),
                "summary": RunSummary(status="completed", replicas=1, train_flops_per_image=1,
                                      final_test_accuracy=0.5,
                                      steady_step_time_ms=StepTimes(median=step_ms)),
                "epochs": [{"train_time_s": t} for t in epochs]}

    def own(framework, seed, epochs, step_ms):
        return OwnLoopRecord(schema_version=2, framework=framework, seed=seed,
                             status="completed", config={}, device_used="CPU", loop="x",
                             epoch_times_s=epochs, final_test_accuracy=0.5,
                             steady_step_time_ms=StepTimes(median=step_ms) if step_ms else None)
    runs = [run("tf", s, [9.0, 2.2, 2.2], 4.4) for s in (0, 1, 2)] + [
        run("torch", s, [1.0, 2.0, 2.0], 4.0) for s in (0, 1, 2)]
    burst = [own("tf", s, [9.0, 2.0, 2.0 + 2.0 * (s == 1)], 4.0) for s in (0, 1, 2)]
    records = burst + [own("torch", s, [1.0, 2.0, 2.0], 4.0) for s in (0, 1, 2)]
    found = own_loops.summarise(runs, records)
    assert found["measure"] == own_loops.STEP_MEASURE
    assert found["tf"]["time_ratio"]["ratio"] == pytest.approx(1.1)  # 4.4 ms / 4.0 ms
    assert found["tf"]["time_ratio"]["high"] == pytest.approx(1.1)  # no spread: no burst
    assert found["shared_ratio"]["ratio"] == pytest.approx(1.1)
    assert found["own_ratio"]["ratio"] == pytest.approx(1.0)
    assert found["tf"]["own_time_s"] == pytest.approx(14 / 3)  # the sums stay in the table
    summary = {"own_loops": found, "ratios": {}}
    assert "(median step time after the first epoch, n=3)" in own_loops.sentence(summary)
    older = own_loops.summarise(runs, [own("tf", 0, [9.0, 2.0, 2.0], None)] + records[1:])
    assert older["measure"] == own_loops.TIME_MEASURE
    assert older["tf"]["time_ratio"]["high"] > 1.1  # seed 1's burst widens the sums' interval


def test_loops_that_took_turns_by_window_are_compared_pair_by_pair(tmp_path):
    """Own loops trained beside their runs a window each in turn carry each pair's step times:
    each seed's shared / own ratio is the median of its pairs' ratios, so a slow spell under
    one pair moves it no more than one pair, where the two loops' medians, each over windows
    the spell fell on unevenly, can differ (seed 1 below: 6.0 against 4.0 by the medians).
    The TF / PyTorch ratios stay on the loops' own medians."""
    def run(framework, seed, step_ms):
        return {"framework": framework, "config": {"seed": seed}, "path": str(tmp_path / "r"),
                "summary": RunSummary(status="completed", replicas=1, train_flops_per_image=1,
                                      final_test_accuracy=0.5,
                                      steady_step_time_ms=StepTimes(median=step_ms)),
                "epochs": [{"train_time_s": 1.0}] * 3}

    def own(framework, seed, step_ms, pairs):
        return OwnLoopRecord(schema_version=2, framework=framework, seed=seed,
                             status="completed", config={}, device_used="CPU", loop="x",
                             epoch_times_s=[1.0] * 3, final_test_accuracy=0.5,
                             steady_step_time_ms=StepTimes(median=step_ms), window_pairs=pairs)
    even = [[4.4, 4.0], [8.8, 8.0], [4.4, 4.0]]  # every pair 1.1
    spell = [[6.6, 6.0], [6.6, 6.0], [4.0, 4.0], [2.2, 2.0], [2.2, 2.0]]  # pairs 1.1, 1, 1.1
    runs = [run(fw, s, 6.0 if s == 1 else 4.4) for fw in ("tf", "torch") for s in (0, 1, 2)]
    records = [own(fw, s, 4.0, spell if s == 1 else even)
               for fw in ("tf", "torch") for s in (0, 1, 2)]
    found = own_loops.summarise(runs, records)
    assert found["measure"] == own_loops.PAIR_MEASURE
    assert found["tf"]["time_ratio"]["ratio"] == pytest.approx(1.1)
    assert found["torch"]["time_ratio"]["high"] == pytest.approx(1.1)  # no spread
    assert found["own_ratio"]["ratio"] == pytest.approx(1.0)  # the own loops' medians
    assert own_loops.pairs_ratio([[2.0, 1.0], [1.0, 2.0], [3.0, 3.0]]) == pytest.approx(1.0)
    one_without = own_loops.summarise(runs, records[:-1] + [own("torch", 2, 4.0, [])])
    assert one_without["measure"] == own_loops.STEP_MEASURE  # one record without pairs
    assert one_without["tf"]["time_ratio"]["ratio"] != pytest.approx(1.1)


def test_a_cost_of_coming_back_cancels_between_the_two_orders_of_the_pairs():
    """The window that comes back to the processor first after something else ran pays for
    it (+15% here); with the order turning pair by pair, the two orders' medians average it
    out, where the median of all nine pairs, five with the shared loop first, keeps it."""
    true, paid = 1.02, 1.15
    own_first = [slot % 2 == 1 for slot in range(9)]
    pairs = [[true * 4.0 * (1 + 0.001 * i) * (1 / paid if first else paid), 4.0]
             for i, first in enumerate(own_first)]
    assert own_loops.pairs_ratio(pairs, own_first) == pytest.approx(true, rel=0.01)
    assert own_loops.pairs_ratio(pairs) == pytest.approx(true * paid, rel=0.01)  # older files
    assert own_loops.pairs_ratio(pairs, [False] * 9) == own_loops.pairs_ratio(pairs)
    record = OwnLoopRecord(2, "tf", 0, "completed", {}, "CPU", window_pairs=pairs,
                           own_first=own_first, steady_step_time_ms=StepTimes(median=4.0))
    run = {"framework": "tf", "config": {"seed": 0}, "path": "r", "epochs": [], "summary":
           RunSummary("completed", 1, 1, steady_step_time_ms=StepTimes(median=4.0))}
    found = own_loops.summarise([run], [record])["tf"]["time_ratio"]["ratio"]
    assert found == pytest.approx(true, rel=0.01)  # as compare's report gives it


def test_the_best_section_lists_the_settings_that_differ_from_the_two_manifests():
    manifest = {"device_kind": "cpu", "compile": False, "channels_last": False,
                "precision": {"precision": "mixed"}}
    best_summary = {"ratios": {"train_time_s": _ratio(0.79, 0.81)}, "frameworks": {},
                    "fairness": {"tf": {**manifest, "compile": True},
                                 "torch": {**manifest, "compile": True, "channels_last": True}}}
    summary = {"best": best_report.summarise(best_summary),
               "ratios": {"train_time_s": _ratio(1.24, 1.26)}}
    assert summary["best"]["settings_differ"] == [
        {"setting": "channels_last", "tf": "False", "torch": "True"}]
    assert best_report.sentence(summary) == (
        "Each at its own guide's best settings (--best), TensorFlow/Keras trained 1.25x faster "
        "than PyTorch (training time, range 1.23x-1.27x over 2 seeds); matched, PyTorch "
        "trained 1.25x faster than TensorFlow/Keras (training time, range 1.24x-1.26x over 2 "
        "seeds).")
    section = sections.best_settings(sections.Group(summary, []))
    assert "channels_last: TensorFlow/Keras False; PyTorch True" in section.intro
    assert {row[1] for row in section.rows} == {"compile", "channels_last", "pipeline"}


@pytest.mark.slow  # a whole comparison with own loops (16-17 s under pytest -n 2)
def test_compare_reports_each_framework_against_its_own_loop(tmp_path):
    out = tmp_path / "cmp"
    done = CliRunner().invoke(cli, ["compare", "--dataset", "synthetic", "--synthetic-size",
                                    "256", "--epochs", "2", "--seeds", "1", "--precision",
                                    "fp32", "--workers", "0", "--device", "cpu", "--out", str(out),
                                    "--quiet"])
    assert done.exit_code == 0, done.output
    summary = json.loads((out / "summary.json").read_text())
    own = summary["own_loops"]
    for framework in ("tf", "torch"):
        entry = own[framework]
        assert entry["seeds"] == [0] and entry["time_ratio"]["ratio"] > 0
        assert entry["own_time_s"] > 0 and 0 <= entry["own_accuracy"] <= 1
        # the same experiment: the first epoch's losses agree (float32, CPU)
        assert entry["loss_difference"] is not None and entry["loss_difference"] < 1e-3
    assert own["torch"]["own_accuracy"] == own["torch"]["shared_accuracy"]
    assert any(s.startswith("The shared loop ran") for s in summary["verdict"])
    # on a CPU each seed's two runs took turns, a window each (compare.process.turns)
    assert summary["side_by_side"] is True
    assert any("side by side, taking turns" in s for s in summary["verdict"])
    assert "The shared loop against each framework's own loop" in (out / "report.md").read_text()
    record = json.loads((out / "own-loops" / "tf-seed0" / "own-loop.json").read_text())
    assert record["status"] == "completed" and record["loop"].startswith("Keras Model.compile")
    # timed in windows as the shared loop times its own, so the ratios are of median steps
    assert sum(w["steps"] for w in record["windows"]) == 2 * record["steps_per_epoch"]
    assert record["steady_step_time_ms"]["median"] > 0
    # trained beside its run a window each in turn: compared pair by pair
    assert record["window_pairs"] and all(s > 0 and o > 0 for s, o in record["window_pairs"])
    assert own["measure"] == own_loops.PAIR_MEASURE


@pytest.mark.slow
def test_compare_best_adds_best_against_best(tmp_path):
    out = tmp_path / "cmp"
    done = CliRunner().invoke(cli, ["compare", "--dataset", "synthetic", "--synthetic-size",
                                    "128", "--epochs", "2", "--seeds", "1", "--best",
                                    "--no-own-loops", "--workers", "0", "--out", str(out),
                                    "--quiet"])
    assert done.exit_code == 0, done.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["own_loops"] is None and not (out / "own-loops").exists()
    assert summary["best"]["completed"] == {"tf": 1, "torch": 1}
    assert summary["best"]["time_ratio"]["ratio"] > 0
    assert any(s.startswith("Each at its own guide's best settings") for s in summary["verdict"])
    best_summary = json.loads((out / "best" / "summary.json").read_text())
    assert best_summary["fairness"]["torch"]["channels_last"] is True
    # the comparison's parity check goes with the best runs, said to be the matched runs'
    assert best_summary["parity"]["passed"] is True
    assert best_summary["parity"]["runs"] == "each framework at its best"
    assert "Each framework at its own best" in (out / "report.md").read_text()
    assert summary["frameworks"]["tf"]["completed"] == 1  # the matched runs stay apart


def test_keras_own_loop_traces_its_step_once(tmp_path, tf_two_cpus):
    """fit traces its step once: the optimizer's variables exist before the first trace (as
    fit makes them under a distribution strategy), so TensorFlow does not trace the step a
    second time to keep variables out of it (about 0.7 s of lenet's first epoch). The loss
    runs in Python only while a step is traced, so its calls count the traces."""
    from compare.experiment.recipe import learning_rate
    from compare.run.own_loop import WindowClock
    from tf_impl import own_loop
    config = tiny_config(tmp_path, epochs=2, steps_per_call=4)
    trainer = trainer_for(tf_two_cpus, config)
    steps = trainer.steps_per_epoch * config.epochs
    lrs = [learning_rate(config, step, steps) for step in range(steps)]
    traced = []
    loss = trainer._loss

    def counted(*args):
        traced.append(1)
        return loss(*args)
    trainer._loss = counted
    clock = WindowClock(config, trainer.steps_per_call, trainer.sync)
    times = [seconds for seconds in own_loop.own_loop(
        trainer, config, datasets.config_dataset(config), lrs, clock, []) if seconds is not None]
    assert len(times) == 2
    # each epoch's windows hold its steps, in whole calls of 4 but the last
    for epoch in (1, 2):
        sizes = [w["steps"] for w in clock.windows if w["epoch"] == epoch]
        assert sum(sizes) == trainer.steps_per_epoch and all(n % 4 == 0 for n in sizes[:-1])
    assert len(traced) == 1, f"fit traced its step {len(traced)} times"


def test_keras_own_loop_lets_go_of_its_iterators_after_the_last_epoch_off_the_main_thread(
        tmp_path, tf_two_cpus):
    """Deleting a tf.data iterator can wait for its autotuning thread (up to a minute), so the
    Keras loop holds each fit call's iterator until its last epoch and deletes them on a
    thread of its own: none is deleted on the main thread, none while an epoch is timed."""
    import threading
    import weakref

    from compare.experiment.recipe import learning_rate
    from compare.run.own_loop import WindowClock
    from tf_impl import own_loop
    config = tiny_config(tmp_path, epochs=3)
    trainer = trainer_for(tf_two_cpus, config)
    steps = trainer.steps_per_epoch * config.epochs
    lrs = [learning_rate(config, step, steps) for step in range(steps)]
    deleted: list[tuple[str, int]] = []  # (the deleting thread, epochs timed by then)
    epochs: list[int] = []
    built = own_loop._KeptIterators.on_train_begin

    def on_train_begin(self, logs=None):
        built(self, logs)
        train = self.model.train_function

        def watched(iterator):
            if not any(ref() is iterator for ref in watched.refs):
                watched.refs.append(weakref.ref(iterator))
                weakref.finalize(iterator, lambda: deleted.append(
                    (threading.current_thread().name, len(epochs))))
            return train(iterator)
        watched.refs = []
        self.model.train_function = watched

    own_loop._KeptIterators.on_train_begin = on_train_begin
    try:
        for seconds in own_loop.own_loop(trainer, config, datasets.config_dataset(config), lrs,
                                         WindowClock(config, trainer.steps_per_call,
                                                     trainer.sync), []):
            if seconds is not None:
                epochs.append(len(epochs))
    finally:
        own_loop._KeptIterators.on_train_begin = built
    deadline = time.monotonic() + patience(10)
    while len(deleted) < config.epochs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(deleted) == config.epochs, deleted  # one iterator an epoch, each let go
    assert all(name == "tf-data-release" and timed == config.epochs
               for name, timed in deleted), deleted

