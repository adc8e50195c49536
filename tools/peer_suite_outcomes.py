"""What the peer-suite plugins share (``tools/*_suite/poolkit_swap.py``, each loaded by its
``run.py`` with ``-p poolkit_swap`` in the peer's own test suite): which side a run is
(:func:`side`), each test's outcome, noted from pytest's reports and written as JSON lines for
the ``run.py`` to compare (:class:`Outcomes`), and the hooks around them (:class:`Recorder`:
the report header, the tests deselected by name, whether each test built a pool of the side
under test). Each plugin keeps what is its own: how it swaps poolkit's pools in, and how it
notes a pool built. Each ``run.py`` puts ``tools/`` on the suite's ``PYTHONPATH`` beside its own
folder (``tools/peer_suite.py``).

An outcome is ``failed`` if any phase (setup, call, teardown) failed; ``skipped`` for skips and
expected failures; else ``passed``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Generator
from typing import Any

import pytest


def side(env: str, peer: str) -> str:
    """The side this run is: ``$<env>_POOLS``, ``peer`` (the peer's own pools, the default) or
    ``"poolkit"``."""
    pools = os.environ.get(f"{env}_POOLS", peer)
    if pools not in (peer, "poolkit"):
        raise RuntimeError(f"{env}_POOLS must be '{peer}' or 'poolkit', not {pools!r}")
    return pools


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


class Recorder:
    """A plugin's hooks (registered by its ``pytest_configure``), its variables named ``env``_...
    (``own``: what the header calls the peer's pools, ``ours`` poolkit's; ``swapped``: what the
    plugin's swap put where, left empty on the peer's side):

    * the report header says which pools run, and what stands where;
    * ``$<env>_DESELECT`` (a JSON list of ``path::name``, all its parametrizations, or
      ``path::name[param]``, that one) deselects those tests;
    * with ``builds``, each test notes whether it built a pool of the side under test (the
      plugin calls :meth:`built`, or wraps a class with :meth:`noting`);
    * ``$<env>_RESULTS=FILE``: each test's outcome written to FILE (:class:`Outcomes`, with
      ``"built"`` when ``builds``).
    """

    def __init__(self, env: str, own: str, ours: str, *, builds: bool = True) -> None:
        self.env = env
        self.swapped: dict[str, str] = {}
        self.own = own
        self.ours = ours
        self.deselect = frozenset(json.loads(os.environ.get(f"{env}_DESELECT", "[]")))
        self.outcomes = Outcomes()
        #: the tests that built a pool of the side under test (``None``: not noted)
        self.builders: set[str] | None = set() if builds else None
        self.building = False  #: whether the test running now built one

    def built(self) -> None:
        """A pool of the side under test was built (by the test running now)."""
        self.building = True

    def noting(self, cls: type[Any]) -> None:
        """``cls.__init__`` notes that a pool was built (the class's own ``__init__``,
        wrapped)."""
        init = cls.__dict__["__init__"]

        @functools.wraps(init)
        def noted(instance: Any, *args: Any, **kwargs: Any) -> None:
            self.built()
            init(instance, *args, **kwargs)

        cls.__init__ = noted

    def pytest_report_header(self) -> list[str]:
        if not self.swapped:
            return [f"pools: {self.own}"]
        return [f"pools: {self.ours}"] + [f"  {k} = {v}" for k, v in self.swapped.items()]

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        deselect = self.deselect
        if not deselect:
            return
        kept = [
            item
            for item in items
            if item.nodeid not in deselect and item.nodeid.split("[", 1)[0] not in deselect
        ]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in kept])
            items[:] = kept

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, Any]:
        self.building = False
        try:
            return (yield)
        finally:
            if self.building and self.builders is not None:
                self.builders.add(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.outcomes.note(report)

    def pytest_sessionfinish(self) -> None:  # (ends the run: after its last report)
        self.outcomes.write(os.environ.get(f"{self.env}_RESULTS"), self.builders)

    def register(self, config: pytest.Config) -> None:
        """Register the hooks (from the plugin's ``pytest_configure``)."""
        config.pluginmanager.register(self, "poolkit_swap_recorder")
