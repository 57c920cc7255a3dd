"""The verdict (compare.report.verdict): every sentence a reader sees, word for word, computed
from summaries written here with known figures; each branch of each sentence once."""

from __future__ import annotations

import pytest

from compare.experiment.compile_state import CompileState
from compare.report import stats, verdict


def _figure(centre: float | None) -> dict:
    return {"centre": centre}


def _framework(train: float, warmup: float, step_ms: float = 10.0, p90_ms: float = 10.5,
               pipelines: tuple[str, ...] = ("tuned",)) -> dict:
    return {"train_time_s": _figure(train), "warmup_time_s": _figure(warmup),
            "steady_train_time_s": _figure(train - warmup), "steady_step_time_ms": _figure(step_ms),
            "steady_step_time_p90_ms": _figure(p90_ms), "pipelines": list(pipelines)}


def _manifest(kind: str = "cpu", **more: object) -> dict:
    return {"precision_policy": "float32", "device_kind": kind, **more}


def _summary() -> dict:
    """Three seeds on a CPU: PyTorch 1.25x faster, accuracies within 0.1 points, parity
    passed, every run completed, first epochs a fifth of the training time."""
    tf_times, torch_times = {0: 12.5, 1: 12.3, 2: 13.0}, {0: 10.0, 1: 9.6, 2: 10.4}
    tf_acc, torch_acc = {0: 0.601, 1: 0.602, 2: 0.600}, {0: 0.600, 1: 0.601, 2: 0.600}
    return {
        "config": {"model": "lenet", "dataset": "synthetic", "precision": "fp32", "epochs": 5},
        "seeds": [0, 1, 2], "parity": {"passed": True},
        "machine": {"device": "CPU", "named": "AMD EPYC (2 cores, AVX-512)"},
        "model": {"name": "LeNet-5"}, "data": {"source": "synthetic (generated)"},
        "fairness": {"tf": _manifest(), "torch": _manifest()},
        "frameworks": {"tf": _framework(12.5, 2.5), "torch": _framework(10.0, 2.0)},
        "ratios": {"train_time_s": stats.paired_ratio(tf_times, torch_times)},
        "accuracy_difference": stats.paired_difference(tf_acc, torch_acc),
        "accuracy_equivalence": stats.equivalence_test(tf_acc, torch_acc),
        "runs": [{"framework": fw, "seed": s, "status": "completed"}
                 for fw in ("tf", "torch") for s in range(3)],
    }


SPEED = ("PyTorch trained 1.26x faster than TensorFlow/Keras (training time, 95% CI 1.22x-1.31x "
         "over 3 seeds).")


def test_a_clean_comparison_reads_as_four_sentences():
    summary = _summary()
    equivalence = summary["accuracy_equivalence"]
    assert verdict.verdict_sentences(summary) == [
        SPEED,
        "Final test accuracy is equivalent within +-0.5 points: TF - PyTorch = +0.07 points (TF - "
        f"PyTorch 90% CI {100 * equivalence['ci90_low']:+.2f} to "
        f"{100 * equivalence['ci90_high']:+.2f} points, TOST p=0.003, n=3).",
        "Measured on AMD EPYC (2 cores, AVX-512), precision fp32 (TensorFlow/Keras float32, "
        "PyTorch float32); LeNet-5 on synthetic (generated) data, 3 seeds.",
        "No fairness caveat: the parity check passed, both frameworks ran on the same device "
        "kind with the same pipeline preset, and every run completed."]
    assert verdict.timing(summary) is None


def test_nothing_completed_in_both_says_so_with_the_setup_and_caveats():
    summary = _summary()
    summary["ratios"] = {"train_time_s": stats.paired_ratio({0: 1.0}, {1: 1.0})}
    summary["accuracy_difference"] = stats.paired_difference({0: 0.5}, {1: 0.5})
    summary["runs"][0]["status"] = "failed"
    sentences = verdict.verdict_sentences(summary)
    assert sentences[0] == "Nothing to compare: no seed completed in both frameworks."
    assert sentences[1].startswith("Measured on AMD EPYC") and len(sentences) == 3
    assert sentences[2] == "Caveat: 1 run did not complete (TensorFlow/Keras seed 0 failed)."
    assert verdict.verdict_sentences({**summary, "seeds": []}) == [
        "Nothing to compare: no seed completed in both frameworks.", sentences[2]]


