"""The plan: every (stage, framework) in order with its limit, estimate and rental, and the
device commands it is packed into, as a rental without a package index runs them."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.battery.bundle import CARRY_BYTES, part_bytes_that_fit, travelling_bytes
from benchmarks.battery.commands import (
    COMMIT_ENV,
    FRAMEWORKS,
    STAGE_FRAMEWORKS,
    STAGE_LIMIT_S,
    checkout_commit,
    shown,
)
from benchmarks.battery.estimates import Context
from benchmarks.battery.running import CUDNN_CHOICE
from benchmarks.battery.stages import RENTAL_CORE_S, RENTAL_S, Stage


def plan(stages: list[Stage], frameworks: tuple[str, ...], ctx: Context) -> list[dict]:
    """Every (stage, framework) to run, in order: PyTorch's core stages, TensorFlow's, then
    the rest (PyTorch's, then TensorFlow's); each with its command, limit, estimate and the
    rental it fits in."""
    rows = []
    order = ([(s, fw) for fw in FRAMEWORKS for s in stages if s.core and fw in s.frameworks]
             + [(s, fw) for fw in STAGE_FRAMEWORKS for s in stages if not s.core
                and fw in s.frameworks])
    used, rental = 0.0, 1
    for stage, framework in order:
        if framework not in frameworks:
            continue
        seconds, how, least = estimate_of(stage, framework, ctx)
        limit = (stage.max_limit_s if ctx.tiny
                 else min(stage.max_limit_s,
                          max(120, math.ceil(ctx.limit_factor * seconds / 30) * 30)))
        capacity = RENTAL_CORE_S if stage.core and rental == 1 else RENTAL_S
        if used + seconds > capacity:  # the next rental
            rental, used = rental + 1, 0.0
        used += seconds
        rows.append({"stage": stage.name, "framework": framework, "core": stage.core,
                     "timed": stage.timed,
                     "what": stage.what, "limit_s": limit, "estimate_s": round(seconds),
                     "least_s": round(least),
                     "estimated_how": how, "rental": rental,
                     "commands": [" ".join(shown(a) for a in argv)
                                  for argv in stage.commands(framework, ctx)]})
    return rows


def estimate_of(stage: Stage, framework: str, ctx: Context) -> tuple[float, str, float]:
    """The stage's estimate for `framework` in `ctx`, how it was made, and the seconds that
    leave a usable result (the battery starts it only when that much time is left)."""
    seconds, how = stage.estimate(framework, ctx)
    least = (stage.least_s(framework, ctx) if stage.least_s is not None
             else seconds * stage.least_fraction)
    return seconds, how, least


CALL_S = 540  # estimated seconds packed into one device command (10 minutes at most)


def device_calls(rows: list[dict], options: list[str]) -> list[dict]:
    """The plan's rows packed, in order, into device commands of at most CALL_S estimated
    seconds, each a `--stage ... --framework ...` invocation (a new command where the
    framework or the rental changes) with this invocation's data options."""
    calls: list[dict] = []
    for row in rows:
        last = calls[-1] if calls else None
        if (last is None or last["framework"] != row["framework"]
                or last["rental"] != row["rental"]
                or last["estimate_s"] + row["estimate_s"] > CALL_S):
            last = {"framework": row["framework"], "rental": row["rental"], "stages": [],
                    "estimate_s": 0}
            calls.append(last)
        last["stages"].append(row["stage"])
        last["estimate_s"] += row["estimate_s"]
    for call in calls:
        call["command"] = ("python -m benchmarks.gpu_battery --framework " + call["framework"]
                           + "".join(f" --stage {s}" for s in call["stages"])
                           + "".join(f" {shown(o)}" for o in options)
                           + f" --time-left {STAGE_LIMIT_S} --out /tmp/battery --pack \"$OUT\"")
    return calls


def _append_part(call: dict, bundle: Path, root: Path, part: Path, archive: str) -> None:
    """Carry one part of the bundle in `call`: check its sum, append it to `archive`."""
    name = f"{part.name}/{part.name[0]}.{part.name[1:]}"
    folder = bundle.relative_to(root)
    call["setup"].append(f"(cd {folder} && grep ' {name}$' SHA256SUMS | sha256sum -c --quiet -)"
                         f" && cat {folder}/{name} >> {archive}")
    call["carry"] += [str(folder / part.name), str(folder / "SHA256SUMS")]


CALL_CHARS = 2000  # one device command's length


