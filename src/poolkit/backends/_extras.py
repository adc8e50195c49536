"""Importing a backend's driver, or saying which extra installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..driver import pip_install


def require(module: str, extra: str, backend: str) -> ModuleType:
    """``module`` imported, or an ``ImportError`` naming the ``pip install`` that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"poolkit.backends.{backend} needs {module.split('.')[0]}: {pip_install(extra)}"
        ) from exc
