"""The suite runs with the pytest plugins common in async projects' environments and without
them: pytest-asyncio (which stopped every run at start-up when its loop-scope option was unset,
since warnings are errors here) is in the ``test`` extra, so every run of the suite, CI's too,
has it loaded; this runs a small part of the suite in a subprocess without it, and with it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from services import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
#: a quick file of the suite (what broke was pytest's start-up and its check of the options)
SAMPLE = "tests/core/test_core_layout.py"


def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, SAMPLE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_pytest_asyncio() -> None:
    ran = pytest_run("-p", "no:asyncio")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "INTERNALERROR" not in ran.stdout + ran.stderr
    assert "Unknown config option" not in ran.stdout + ran.stderr


def test_with_pytest_asyncio() -> None:
    if importlib.util.find_spec("pytest_asyncio") is None:
        skip_or_fail("pytest-asyncio is not installed: pip install -e '.[test]'")
    ran = pytest_run()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "plugins:" in ran.stdout and "asyncio-" in ran.stdout  # (loaded)
    assert "INTERNALERROR" not in ran.stdout + ran.stderr
