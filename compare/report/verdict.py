"""The verdict: plain sentences computed from a comparison's summary alone (speed, accuracy,
where and how it was measured, fairness caveats), and the notes that sit beside it."""

from __future__ import annotations

import math

from compare import schema
from compare.experiment.config import FRAMEWORK_NAMES
from compare.experiment.frameworks import FRAMEWORKS
from compare.figures import STEADY_TRAIN_TIME, STEP_TIME, STEP_TIME_P90, TRAIN_TIME, WARMUP_TIME
from compare.report import best, defaults, own_loops, stats, words
from compare.report.labels import machine_of


def verdict_sentences(summary: schema.Summary) -> list[str]:
    """Plain sentences computed from the summary's figures: speed, accuracy, where and how it
    was measured, the shared loop against each framework's own, and any fairness caveat.
    Pure: reads `summary` only."""
    ratio = (summary.get("ratios") or {}).get(TRAIN_TIME.key) or {}
    if ratio.get("ratio") is None and not (summary.get("accuracy_difference") or {}).get("n"):
        nothing = "Nothing to compare: no seed completed in both frameworks."
        setup = setup_sentence(summary) if summary.get("seeds") else ""
        return [s for s in (nothing, setup, _caveat_sentence(summary)) if s]
    return [s for s in (_timing_sentence(summary), _speed_sentence(summary),
                        _spread_sentence(summary), _phase_spread_sentence(summary),
                        defaults.sentence(summary),
                        _accuracy_sentence(summary),
                        setup_sentence(summary),
                        own_loops.sentence(summary, ", too short to time" if timing(summary)
                                           else ""),
                        best.sentence(summary),
                        _caveat_sentence(summary)) if s]


# A comparison's timed work is too short to time when a framework's steady training (the
# epochs after the first) lasts under MIN_TIMED_S per seed, where one scheduler pause,
# page-fault burst or clock step (10-50 ms) moves the figure by 1-5%, the size of the
# differences a verdict reports; or when its step-to-step spread leaves the mean step time's
# standard error above MAX_STEP_ERROR, too coarse to resolve a 5% difference. The timer
# itself (perf_counter, under a microsecond) is never the limit.
MIN_TIMED_S = 1.0
MAX_STEP_ERROR = 0.02
TIMED_TARGET_S = 2.0  # what the suggested run length aims at: twice the threshold
P90_Z = 1.2816  # the p90 of a normal distribution, in standard deviations
STARTUP_SHARE = 1 / 3  # above this share of training time, start-up and steady are told apart


def timing(summary: schema.Summary) -> dict | None:
    """Why this comparison's timed work is too short to time, per framework, and the
    epochs that would time TIMED_TARGET_S; None when it is long enough (or unknown)."""
    frameworks = summary.get("frameworks") or {}
    found: dict = {}
    needed = 1.0  # how many times longer the steady work must be
    for fw in FRAMEWORKS:
        f = frameworks.get(fw) or {}
        steady = (f.get(STEADY_TRAIN_TIME.key) or {}).get("centre")
        median = (f.get(STEP_TIME.key) or {}).get("centre")
        p90 = (f.get(STEP_TIME_P90.key) or {}).get("centre")
        if not steady or not median:
            continue
        steps = max(1.0, steady * 1000 / median)
        error = max((p90 or median) / median - 1, 0.0) / P90_Z / steps ** 0.5
        if steady < MIN_TIMED_S or error > MAX_STEP_ERROR:
            found[fw] = {"steady_s": steady, "step_error": error}
            needed = max(needed, TIMED_TARGET_S / steady, (error / (MAX_STEP_ERROR / 2)) ** 2)
    if not found:
        return None
    epochs = (summary.get("config") or {}).get("epochs") or 2
    return {"frameworks": found, "epochs": 1 + math.ceil(max(1, epochs - 1) * needed)}


def _timing_sentence(summary: schema.Summary) -> str:
    short = timing(summary)
    if not short:
        return ""
    parts = []
    for fw, f in short["frameworks"].items():
        why = (f"{f['steady_s']:.2f} s, under {MIN_TIMED_S:g} s" if f["steady_s"] < MIN_TIMED_S
               else f"the mean step time uncertain by {100 * f['step_error']:.1f}%, above "
                    f"{100 * MAX_STEP_ERROR:g}%")
        parts.append(f"{FRAMEWORK_NAMES[fw]} {why}")
    return (f"Too short to time: steady training (the epochs after the first, per seed): "
            f"{'; '.join(parts)}. Under {MIN_TIMED_S:g} s one scheduler pause of 10-50 ms "
            f"moves a figure by 1-5%, and a step error above {100 * MAX_STEP_ERROR:g}% cannot "
            f"resolve a 5% difference: the ratios below are marked. About --epochs "
            f"{short['epochs']} on the same data would time enough.")