def test_a_long_first_epoch_splits_start_up_from_steady_training():
    summary = _summary()
    summary["frameworks"]["tf"] = _framework(12.5, 7.5)  # 60% of the training time
    summary["ratios"]["warmup_time_s"] = stats.paired_ratio({0: 5.0, 1: 5.0}, {0: 2.0, 1: 2.0})
    summary["ratios"]["steady_train_time_s"] = stats.paired_ratio({0: 7.5, 1: 7.0},
                                                                  {0: 8.0, 1: 8.0})
    assert verdict._speed_sentence(summary) == (
        SPEED + " The first epoch (tracing, compilation, warm-up) is over a third of the "
        "training time (TensorFlow/Keras 60%, PyTorch 20%), so apart: start-up, PyTorch trained "
        "2.50x faster than TensorFlow/Keras (first epoch, range 2.50x-2.50x over 2 seeds); "
        "steady training, TensorFlow/Keras trained 1.10x faster than PyTorch (epochs after the "
        "first, range 1.07x-1.14x over 2 seeds). The headline is training time, first epoch "
        "included.")
    summary["frameworks"]["tf"] = _framework(12.0, 4.0)  # exactly a third: one headline
    assert verdict._speed_sentence(summary) == SPEED
    summary["frameworks"]["torch"]["warmup_time_s"] = _figure(None)  # unknown: TF's share
    summary["frameworks"]["tf"] = _framework(12.5, 7.5)
    assert "(TensorFlow/Keras 60%), so apart" in verdict._speed_sentence(summary)
    del summary["ratios"]["steady_train_time_s"]
    assert verdict._speed_sentence(summary) == SPEED
    summary["frameworks"] = {}
    assert verdict._speed_sentence(summary) == SPEED


def test_steady_training_under_a_second_is_too_short_to_time():
    summary = _summary()
    summary["frameworks"]["torch"] = _framework(1.5, 0.8)  # 0.7 s after the first epoch
    found = verdict.timing(summary)
    assert found == {"frameworks": {"torch": {"steady_s": pytest.approx(0.7),
                                              "step_error": pytest.approx(
                                                  0.05 / 1.2816 / 70 ** 0.5)}},
                     "epochs": 1 + 12}  # 4 steady epochs x 2 / 0.7, rounded up
    assert verdict._timing_sentence(summary) == (
        "Too short to time: steady training (the epochs after the first, per seed): PyTorch "
        "0.70 s, under 1 s. Under 1 s one scheduler pause of 10-50 ms moves a figure by 1-5%, "
        "and a step error above 2% cannot resolve a 5% difference: the ratios below are "
        "marked. About --epochs 13 on the same data would time enough.")
    sentences = verdict.verdict_sentences(summary)
    assert sentences[0] == verdict._timing_sentence(summary)
    assert sentences[1] == SPEED.replace("(training time,", "(training time, too short to time,")


