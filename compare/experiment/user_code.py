"""The user's own Python, loaded once for every reader of it: a FILE.py by its path, or an
importable package.module, as a module; any failure of the user's code one line."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module(where: str, prefix: str) -> ModuleType:
    """The module at `where` (FILE.py, or package.module); a file's module registered in
    sys.modules as `<prefix>_<stem>` (torch.fx and dataclasses look classes up there).
    ValueError in one line naming `where` and what went wrong."""
    try:
        if not where.endswith(".py"):
            return importlib.import_module(where)
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ValueError(f"{where}: no such file")
        spec = importlib.util.spec_from_file_location(f"{prefix}_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"{where}: Python cannot load it as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is one line
        raise ValueError(f"{where} did not load: {type(exc).__name__}: {exc}") from None
