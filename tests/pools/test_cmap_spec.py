"""The official CMAP spec test files, on each front end (see ``cmap_runner``)."""

from __future__ import annotations

import pytest

from cmap_runner import (
    CMAP_DIR,
    FRONT_ENDS,
    SPEC_FILES,
    check_outcome,
    load,
    missing_reason,
    run_async_file,
    run_threads,
    run_trio_file,
)
from services import skip_or_fail

FILES = sorted(p.name for p in CMAP_DIR.glob("*.json")) if CMAP_DIR.is_dir() else []


def _param(name: str) -> object:
    # Integration files need a server's fail point; here they run as emulations of it.
    style = load(name)["style"]
    label = name.removesuffix(".json") + ("-emulated" if style == "integration" else "")
    return pytest.param(name, id=label)


def test_spec_files_present() -> None:
    """The one place that reports missing spec files: skipped with the count of cases that did
    not run, or failed under POOLKIT_REQUIRE_SERVICES=1."""
    if not FILES:
        skip_or_fail(missing_reason(CMAP_DIR))
    assert len(FILES) == SPEC_FILES
    styles = [load(n)["style"] for n in FILES]
    assert styles.count("unit") == 26
    assert styles.count("integration") == 7


@pytest.mark.spec
@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize("name", [_param(n) for n in FILES])
def test_cmap(name: str, front_end: str) -> None:
    spec = load(name)
    runner = {"asyncio": run_async_file, "threads": run_threads, "trio": run_trio_file}[front_end]
    events, error = runner(spec)
    check_outcome(spec, events, error)


if not FILES:
    # Not collected at all, rather than skipped as "got empty parameter set": the missing files
    # are reported once, by test_spec_files_present.
    del test_cmap
