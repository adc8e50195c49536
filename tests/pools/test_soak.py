"""The soak script (``tests/support/soak.py``) as CI runs it: a few seconds of both front ends,
which must pass, and a leak made on purpose, which its memory verdict must catch.

Each runs the documented command in a subprocess (its own tracemalloc, logging and switch
interval), with warnings as errors as in the test suite.
"""

from __future__ import annotations

import os
import subprocess
import sys

SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support", "soak.py")


def soak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", SOAK, "--seed", "1", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_a_short_soak_of_both_front_ends_passes() -> None:
    run = soak("--minutes", "0.05")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "soak passed" in run.stdout
    assert "[threads]" in run.stdout and "[asyncio]" in run.stdout
    assert "memory: OK" in run.stdout


def test_the_memory_verdict_catches_a_leak() -> None:
    run = soak("--minutes", "0.05", "--front", "threads", "--self-check-leak", "64")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "memory: FAILED: the heap grows with the operations" in run.stdout, run.stdout
    assert "largest growth by line" in run.stdout
