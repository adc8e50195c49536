"""How to install an optional part of poolkit, for the messages that say one is missing."""

from __future__ import annotations

__all__ = ["pip_install"]


def pip_install(extra: str) -> str:
    """The ``pip install`` that provides ``extra``, from the package index and from a checkout of
    poolkit's sources (where ``poolkit[extra]`` would fetch the index's poolkit, or fail)."""
    return f"pip install 'poolkit[{extra}]', or pip install '.[{extra}]' in a checkout"
