"""Where the official spec test files are (``shared/spec-tests``), for every runner of them:
``POOLKIT_SPEC_TESTS`` names the spec-tests folder (or one of its suites' folders, which leads
to the others), else ``../shared/spec-tests`` beside the clone; and how a runner says they are
missing."""

from __future__ import annotations

import os
from pathlib import Path

#: where the spec files are when ``POOLKIT_SPEC_TESTS`` is not set: ``../shared/spec-tests``
#: beside the clone
DEFAULT_SPEC_DIR = Path(__file__).resolve().parents[3] / "shared" / "spec-tests"


#: the spec-tests folder's suites, each in a folder of that name (the README lets
#: ``POOLKIT_SPEC_TESTS`` name any of them: the others are its siblings)
SUITES = ("cmap-format", "cmap-logging", "load-balancers", "sdam-load-balanced", "uri-options")


def find_spec_dir(folder: str, setting: str | None) -> Path:
    """The ``folder`` of the spec files (``cmap-format``, ``uri-options``...). ``setting``
    (``POOLKIT_SPEC_TESTS``) names the spec-tests folder, which holds ``folder``; or ``folder``
    itself; or another suite's folder (one of :data:`SUITES`), whose sibling ``folder`` is then
    the one (never that suite's own files); unset or empty, :data:`DEFAULT_SPEC_DIR`."""
    base = Path(setting).expanduser() if setting else DEFAULT_SPEC_DIR
    if base.name == folder:
        return base
    nested = base / folder
    if nested.is_dir():
        return nested
    if base.name in SUITES:  # another suite's folder: its sibling (missing, the runner says so)
        return base.parent / folder
    return base


def where_looked(folder: str, found: Path) -> str:
    """Where the files were looked for (``found``, from :func:`find_spec_dir`), what
    ``POOLKIT_SPEC_TESTS`` said, and what to set: the end of a runner's "did not run" line."""
    looked = str(found)
    if found.name != folder:
        looked = f"{found / folder} or in {found}"
    setting = os.environ.get("POOLKIT_SPEC_TESTS")
    source = f"POOLKIT_SPEC_TESTS={setting}" if setting else "POOLKIT_SPEC_TESTS is not set"
    return (
        f"{looked} ({source}); set POOLKIT_SPEC_TESTS to the spec-tests folder or to its "
        f"{folder} folder"
    )