def _speed_sentence(summary: schema.Summary) -> str:
    ratios = summary.get("ratios") or {}
    mark = (", too short to time" if timing(summary) else "") + defaults.below_default_mark(summary)
    headline = words.time_ratio(ratios.get(TRAIN_TIME.key) or {}, "training time", mark)
    sentence = headline[0].upper() + headline[1:] + "."
    shares = first_epoch_shares(summary)
    steady = ratios.get(STEADY_TRAIN_TIME.key) or {}
    if not shares or max(shares.values()) <= STARTUP_SHARE or steady.get("ratio") is None:
        return sentence
    held = ", ".join(f"{FRAMEWORK_NAMES[fw]} {100 * share:.0f}%" for fw, share in shares.items())
    return (f"{sentence} The first epoch (tracing, compilation, warm-up) is over a third of "
            f"the training time ({held}{compile_caches_phrase(summary)}), so apart: start-up, "
            f"{words.time_ratio(ratios.get(WARMUP_TIME.key) or {}, 'first epoch')}; steady "
            f"training, {words.time_ratio(steady, 'epochs after the first', mark)}. The "
            f"headline is training time, first epoch included.")


def compile_caches(summary: schema.Summary) -> dict[str, str | None]:
    """Each compiling framework's cache state at its runs' start (None: not recorded)."""
    fairness = summary.get("fairness") or {}
    return {fw: manifest.get("compile_cache") for fw in FRAMEWORKS
            if (manifest := fairness.get(fw) or {})
            and (manifest.get("compile_state") or {}).get("compiled")}


def compile_caches_phrase(summary: schema.Summary) -> str:
    """How the compilers started, for the start-up sentence: "; both compilers' caches
    cold", or each framework's state; nothing where no framework compiled or none said."""
    states = compile_caches(summary)
    if not states or not any(states.values()):
        return ""
    if len(states) == 2 and len(set(states.values())) == 1:
        return f"; both compilers' caches {next(iter(states.values()))}"
    return "; " + ", ".join(f"{FRAMEWORK_NAMES[fw]}'s compiler caches {state or 'unrecorded'}"
                            for fw, state in states.items())


def first_epoch_shares(summary: schema.Summary) -> dict[str, float]:
    """Each framework's first epoch as a share of its training time (centres over the seeds)."""
    frameworks = summary.get("frameworks") or {}
    shares = {}
    for fw in FRAMEWORKS:
        first = ((frameworks.get(fw) or {}).get(WARMUP_TIME.key) or {}).get("centre")
        total = ((frameworks.get(fw) or {}).get(TRAIN_TIME.key) or {}).get("centre")
        if first and total:
            shares[fw] = first / total
    return shares


# A framework whose training time varies from seed to seed by under this share (standard
# deviation over the mean) does not keep a ratio unresolved; one that varies by this factor
# more than the other holds most of the spread.
QUIET_SPREAD = 0.03
WHOSE_SPREAD = 1.5


def seed_spread(summary: schema.Summary) -> dict[str, float]:
    """Each framework's seed-to-seed spread of training time: its standard deviation over
    its mean (2 or more seeds)."""
    spreads = {}
    for fw in FRAMEWORKS:
        figure = ((summary.get("frameworks") or {}).get(fw) or {}).get(TRAIN_TIME.key) or {}
        if figure.get("std") is not None and figure.get("mean"):
            spreads[fw] = figure["std"] / figure["mean"]
    return spreads


