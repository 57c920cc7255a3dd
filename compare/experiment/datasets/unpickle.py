"""Read the official CIFAR-10 python batches without letting a pickle run code."""

from __future__ import annotations

import io
import pickle
from typing import Any

from compare.errors import DataError


class ArrayUnpickler(pickle.Unpickler):
    """Unpickle the official batches, allowing numpy arrays and nothing executable."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("numpy", "ndarray"),
               ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def unpickle(raw: bytes, what: str) -> dict:
    """A batch's dict with str keys; DataError naming `what` for anything else."""
    try:
        obj = ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # any malformed pickle
        raise DataError(f"{what} is not a CIFAR-10 python batch "
                        f"({exc.__class__.__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{what} is not a CIFAR-10 python batch "
                        f"(a {type(obj).__name__}, not a dict)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}
