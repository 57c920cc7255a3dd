"""The same-device guard: a comparison puts both frameworks on the same kind of device.

`pip install -e .` gives a TensorFlow without CUDA libraries beside a CUDA build of
PyTorch, so on a GPU machine `--device auto` would silently set TF-on-CPU against
PyTorch-on-GPU. `compare` and `sweep` ask each framework, in its own process, which device
kind it would train on, and refuse a mixed pair unless --allow-mixed-devices says otherwise.
"""

from __future__ import annotations

import functools

from compare.errors import UserError
from compare.experiment.config import FRAMEWORK_NAMES, RunConfig
from compare.machine import devices
from compare.process import runner


def check_same_device(configs: list[RunConfig]) -> dict[str, str]:
    """The device kind each framework would train on under `--device auto`; a UserError
    when they differ (unless the runs allow mixed devices). Asks each framework once, and
    only when some run says `auto`: `cpu` and `gpu` are the same kind by request."""
    auto = [c for c in configs if c.device == "auto" and not c.allow_mixed_devices]
    if not auto:
        return {}
    frameworks = sorted({c.framework for c in auto})
    if not devices.nvidia_gpus():  # no NVIDIA driver or GPU: every framework trains on the CPU
        return {fw: "cpu" for fw in frameworks}
    environments = dict(zip(frameworks, runner.concurrently(
        [functools.partial(runner.framework_environment, fw) for fw in frameworks])))
    seen = {fw: devices.device_kind(env, "auto") for fw, env in environments.items()}
    kinds = {fw: kind for fw, (kind, _) in seen.items()}
    if len(set(kinds.values())) > 1:
        described = "; ".join(f"{FRAMEWORK_NAMES[fw]} would train on {kind.upper()} (sees "
                              f"{seen[fw][1]})" for fw, kind in kinds.items())
        raise UserError(f"the frameworks would train on different devices: {described}. "
                        f"Install TensorFlow's CUDA libraries (pip install -e '.[gpu]') to use "
                        f"the GPU in both, or pass --device cpu; --allow-mixed-devices runs "
                        f"anyway (the report says so)")
    return kinds