def _spread_sentence(summary: schema.Summary) -> str:
    """Whose seeds keep an unresolved training-time ratio unresolved: one framework's (a
    noisy host widens one framework's times more than the other's; on a 2-core CPU bare Keras
    scripts spread more than bare PyTorch ones, docs/research/cpu-timing.md) or both alike."""
    ratio = (summary.get("ratios") or {}).get(TRAIN_TIME.key) or {}
    spreads = seed_spread(summary)
    if stats.side(ratio) != 0 or len(spreads) < 2 or max(spreads.values()) < QUIET_SPREAD:
        return ""
    (noisy, most), (quiet, least) = sorted(spreads.items(), key=lambda kv: -kv[1])
    said = (f"{FRAMEWORK_NAMES[noisy]} {100 * most:.1f}%, {FRAMEWORK_NAMES[quiet]} "
            f"{100 * least:.1f}%")
    if most < WHOSE_SPREAD * least:
        return (f"Both frameworks' training times varied alike from seed to seed ({said}; "
                f"standard deviation over the mean), so the spread that leaves the ratio "
                f"unresolved is not one framework's.")
    return (f"The spread that leaves the ratio unresolved is mostly "
            f"{words.possessive(FRAMEWORK_NAMES[noisy])}: its training time varied "
            f"{100 * most:.1f}% from seed to seed (standard deviation over the mean), "
            f"{words.possessive(FRAMEWORK_NAMES[quiet])} {100 * least:.1f}%.")


def _phase_spread_sentence(summary: schema.Summary) -> str:
    """Which part of the training time holds the seed-to-seed spread of an unresolved ratio:
    the first epoch's or steady training's. The log of the headline ratio is about the first
    epoch's share s times the log of the first epoch's ratio plus (1 - s) times steady
    training's, so each part holds its share times its spread (the standard deviation of
    its log ratio over the seeds); one holding WHOSE_SPREAD times the other's is named."""
    ratios = summary.get("ratios") or {}
    first = (ratios.get(WARMUP_TIME.key) or {}).get("log_std")
    steady = (ratios.get(STEADY_TRAIN_TIME.key) or {}).get("log_std")
    shares = first_epoch_shares(summary)
    if (stats.side(ratios.get(TRAIN_TIME.key) or {}) != 0 or first is None or steady is None
            or not shares):
        return ""
    share = sum(shares.values()) / len(shares)
    held = {"the first epoch's": share * first, "steady training's": (1 - share) * steady}
    (part, most), (_, least) = sorted(held.items(), key=lambda kv: -kv[1])
    if most < WHOSE_SPREAD * least:
        return ""
    return (f"Most of that spread is {part}: the TF / PyTorch ratio of the first epoch varied "
            f"{100 * first:.1f}% from seed to seed, of the epochs after it {100 * steady:.1f}% "
            f"(standard deviation of the log ratio), the first epoch {100 * share:.0f}% of "
            f"the training time.")


def _accuracy_sentence(summary: schema.Summary) -> str:
    test = summary.get("accuracy_equivalence") or {}
    margin = 100 * test.get("margin", stats.EQUIVALENCE_MARGIN)
    diff = summary.get("accuracy_difference") or {}
    if diff.get("n", 0) == 0:
        return "Final test accuracy could not be compared: no seed completed in both frameworks."
    mean = 100 * diff["mean"]
    if "accuracy_equivalence" not in summary:
        return (f"Final test accuracy: TF - PyTorch = {mean:+.2f} points (n={diff['n']}); this "
                f"summary predates the equivalence test.")
    if test.get("equivalent") is None:
        return (f"Not enough seeds to test equivalence of the final test accuracy (n={diff['n']}; "
                f"TF - PyTorch = {mean:+.2f} points); run 2 or more seeds, 3+ for an interval.")
    if test["ci90_low"] == test["ci90_high"]:  # no spread: t is infinite, so is the evidence
        interval = f"the same difference on each of {test['n']} seeds"
    else:
        p_value = "p<0.001" if test["p_value"] < 0.001 else f"p={test['p_value']:.3f}"
        # the interval of TF - PyTorch, named so, whichever framework scored higher
        interval = (f"TF - PyTorch 90% CI {100 * test['ci90_low']:+.2f} to "
                    f"{100 * test['ci90_high']:+.2f} points, TOST {p_value}, n={test['n']}")
    if test["equivalent"]:
        return (f"Final test accuracy is equivalent within +-{margin:g} points: TF - PyTorch = "
                f"{mean:+.2f} points ({interval}).")
    gap = f"{abs(mean):.2f}"
    higher = ("neither framework scored higher on average" if gap == "0.00" else
              f"{'TensorFlow/Keras' if mean > 0 else 'PyTorch'} scored {gap} points higher on "
              f"average")
    return (f"Final test accuracy is not shown equivalent within +-{margin:g} points: "
            f"{higher} ({interval}).")


