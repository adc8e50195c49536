"""What the peer-suite plugins share (``tools/redis_py_suite/poolkit_swap.py``,
``tools/psycopg_pool_suite/poolkit_swap.py``): each test's outcome, noted from pytest's reports
and written as JSON lines for their ``run.py`` to compare. Each ``run.py`` puts ``tools/`` on the
suite's ``PYTHONPATH`` beside its own folder.

An outcome is ``failed`` if any phase (setup, call, teardown) failed; ``skipped`` for skips and
expected failures; else ``passed``.
"""

from __future__ import annotations

import json

import pytest


class Outcomes:
    """The outcome of each test run so far, by node id."""

    def __init__(self) -> None:
        self.by_test: dict[str, str] = {}

    def note(self, report: pytest.TestReport) -> None:
        """``pytest_runtest_logreport``'s report of one phase of a test."""
        outcome = self.by_test.get(report.nodeid)
        if report.failed:
            self.by_test[report.nodeid] = "failed"
        elif outcome == "failed":
            return
        elif report.when == "call":
            self.by_test[report.nodeid] = "skipped" if report.skipped else "passed"
        elif report.skipped:  # (skipped in setup)
            self.by_test[report.nodeid] = "skipped"

    def write(self, path: str | None, built: set[str] | None = None) -> None:
        """Write ``{"nodeid": ..., "outcome": ...}`` lines to ``path`` (nothing if none given),
        each with ``"built"`` (whether the test is in ``built``) when ``built`` is given."""
        if not path:
            return
        with open(path, "w", encoding="utf-8") as out:
            for nodeid, outcome in self.by_test.items():
                entry: dict[str, object] = {"nodeid": nodeid, "outcome": outcome}
                if built is not None:
                    entry["built"] = nodeid in built
                out.write(json.dumps(entry) + "\n")
