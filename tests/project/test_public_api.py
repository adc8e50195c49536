"""The public API, as a snapshot: every public module of poolkit (no underscore in its dotted
name; the bench command's own modules left out, as ``poolkit bench`` is their interface) and the
names it exports. A name that appears or disappears fails this test until the snapshot changes
with it, so that the surface grows or shrinks by a decision, seen in review:

    python tests/project/test_public_api.py > tests/project/public_api.txt

A module exports its ``__all__``; one without ``__all__`` is listed with the public names it
defines, marked ``(no __all__)``."""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
import sys
import types
from pathlib import Path

import poolkit

SNAPSHOT = Path(__file__).with_name("public_api.txt")


def public_modules() -> list[str]:
    names = ["poolkit"]
    for found in pkgutil.walk_packages(poolkit.__path__, "poolkit."):
        parts = found.name.split(".")
        if any(part.startswith("_") for part in parts) or parts[1] in ("bench", "testing"):
            continue
        names.append(found.name)
    names += ["poolkit.bench", "poolkit.testing"]
    return sorted(names)


def exported(module: types.ModuleType) -> tuple[list[str], bool]:
    """``(names, declared)``: ``__all__``, or the public names the module defines."""
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return sorted(declared), True
    names = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    ]
    return sorted(names), False


def snapshot() -> str:
    lines: list[str] = []
    for name in public_modules():
        module = importlib.import_module(name)
        names, declared = exported(module)
        lines.append(f"{name}{'' if declared else '  (no __all__)'}")
        lines += [f"    {exported_name}" for exported_name in names]
    return "\n".join(lines) + "\n"


def test_every_name_in_an_all_is_public_and_there() -> None:
    for name in public_modules():
        module = importlib.import_module(name)
        for exported_name in getattr(module, "__all__", ()):
            assert not exported_name.startswith("_"), f"{name}.__all__ lists {exported_name}"
            assert hasattr(module, exported_name), f"{name}.__all__ lists a missing name"


def test_every_public_module_declares_its_all() -> None:
    """What a public module exports is a decision written down (``__all__``), not whatever it
    happens to define; a module with nothing to export is private (an underscore)."""
    missing = [name for name in public_modules() if not exported(importlib.import_module(name))[1]]
    assert not missing, f"public modules without __all__: {missing}"


def test_the_public_api_is_the_snapshot() -> None:
    now = snapshot()
    before = SNAPSHOT.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            now.splitlines(keepends=True),
            "tests/project/public_api.txt",
            "the package now",
        )
    )
    assert not diff, (
        "the public API changed; if that is the decision, write the snapshot again "
        f"(python tests/project/test_public_api.py > tests/project/public_api.txt):\n{diff}"
    )


if __name__ == "__main__":
    sys.stdout.write(snapshot())