def _compile_phrase(summary: schema.Summary) -> str:
    """Each framework's compile state and whether it is its default: 'TensorFlow/Keras
    without XLA, Keras' default on this CPU, and PyTorch eager, its default'."""
    states = defaults.states(summary)
    return ", and ".join(states[fw].phrase() for fw in FRAMEWORKS if fw in states)


def setup_sentence(summary: schema.Summary) -> str:
    machine = summary.get("machine") or machine_of(summary.get("environment") or {})
    config = summary.get("config") or {}
    model = (summary.get("model") or {}).get("name") or config.get("model") or "?"
    source = (summary.get("data") or {}).get("source") or config.get("dataset") or "?"
    seeds = len(summary.get("seeds") or [])
    spread = [f"{FRAMEWORK_NAMES[fw]} {f['replicas']} replicas in {f['processes']} processes "
              f"on {f['nodes']} machine(s) ({f['launcher']})"
              for fw, f in (summary.get("fairness") or {}).items()
              if (f or {}).get("processes", 1) > 1 or (f or {}).get("nodes", 1) > 1]
    compiled = _compile_phrase(summary)
    return (f"Measured on {machine.get('named') or machine['device']}, "
            f"{_precision_phrase(summary)}"
            + (f", {_wrapper_phrase(summary)}" if _wrapper_phrase(summary) else "")
            + (f"; {compiled}" if compiled else "")
            + f"; {model} on {source} data, {seeds} seed{'s' if seeds != 1 else ''}"
            + (f"; {', '.join(spread)}" if spread else "")
            + ("; each seed's two runs side by side, taking turns"
               if summary.get("side_by_side") else "") + ".")


def _precision_phrase(summary: schema.Summary) -> str:
    """'float32 in both frameworks (auto: ...)', or each framework's where they differ;
    results written before the precision was resolved give the requested one."""
    fairness = {fw: f for fw, f in (summary.get("fairness") or {}).items() if f}
    resolved = {fw: f.get("precision") for fw, f in fairness.items()
                if isinstance(f.get("precision"), dict)}
    policies = ", ".join(f"{FRAMEWORK_NAMES[fw]} {f['precision_policy']}"
                         for fw, f in fairness.items() if f.get("precision_policy"))
    if not resolved:
        config = summary.get("config") or {}
        return f"precision {config.get('precision', '?')}" + (f" ({policies})" if policies
                                                              else "")
    chosen = {(r["compute_type"], r["reason"]) for r in resolved.values()}
    if len(chosen) == 1 and len(resolved) == len(FRAMEWORK_NAMES):
        (compute, reason), = chosen
        return f"{compute} in both frameworks ({reason}; {policies})"
    return "; ".join(f"{FRAMEWORK_NAMES[fw]} in {r['compute_type']} ({r['reason']})"
                     for fw, r in resolved.items())


def _wrappers(summary: schema.Summary) -> dict[str, str | None]:
    """Each framework's distribution wrapper (None: none), where its manifest says."""
    found = {}
    for fw, f in (summary.get("fairness") or {}).items():
        described = (f or {}).get("strategy")
        if isinstance(described, dict):
            found[fw] = described.get("wrapper")
    return found


def _wrapper_phrase(summary: schema.Summary) -> str:
    wrappers = _wrappers(summary)
    if len(wrappers) < 2:
        return ""
    if not any(wrappers.values()):
        return "no distribution wrapper in either framework"
    return ", ".join(f"{FRAMEWORK_NAMES[fw]} " + (f"under {w}" if w else "without a wrapper")
                     for fw, w in wrappers.items())


