"""The verdict: plain sentences computed from a comparison's summary alone (speed, accuracy,
where and how it was measured, fairness caveats), and the notes that sit beside it."""

from __future__ import annotations

from compare.experiment.config import FRAMEWORK_NAMES
from compare.report import best, own_loops, stats
from compare.report.aggregate import machine_of


def verdict_sentences(summary: dict) -> list[str]:
    """Plain sentences computed from the summary's figures: speed, accuracy, where and how it
    was measured, the shared loop against each framework's own, and any fairness caveat.
    Pure: reads `summary` only."""
    ratio = (summary.get("ratios") or {}).get("train_time_s") or {}
    if ratio.get("ratio") is None and not (summary.get("accuracy_difference") or {}).get("n"):
        nothing = "Nothing to compare: no seed completed in both frameworks."
        setup = setup_sentence(summary) if summary.get("seeds") else ""
        return [s for s in (nothing, setup, _caveat_sentence(summary)) if s]
    return [s for s in (_speed_sentence(summary), _accuracy_sentence(summary),
                        setup_sentence(summary), own_loops.sentence(summary),
                        best.sentence(summary),
                        _caveat_sentence(summary)) if s]


def _speed_sentence(summary: dict) -> str:
    ratio = (summary.get("ratios") or {}).get("train_time_s") or {}
    if ratio.get("ratio") is None:
        return "Training time could not be compared: no seed completed in both frameworks."
    r, low, high = ratio["ratio"], ratio.get("low"), ratio.get("high")
    if r >= 1:  # TF took longer: PyTorch is faster by r
        faster, slower, factor, span = "torch", "tf", r, (low, high)
    else:
        faster, slower, factor = "tf", "torch", 1 / r
        span = (1 / high if high else None, 1 / low if low else None)
    n = ratio.get("n", 0)
    if ratio.get("interval") == "ci95":
        detail = f"95% CI {span[0]:.2f}x-{span[1]:.2f}x over {n} seeds"
        if span[0] <= 1:
            return (f"{FRAMEWORK_NAMES[faster]} trained {factor:.2f}x faster than "
                    f"{FRAMEWORK_NAMES[slower]} on average, but the {detail} includes no "
                    f"difference.")
    elif ratio.get("interval") == "range":
        detail = f"n={n}: range {span[0]:.2f}x-{span[1]:.2f}x, too few seeds for an interval"
    else:
        detail = "n=1: a single seed, no interval"
    return (f"{FRAMEWORK_NAMES[faster]} trained {factor:.2f}x faster than "
            f"{FRAMEWORK_NAMES[slower]} (training time, {detail}).")


def _accuracy_sentence(summary: dict) -> str:
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
    higher = "TensorFlow/Keras" if mean > 0 else "PyTorch"
    return (f"Final test accuracy is not shown equivalent within +-{margin:g} points: "
            f"{higher} scored {abs(mean):.2f} points higher on average ({interval}).")


def setup_sentence(summary: dict) -> str:
    machine = summary.get("machine") or machine_of(summary.get("environment") or {})
    config = summary.get("config") or {}
    model = (summary.get("model") or {}).get("name") or config.get("model") or "?"
    source = (summary.get("data") or {}).get("source") or config.get("dataset") or "?"
    seeds = len(summary.get("seeds") or [])
    spread = [f"{FRAMEWORK_NAMES[fw]} {f['replicas']} replicas in {f['processes']} processes "
              f"on {f['nodes']} machine(s) ({f['launcher']})"
              for fw, f in (summary.get("fairness") or {}).items()
              if (f or {}).get("processes", 1) > 1 or (f or {}).get("nodes", 1) > 1]
    return (f"Measured on {machine['device']} ({machine['host']}), {_precision_phrase(summary)}"
            + (f", {_wrapper_phrase(summary)}" if _wrapper_phrase(summary) else "")
            + f", {model} on {source} data, {seeds} seed{'s' if seeds != 1 else ''}"
            + (f"; {', '.join(spread)}" if spread else "") + ".")


def _precision_phrase(summary: dict) -> str:
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


def _wrappers(summary: dict) -> dict[str, str | None]:
    """Each framework's distribution wrapper (None: none), where its manifest says."""
    found = {}
    for fw, f in (summary.get("fairness") or {}).items():
        described = (f or {}).get("strategy")
        if isinstance(described, dict):
            found[fw] = described.get("wrapper")
    return found


def _wrapper_phrase(summary: dict) -> str:
    wrappers = _wrappers(summary)
    if len(wrappers) < 2:
        return ""
    if not any(wrappers.values()):
        return "no distribution wrapper in either framework"
    return ", ".join(f"{FRAMEWORK_NAMES[fw]} " + (f"under {w}" if w else "without a wrapper")
                     for fw, w in wrappers.items())


def fairness_caveats(summary: dict) -> list[str]:
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
                 for fw in ("tf", "torch")}
    if all(pipelines.values()) and pipelines["tf"] != pipelines["torch"]:
        caveats.append("different input pipelines (" + ", ".join(
            f"{FRAMEWORK_NAMES[fw]} {'/'.join(p)}" for fw, p in pipelines.items()) + ")")
    wrappers = _wrappers(summary)
    if len(wrappers) == 2 and len({bool(w) for w in wrappers.values()}) == 2:
        caveats.append("one framework trained under its distribution wrapper and the other "
                       "without (" + _wrapper_phrase(summary) + "): the wrapper's cost falls "
                       "on one side only")
    failed = [r for r in summary.get("runs") or [] if r.get("status") != "completed"]
    if failed:
        caveats.append(f"{len(failed)} run{'s' if len(failed) != 1 else ''} did not complete ("
                       + ", ".join(f"{FRAMEWORK_NAMES.get(r['framework'], r['framework'])} seed "
                                   f"{r['seed']} {r['status']}"
                                   + (f" ({r['exit']})" if r.get("exit") else "")
                                   for r in failed) + ")")
    if summary.get("not_run"):
        caveats.append(f"{len(summary['not_run'])} planned run(s) did not run")
    if summary.get("order_note"):
        caveats.append(summary["order_note"])
    if summary.get("skipped"):
        caveats.append(f"{len(summary['skipped'])} result file(s) could not be read and are "
                       f"left out")
    return caveats + own_loops.caveats(summary)


def _caveat_sentence(summary: dict) -> str:
    caveats = fairness_caveats(summary)
    if caveats:
        return "Caveat: " + "; ".join(caveats) + "."
    return ("No fairness caveat: the parity check passed, both frameworks ran on the same "
            "device kind with the same pipeline preset, and every run completed.")


BEHAVIOUR_KEYS = {"loss_scale_check": "Loss scaling", "batchnorm_kernel": "BatchNorm"}


def behaviour_notes(summary: dict) -> list[str]:
    """What each framework does its own way that the settings cannot match, one note each
    (from the manifests): e.g. Keras' per-step host check of the loss scale."""
    notes = []
    for key, what in BEHAVIOUR_KEYS.items():
        said = {fw: (f or {}).get(key) for fw, f in (summary.get("fairness") or {}).items()}
        if any(said.values()):
            notes.append(f"{what}: " + "; ".join(f"{FRAMEWORK_NAMES[fw]}: {text or 'n/a'}"
                                                  for fw, text in said.items()))
    return notes


def phase_clocks_differ(runs: list[dict]) -> str | None:
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