def test_a_noisy_step_time_is_too_short_to_time_however_long_it_ran():
    summary = _summary()
    # 10 s of 100 ms steps with a p90 3x the median: the mean step uncertain by 4.9%
    summary["frameworks"]["tf"] = _framework(12.5, 2.5, step_ms=100.0, p90_ms=300.0)
    error = 2.0 / 1.2816 / 100 ** 0.5
    found = verdict.timing(summary)
    assert found is not None and found["frameworks"] == {
        "tf": {"steady_s": 10.0, "step_error": pytest.approx(error)}}
    assert found["epochs"] == 1 + -(-4 * (error / 0.01) ** 2 // 1)
    assert "TensorFlow/Keras the mean step time uncertain by 15.6%, above 2%" in (
        verdict._timing_sentence(summary))
    summary["frameworks"]["tf"] = _framework(12.5, 2.5, step_ms=100.0, p90_ms=None)
    assert verdict.timing(summary) is None  # no p90: the median alone, no spread
    summary["frameworks"]["tf"] = _framework(12.5, 2.5, step_ms=100.0, p90_ms=90.0)
    assert verdict.timing(summary) is None  # a p90 below the median counts as no spread
    summary["frameworks"]["tf"]["steady_step_time_ms"] = _figure(None)
    summary["frameworks"]["torch"]["steady_train_time_s"] = _figure(None)
    assert verdict.timing(summary) is None and verdict._timing_sentence(summary) == ""


def test_the_suggested_epochs_count_the_steady_epochs_of_the_run():
    summary = _summary()
    summary["frameworks"]["torch"] = _framework(1.0, 0.5)  # 0.5 s steady: 4x longer
    del summary["config"]["epochs"]  # unknown: two epochs, one steady
    assert verdict.timing(summary)["epochs"] == 1 + 4
    summary["config"]["epochs"] = 1  # one epoch: still one steady epoch's worth to scale
    assert verdict.timing(summary)["epochs"] == 1 + 4
    summary["frameworks"]["torch"] = _framework(1.0, 0.0, step_ms=10.0, p90_ms=10.0)
    summary["frameworks"]["torch"]["steady_train_time_s"] = _figure(0.999)
    assert verdict.timing(summary)["frameworks"]["torch"]["steady_s"] == 0.999
    summary["frameworks"]["torch"]["steady_train_time_s"] = _figure(1.0)
    assert verdict.timing(summary) is None  # one second is enough
    # a step longer than the steady time: its count clamps at one, so a p90 2.2% over the
    # median leaves the mean uncertain by 1.7%, not by 2.4%
    summary["frameworks"]["torch"]["steady_step_time_ms"] = _figure(2000.0)
    summary["frameworks"]["torch"]["steady_step_time_p90_ms"] = _figure(2044.0)
    assert verdict.timing(summary) is None


def _state(framework: str, compiled: bool, default: bool, kind: str = "gpu") -> dict:
    rule = "Keras' jit_compile='auto'" if framework == "tf" else "eager"
    return CompileState(framework, compiled, default, rule, kind).to_dict()


def test_the_setup_names_device_precision_wrappers_compile_states_and_spread():
    summary = _summary()
    summary["fairness"] = {
        "tf": _manifest("gpu", precision={"compute_type": "float16", "reason": "auto: a GPU"},
                        strategy={"wrapper": "MirroredStrategy"},
                        compile_state=_state("tf", False, True), replicas=2, processes=2,
                        nodes=1, launcher="tf.distribute"),
        "torch": _manifest("gpu", precision_policy="autocast float16",
                           precision={"compute_type": "float16", "reason": "auto: a GPU"},
                           strategy={"wrapper": None}, compile_state=_state("torch", False,
                                                                            False))}
    assert verdict.setup_sentence(summary) == (
        "Measured on AMD EPYC (2 cores, AVX-512), float16 in both frameworks (auto: a GPU; "
        "TensorFlow/Keras float32, PyTorch autocast float16), TensorFlow/Keras under "
        "MirroredStrategy, PyTorch without a wrapper; "
        f"{CompileState.from_dict(summary['fairness']['tf']['compile_state']).phrase()}, and "
        f"{CompileState.from_dict(summary['fairness']['torch']['compile_state']).phrase()}; "
        "LeNet-5 on synthetic (generated) data, 3 seeds; TensorFlow/Keras 2 replicas in 2 "
        "processes on 1 machine(s) (tf.distribute).")
    summary["fairness"]["torch"]["precision"] = {"compute_type": "float32", "reason": "asked"}
    summary["fairness"]["tf"]["strategy"] = {"wrapper": None}
    summary["machine"] = {"device": "CPU"}
    summary["seeds"] = [4]
    del summary["model"], summary["data"]
    sentence = verdict.setup_sentence(summary)
    assert sentence.startswith(
        "Measured on CPU, TensorFlow/Keras in float16 (auto: a GPU); PyTorch in float32 "
        "(asked), no distribution wrapper in either framework; ")
    assert sentence.endswith("; lenet on synthetic data, 1 seed; TensorFlow/Keras 2 replicas "
                             "in 2 processes on 1 machine(s) (tf.distribute).")
    bare = {"environment": {"tf": {"device_used": "CPU (no GPU found)"}}}
    assert verdict.setup_sentence(bare) == "Measured on CPU, precision ?; ? on ? data, 0 seeds."
    summary["side_by_side"] = True  # the frameworks' runs took turns: said last
    assert verdict.setup_sentence(summary) == (
        sentence[:-1] + "; each seed's two runs side by side, taking turns.")


def test_one_sided_precision_wrappers_and_nodes():
    summary = _summary()
    summary["fairness"]["tf"].update(precision={"compute_type": "bfloat16", "reason": "r"},
                                     nodes=2, processes=1, replicas=4, launcher="slurm")
    del summary["fairness"]["torch"]["precision_policy"]
    assert verdict._precision_phrase(summary) == "TensorFlow/Keras in bfloat16 (r)"
    assert verdict.setup_sentence(summary).endswith(
        "; TensorFlow/Keras 4 replicas in 1 processes on 2 machine(s) (slurm).")
    summary["fairness"] = {"tf": _manifest(), "torch": None}
    assert verdict._precision_phrase(summary) == "precision fp32 (TensorFlow/Keras float32)"
    assert verdict._precision_phrase({}) == "precision ?"
    summary["fairness"] = {"tf": _manifest(strategy={"wrapper": "MirroredStrategy"}),
                           "torch": _manifest(strategy="DDP")}
    assert verdict._wrappers(summary) == {"tf": "MirroredStrategy"}
    assert verdict._wrapper_phrase(summary) == ""  # one framework said: nothing to set beside


def test_each_fairness_caveat_in_its_words():
    summary = _summary()
    summary.update(parity=None, not_run=[{}, {}], order_note="the seeds ran in one order",
                   skipped=[{"path": "x"}], allow_mixed_devices=True)
    summary["fairness"]["tf"]["precision"] = {"compute_type": "float32", "handicap": "h1"}
    summary["fairness"]["torch"]["precision"] = {"compute_type": "float32", "handicap": None}
    summary["frameworks"]["torch"]["pipelines"] = ["naive", "tuned"]
    summary["runs"] += [{"framework": "torch", "seed": 3, "status": "killed", "exit": "SIGKILL"},
                        {"framework": "mx", "seed": 4, "status": "failed"}]
    assert verdict.fairness_caveats(summary) == [
        "no parity check was recorded",
        "different device kinds were allowed (allow_mixed_devices), so the frameworks may not "
        "share a device",
        "different input pipelines (TensorFlow/Keras tuned, PyTorch naive/tuned)",
        "--precision mixed handicaps a framework on this machine (h1)",
        "2 runs did not complete (PyTorch seed 3 killed (SIGKILL), mx seed 4 failed)",
        "2 planned run(s) did not run", "the seeds ran in one order",
        "1 result file(s) could not be read and are left out"]
    assert verdict._caveat_sentence(summary).startswith("Caveat: no parity check was recorded; ")


def test_parity_device_and_wrapper_caveats():
    summary = _summary()
    summary["parity"] = {"passed": False}
    summary["fairness"]["torch"]["device_kind"] = "gpu"
    summary["fairness"]["tf"]["strategy"] = {"wrapper": "MirroredStrategy"}
    summary["fairness"]["torch"]["strategy"] = {"wrapper": None}
    assert verdict.fairness_caveats(summary) == [
        "the parity check FAILED and was ignored",
        "the frameworks ran on different device kinds (TensorFlow/Keras cpu, PyTorch gpu)",
        "one framework trained under its distribution wrapper and the other without "
        "(TensorFlow/Keras under MirroredStrategy, PyTorch without a wrapper): the wrapper's "
        "cost falls on one side only"]
    summary["runs"] = []
    summary["config"]["allow_mixed_devices"] = True  # the device kinds differ: said above
    assert verdict.fairness_caveats(summary)[:2] == [
        "the parity check FAILED",
        "the frameworks ran on different device kinds (TensorFlow/Keras cpu, PyTorch gpu)"]
    same = _summary()
    same["config"]["allow_mixed_devices"] = True
    assert verdict.fairness_caveats(same) == [
        "different device kinds were allowed (allow_mixed_devices), so the frameworks may not "
        "share a device"]
    same = _summary()
    same["frameworks"]["torch"]["pipelines"] = []  # unknown: no caveat
    assert verdict.fairness_caveats(same) == []


def test_behaviour_notes_name_what_each_framework_does_its_own_way():
    summary = {"fairness": {"tf": {"loss_scale_check": "a host check per step",
                                   "batchnorm_kernel": "fused"},
                            "torch": {"batchnorm_kernel": "cudnn"}}}
    assert verdict.behaviour_notes(summary) == [
        "Loss scaling: TensorFlow/Keras: a host check per step; PyTorch: n/a",
        "BatchNorm: TensorFlow/Keras: fused; PyTorch: cudnn"]
    assert verdict.behaviour_notes({"fairness": {"tf": None, "torch": {}}}) == []


def test_phase_splits_on_different_clocks_are_kept_apart():
    def run(fw: str, clock: str | None, unreadable: bool = False) -> dict:
        return {"framework": fw, "profile": {"clock": clock} if clock else None,
                "unreadable": "bad json" if unreadable else None}
    assert verdict.phase_clocks_differ([run("torch", "device"), run("tf", "host"),
                                        run("tf", "host")]) == (
        "Not comparable side by side: TensorFlow/Keras on the host clock, PyTorch on the device "
        "clock. A device-clock split times the kernels, a host-clock split the host's launches; "
        "compare each framework's shares only with runs on the same clock.")
    assert verdict.phase_clocks_differ([run("torch", "device"), run("tf", "device")]) is None
    assert verdict.phase_clocks_differ([run("torch", "device"), run("tf", None)]) is None
    assert verdict.phase_clocks_differ([run("torch", "device"),
                                        run("tf", "host", unreadable=True)]) is None
    mixed = verdict.phase_clocks_differ([run("torch", "device"), run("torch", "host"),
                                         run("tf", "host")])
    assert mixed is not None and "PyTorch on the device/host clock" in mixed


def test_a_speed_without_accuracy_and_an_accuracy_without_speed_are_each_said():
    summary = _summary()
    summary["accuracy_difference"] = stats.paired_difference({}, {})
    del summary["accuracy_equivalence"]
    sentences = verdict.verdict_sentences(summary)
    assert sentences[:2] == [SPEED, "Final test accuracy could not be compared: no seed "
                                    "completed in both frameworks."]
    assert verdict._accuracy_sentence({}) == sentences[1]
    summary = _summary()
    summary["ratios"] = {}
    sentences = verdict.verdict_sentences(summary)
    assert sentences[0] == ("Training time could not be compared: no seed completed in both "
                            "frameworks.")
    assert sentences[1].startswith("Final test accuracy is equivalent")
    del summary["ratios"]
    assert verdict.verdict_sentences(summary)[0] == sentences[0]


def _own_loops(ratio: float, low: float, high: float) -> dict:
    record = {"time_ratio": {"ratio": ratio, "low": low, "high": high, "n": 3,
                             "interval": "ci95"}, "seeds": [0, 1, 2]}
    return {"torch": record, "shared_ratio": {"ratio": 1.3}, "own_ratio": {"ratio": 1.2}}


def test_the_shared_loops_sentence_and_caveat_follow_the_timing():
    summary = _summary()
    summary["own_loops"] = _own_loops(1.12, 1.08, 1.16)
    assert verdict.verdict_sentences(summary)[3] == (
        "The shared loop ran 12% slower than a plain PyTorch loop on the same recipe (training "
        "time after the first epoch, n=3).")
    assert verdict.fairness_caveats(summary) == [
        "the shared loop took 1.12x the time of a plain PyTorch loop for PyTorch (95% CI "
        "1.08x-1.16x over 3 seeds), so up to that much of the TF/PyTorch ratio may be the "
        "harness's (training time after the first epoch, TF / PyTorch: 1.20 each in its own "
        "loop, against 1.30 in the shared loop)"]
    summary["frameworks"]["torch"] = _framework(1.5, 0.8)  # too short: a mark, no caveat
    assert ("(training time after the first epoch, too short to time, n=3)"
            in verdict.verdict_sentences(summary)[4])
    assert verdict.fairness_caveats(summary) == []


def test_two_frameworks_too_short_ask_for_the_longer_of_their_runs():
    summary = _summary()
    summary["frameworks"]["tf"] = _framework(1.0, 0.5)  # 0.5 s steady: 4x
    summary["frameworks"]["torch"] = _framework(1.8, 1.0)  # 0.8 s steady: 2.5x
    assert verdict.timing(summary)["epochs"] == 1 + 4 * 4
    assert ("per seed): TensorFlow/Keras 0.50 s, under 1 s; PyTorch 0.80 s, under 1 s. Under"
            in verdict._timing_sentence(summary))
    summary["frameworks"]["tf"] = {}  # no figures for TensorFlow: PyTorch alone is judged
    assert verdict.timing(summary)["frameworks"] == {
        "torch": {"steady_s": pytest.approx(0.8), "step_error": pytest.approx(
            0.05 / 1.2816 / 80 ** 0.5)}}


def test_a_step_error_at_exactly_one_second_is_named_as_the_error():
    summary = _summary()
    summary["frameworks"]["tf"] = _framework(2.0, 1.0, step_ms=100.0, p90_ms=300.0)
    sentence = verdict._timing_sentence(summary)
    assert "TensorFlow/Keras the mean step time uncertain by 49.3%, above 2%." in sentence
    summary["frameworks"]["tf"] = _framework(2.0, 1.0, step_ms=2000.0, p90_ms=2060.0)
    assert verdict.timing(summary)["frameworks"]["tf"]["step_error"] == pytest.approx(
        0.03 / 1.2816)  # one step, however long: the count never goes under one


def test_a_long_first_epoch_of_a_short_run_marks_its_steady_ratio_too():
    summary = _summary()
    summary["frameworks"]["torch"] = _framework(1.5, 0.8)
    summary["ratios"]["warmup_time_s"] = stats.paired_ratio({0: 5.0, 1: 5.0}, {0: 2.0, 1: 2.0})
    summary["ratios"]["steady_train_time_s"] = stats.paired_ratio({0: 7.5, 1: 7.0},
                                                                  {0: 8.0, 1: 8.0})
    assert "(epochs after the first, too short to time, range" in verdict._speed_sentence(summary)


def test_both_frameworks_spread_and_both_wrapped_alike():
    summary = _summary()
    for fw in ("tf", "torch"):
        summary["fairness"][fw].update(processes=2, nodes=1, replicas=2, launcher="torchrun",
                                       strategy={"wrapper": f"{fw} wrapper"})
    assert verdict.setup_sentence(summary).endswith(
        "; TensorFlow/Keras 2 replicas in 2 processes on 1 machine(s) (torchrun), PyTorch 2 "
        "replicas in 2 processes on 1 machine(s) (torchrun).")
    assert verdict.fairness_caveats(summary) == []  # both under a wrapper: like for like
    del summary["frameworks"]["torch"]
    assert verdict.fairness_caveats(summary) == []


def _cache_summary(tf_cache: str | None, torch_cache: str | None, compiled: bool = True,
                   torch_compiled: bool | None = None) -> dict:
    """A summary whose frameworks compiled (or not) from caches in these states."""
    def manifest(cache: str | None, did: bool) -> dict:
        return {"compile_cache": cache, "compile_state": {"compiled": did}}
    return {"parity": {"passed": True}, "runs": [],
            "fairness": {"tf": manifest(tf_cache, compiled),
                         "torch": manifest(torch_cache, compiled if torch_compiled is None
                                           else torch_compiled)}}


def test_the_verdict_says_how_both_compilers_started_and_flags_a_mix():
    phrase, caveats = verdict.compile_caches_phrase, verdict.fairness_caveats
    assert phrase(_cache_summary("cold", "cold")) == "; both compilers' caches cold"
    assert phrase(_cache_summary("warm", "warm")) == "; both compilers' caches warm"
    assert phrase(_cache_summary("warm", "warm", compiled=False)) == ""
    assert phrase(_cache_summary(None, None)) == ""  # results from before the caches' record
    assert phrase({"fairness": {}}) == "" and verdict.compile_caches({}) == {}
    mixed = _cache_summary("cold", "warm")
    assert phrase(mixed) == (
        "; TensorFlow/Keras's compiler caches cold, PyTorch's compiler caches warm")
    assert phrase(_cache_summary("warm", None)) == (
        "; TensorFlow/Keras's compiler caches warm, PyTorch's compiler caches unrecorded")
    # one framework compiled: its state alone, and nothing to set against
    alone = _cache_summary("cold", "warm", torch_compiled=False)
    assert verdict.compile_caches(alone) == {"tf": "cold"}
    assert phrase(alone) == "; TensorFlow/Keras's compiler caches cold"
    assert not [c for c in caveats(alone) if "compilers' caches" in c]
    flagged = [c for c in caveats(mixed) if "compilers' caches" in c]
    assert flagged == ["the compilers' caches started in different states (TensorFlow/Keras "
                       "cold, PyTorch warm): their start-up is not like for like"]
    unrecorded = [c for c in caveats(_cache_summary(None, "cold")) if "compilers' caches" in c]
    assert unrecorded == ["the compilers' caches started in different states (TensorFlow/Keras "
                          "unrecorded, PyTorch cold): their start-up is not like for like"]
    assert not [c for c in caveats(_cache_summary("warm", "warm")) if "compilers' caches" in c]