def fairness_caveats(summary: schema.Summary) -> list[str]:
    """What keeps this comparison from being like for like, one phrase each."""
    caveats = []
    parity = summary.get("parity")
    has_runs = bool(summary.get("runs"))
    if parity is None:
        caveats.append("no parity check was recorded")
    elif not parity.get("passed"):
        caveats.append("the parity check FAILED" + (" and was ignored" if has_runs else ""))
    fairness = summary.get("fairness") or {}
    kinds = {fw: (f or {}).get("device_kind") for fw, f in fairness.items() if f}
    config = summary.get("config") or {}
    if len(set(kinds.values())) > 1:
        caveats.append("the frameworks ran on different device kinds ("
                       + ", ".join(f"{FRAMEWORK_NAMES[fw]} {k}" for fw, k in kinds.items()) + ")")
    elif summary.get("allow_mixed_devices") or config.get("allow_mixed_devices"):
        caveats.append("different device kinds were allowed (allow_mixed_devices), so the "
                       "frameworks may not share a device")
    frameworks = summary.get("frameworks") or {}
    pipelines = {fw: tuple(frameworks.get(fw, {}).get("pipelines") or ())
                 for fw in FRAMEWORKS}
    if all(pipelines.values()) and pipelines["tf"] != pipelines["torch"]:
        caveats.append("different input pipelines (" + ", ".join(
            f"{FRAMEWORK_NAMES[fw]} {'/'.join(p)}" for fw, p in pipelines.items()) + ")")
    wrappers = _wrappers(summary)
    if len(wrappers) == 2 and len({bool(w) for w in wrappers.values()}) == 2:
        caveats.append("one framework trained under its distribution wrapper and the other "
                       "without (" + _wrapper_phrase(summary) + "): the wrapper's cost falls "
                       "on one side only")
    caches = compile_caches(summary)
    if len(caches) == 2 and len(set(caches.values())) > 1:
        caveats.append("the compilers' caches started in different states (" + ", ".join(
            f"{FRAMEWORK_NAMES[fw]} {state or 'unrecorded'}" for fw, state in caches.items())
            + "): their start-up is not like for like")
    handicaps = {f["precision"].get("handicap") for f in fairness.values()
                 if isinstance((f or {}).get("precision"), dict)}
    caveats += [f"--precision mixed handicaps a framework on this machine ({h})"
                for h in sorted(h for h in handicaps if h)]
    failed = [r for r in summary.get("runs") or [] if r.get("status") != "completed"]
    if failed:
        caveats.append(f"{len(failed)} run{'s' if len(failed) != 1 else ''} did not complete ("
                       + ", ".join(f"{FRAMEWORK_NAMES.get(r['framework'], r['framework'])} seed "
                                   f"{r['seed']} {r['status']}"
                                   + (f" ({r['exit']})" if r.get("exit") else "")
                                   for r in failed) + ")")
    if summary.get("not_run"):
        caveats.append(f"{len(summary['not_run'])} planned run(s) did not run")
    if order_note := summary.get("order_note"):
        caveats.append(order_note)
    if summary.get("skipped"):
        caveats.append(f"{len(summary['skipped'])} result file(s) could not be read and are "
                       f"left out")
    # a harness caveat from timings too short to time would be noise called a finding
    return caveats + ([] if timing(summary) else own_loops.caveats(summary))


def _caveat_sentence(summary: schema.Summary) -> str:
    caveats = fairness_caveats(summary)
    if caveats:
        return "Caveat: " + "; ".join(caveats) + "."
    return ("No fairness caveat: the parity check passed, both frameworks ran on the same "
            "device kind with the same pipeline preset, and every run completed.")


BEHAVIOUR_KEYS = {"loss_scale_check": "Loss scaling", "batchnorm_kernel": "BatchNorm"}


def behaviour_notes(summary: schema.Summary) -> list[str]:
    """What each framework does its own way that the settings cannot match, one note each
    (from the manifests): e.g. Keras' per-step host check of the loss scale."""
    notes = []
    for key, what in BEHAVIOUR_KEYS.items():
        said = {fw: (f or {}).get(key) for fw, f in (summary.get("fairness") or {}).items()}
        if any(said.values()):
            notes.append(f"{what}: " + "; ".join(f"{FRAMEWORK_NAMES[fw]}: {text or 'n/a'}"
                                                  for fw, text in said.items()))
    return notes


def phase_clocks_differ(runs: list[schema.Result]) -> str | None:
    """Where one framework's phase split was read on the device clock and the other's only on
    the host clock (no GPU trace), the sentence that keeps the two from being read side by
    side; None when they share a clock."""
    clocks: dict[str, set] = {}
    for r in runs:
        clock = (r.get("profile") or {}).get("clock")
        if clock and not r.get("unreadable"):
            clocks.setdefault(r["framework"], set()).add(clock)
    if len(clocks) < 2 or len(set().union(*clocks.values())) < 2:
        return None
    said = ", ".join(f"{FRAMEWORK_NAMES[fw]} on the {'/'.join(sorted(c))} clock"
                     for fw, c in sorted(clocks.items()))
    return (f"Not comparable side by side: {said}. A device-clock split times the kernels, a "
            "host-clock split the host's launches; compare each framework's shares only with "
            "runs on the same clock.")
