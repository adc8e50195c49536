"""The soak script (``tests/support/soak.py``) as CI runs it: a few seconds of both front ends,
which must pass, and a leak made on purpose, which its memory verdict must catch.

Each runs the documented command in a subprocess (its own tracemalloc, logging and switch
interval), with warnings as errors as in the test suite. The leak's run is marked ``timing``:
its verdict needs enough operations in the few seconds it runs (the verdict's floor passes a
run too short to tell), which a loaded machine did not make (133 KB per 1,000 operations judged
OK); the verdict itself is checked on samples made up here, whatever the machine. The leak is
1 KiB an operation, so 64 operations in the fitted window pass the floor: a 64-byte leak needed
1,024, and a slow machine's run made 770 there (CI: 59 KiB fitted, judged OK).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from soak import HEAP_BOUND, HEAP_FLOOR, Sample, memory_verdict

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


@pytest.mark.timing  # (how many operations 3 s hold: see the module's docstring)
def test_the_memory_verdict_catches_a_leak() -> None:
    run = soak("--minutes", "0.05", "--front", "threads", "--self-check-leak", "1024")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "memory: FAILED: the heap grows with the operations" in run.stdout, run.stdout
    assert "largest growth by line" in run.stdout


def samples(ops: int, leak: float, noise: int = 0, n: int = 20) -> list[Sample]:
    """``n`` samples over 10 s, ``ops`` operations in all, the heap growing ``leak`` bytes per
    operation from 5 MiB, give or take ``noise`` bytes (alternating: the state in flight)."""
    out = []
    for i in range(n):
        done = ops * i // (n - 1)
        heap = 5 * 2**20 + int(leak * done) + (noise if i % 2 else -noise)
        out.append(
            Sample(
                t=10 * i / (n - 1),
                ops=done,
                heap=heap,
                blocks=0,
                rss=0,
                threads=1,
                tasks=0,
                conns=4,
            )
        )
    return out


def test_the_memory_verdict_on_made_up_samples() -> None:
    """The verdict of ``test_the_memory_verdict_catches_a_leak`` without a run: fits over the
    second half (from 5 s), fails a leak past the bound once the growth passes the floor."""
    leak = memory_verdict(samples(200_000, leak=133), start=5.0)
    assert not leak.ok and leak.text.startswith("FAILED: the heap grows with the operations")
    assert leak.slope == pytest.approx(133, rel=0.01) and leak.growth > HEAP_FLOOR
    small = memory_verdict(samples(200_000, leak=HEAP_BOUND / 2), start=5.0)
    assert small.ok and small.text.startswith("OK")
    noisy = memory_verdict(samples(200_000, leak=0, noise=40_000), start=5.0)
    assert noisy.ok
    # the same leak over too few operations to tell (a loaded machine's 3 s): the floor passes it
    short = memory_verdict(samples(800, leak=133), start=5.0)
    assert short.ok and short.growth <= HEAP_FLOOR
    assert memory_verdict(samples(0, leak=0), start=5.0).text == "too few samples to fit"
