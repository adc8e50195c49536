"""``python benchmarks/sa_pool_path.py``: SQLAlchemy's async pool as shipped, on the fair queue,
and poolkit's drop-in, driven in turns on null connections, as a user runs it (a subprocess,
bounded: a pool that loses a connection hangs its waiters). No figure is compared with an
expectation (the machine is shared): only that each pool ran and was reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("greenlet")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sa_pool_path.py"
LABELS = (
    "SQLAlchemy AsyncAdaptedQueuePool (as shipped)",
    "SQLAlchemy AsyncAdaptedQueuePool (fair queue)",
    "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool",
)


def run(*args: str) -> str:
    ran = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "2", "--seconds", "0.05", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    return out


def assert_reported(out: str, labels: tuple[str, ...]) -> None:
    """Each of ``labels`` has its line, with operations and CPU; the first (the reference) has
    a ratio of 1.000 to itself."""
    for label in labels:
        line = re.search(
            rf"{re.escape(label)} +([\d,]+) ops/s +(\d+\.\d\d) µs/op  CPU / as shipped "
            r"(\d\.\d{3}) \((\d\.\d{3})-(\d\.\d{3})\)",
            out,
        )
        assert line, (label, out)
        assert int(line[1].replace(",", "")) > 0 and float(line[2]) > 0, out
        if label == labels[0]:  # (the reference, against itself)
            assert line[3] == line[4] == line[5] == "1.000", out


@pytest.mark.parametrize(("tasks", "hold"), [("6", "2"), ("2", "1")])
def test_each_pool_runs_in_turns_and_is_reported(tasks: str, hold: str) -> None:
    out = run("--tasks", tasks, "--size", "2", "--hold", hold)
    head = f"{tasks} tasks on 2 null connections, held {hold} loop turns; 2 rounds of 0.05 s"
    assert head in out, out
    assert_reported(out, LABELS)


THREAD_LABELS = ("SQLAlchemy QueuePool (as shipped)", "poolkit.backends.sqlalchemy.QueuePool")


def test_on_threads_queuepool_and_its_drop_in_run_in_turns_and_are_reported() -> None:
    out = run("--threads", "--tasks", "4", "--size", "2", "--hold", "1")
    head = "4 threads on 2 null connections, held 1 sleep(0) calls; 2 rounds of 0.05 s"
    assert head in out, out
    assert_reported(out, THREAD_LABELS)
    assert "AsyncAdaptedQueuePool" not in out, out  # (the async pools are not run)


def test_a_hold_that_never_yields_is_refused() -> None:
    ran = subprocess.run(
        [sys.executable, str(SCRIPT), "--hold", "0"], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 2 and "--hold must be at least 1, got 0" in ran.stderr, ran.stderr