def rental_calls(calls: list[dict], root: Path, bundle: Path | None, data: Path | None,
                 scratch: str = "/tmp") -> list[dict]:
    """The device calls as a rental without a package index runs them, back to back, each one
    bash line (`bash`, of which `setup` comes first) with the checkout paths it carries
    (`carry`, relative to `root`, at most CARRY_BYTES with the checkout, which every call
    brings): the first call carries the data and
    unpacks it under `scratch`; the next ones each carry one part of TensorFlow's bundle
    (`bundle`: c00/c.00, c01/c.01, ... and SHA256SUMS), check it and append it to one file
    while a PyTorch stage runs (calls that only carry where PyTorch has no stage left); the
    first TensorFlow call unpacks the bundle, and every TensorFlow call activates it. The
    bundle's fallback cuDNN parts (f00/f.00, ...), if built, follow the first TensorFlow call
    as calls marked `only_if`: made only when its smoke test failed on the machine's cuDNN."""
    data_options: list[str] = []
    out = [dict(call, setup=[], carry=[]) for call in calls]
    if data is not None:
        on_device = f"{scratch}/cnncompare-data"
        if data.name == "cifar-10-python.tar.gz":  # the official archive: read as it is
            unpack = f"mkdir -p {on_device} && cp {data.relative_to(root)} {on_device}/"
            data_options = ["--dataset", "cifar10", "--data-dir", f"{on_device}/{data.name}"]
        else:  # an image folder (train/ and test/), archived
            unpack = f"mkdir -p {on_device} && tar xzf {data.relative_to(root)} -C {on_device}"
            data_options = ["--dataset", "folder", "--data-dir", on_device]
        out[0]["setup"].append(unpack)
        out[0]["carry"].append(str(data.relative_to(root)))
    parts = sorted(bundle.glob("c[0-9][0-9]")) if bundle is not None else []
    first_tf = next((i for i, c in enumerate(out) if c["framework"] == "tf"), len(out))
    slots = list(range(1 if data is not None else 0, first_tf))
    while len(slots) < len(parts):  # carry-only calls before TensorFlow's first
        out.insert(first_tf, {"framework": "torch", "rental": out[first_tf - 1]["rental"],
                              "stages": [], "estimate_s": 0, "setup": [], "carry": []})
        slots.append(first_tf)
        first_tf += 1
    archive = f"{scratch}/tf-bundle.tar.xz"
    for part, slot in zip(parts, slots):
        _append_part(out[slot], bundle, root, part, archive)
    # every TensorFlow call (a fresh shell) activates the bundle, on the cuDNN the smoke test
    # chose (the battery writes CUDNN_CHOICE when only the fallback passed)
    activate = (f"source {scratch}/tfgpu/site/activate.sh $(cat {scratch}/tfgpu/"
                f"{CUDNN_CHOICE} 2>/dev/null)")
    if parts and first_tf < len(out):
        out[first_tf]["setup"].append(f"mkdir -p {scratch}/tfgpu && tar xJf {archive} -C "
                                      f"{scratch}/tfgpu")
        for call in out[first_tf:]:
            if call["framework"] == "tf":
                call["setup"].append(activate)
        # the bundle's fallback cuDNN (f00/f.00, ...): calls made only when the first
        # TensorFlow call's smoke test failed on the machine's cuDNN; the last unpacks it and
        # runs that call's stages again (the smoke test retries on the fallback)
        fallback = sorted(bundle.glob("f[0-9][0-9]"))
        extra = []
        for part in fallback:
            call = {"framework": "torch", "rental": out[first_tf]["rental"], "stages": [],
                    "estimate_s": 0, "setup": [], "carry": [],
                    "only_if": "tf-smoke failed on the machine's cuDNN (battery.json)"}
            _append_part(call, bundle, root, part, f"{scratch}/tf-fallback.tar.xz")
            extra.append(call)
        if extra:
            extra[-1].update(framework="tf", stages=list(out[first_tf]["stages"]),
                             estimate_s=out[first_tf]["estimate_s"])
            extra[-1]["setup"] += [f"tar xJf {scratch}/tf-fallback.tar.xz -C {scratch}/tfgpu",
                                   activate]
            out[first_tf + 1:first_tf + 1] = extra
    tree = travelling_bytes(root)
    commit = checkout_commit()  # the device's copy of the checkout has no .git to ask
    for call in out:
        # the checkout first, before the bundle's folder that activate.sh put on PYTHONPATH
        run = ((f"{COMMIT_ENV}={commit} " if commit else "")
               + "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -m benchmarks.gpu_battery "
               "--framework " + call["framework"]
               + "".join(f" --stage {s}" for s in call["stages"])
               + "".join(f" {shown(o)}" for o in data_options)
               + f" --time-left {STAGE_LIMIT_S} --out {scratch}/battery --pack \"$OUT\""
               if call["stages"] else "true")
        call["setup"] = " && ".join(call["setup"])
        call["bash"] = " && ".join(x for x in (call["setup"], run) if x)
        call["carry"] = sorted(set(call["carry"]))
        call["carry_bytes"] = sum(f.stat().st_size for c in call["carry"]
                                  for f in ([root / c] if (root / c).is_file()
                                            else (root / c).rglob("*")) if f.is_file())
        if len(call["bash"]) > CALL_CHARS:
            raise SystemExit(f"gpu_battery.py: a device call would hold {len(call['bash'])} "
                             f"characters, over {CALL_CHARS}")
        if tree + call["carry_bytes"] > CARRY_BYTES:
            fits = part_bytes_that_fit(tree) // 2**20
            raise SystemExit(
                f"gpu_battery.py: a device call would bring {call['carry_bytes'] / 2**20:.1f} "
                f"MiB beside the checkout's {tree / 2**20:.1f} MiB, over "
                f"{CARRY_BYTES / 2**20:.0f} MiB" + (
                    f"; split the bundle's parts smaller: python -m benchmarks.gpu_battery "
                    f"--bundle {bundle.relative_to(root)} --split-parts {fits}"
                    if bundle is not None and fits > 0 else ""))
    return out
