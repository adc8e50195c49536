"""What a pytest run collected, for ``tests/project/test_readme_timing.py``: the tests marked
``timing`` among all it collected (before any deselection) and those it deselected.

Its hooks are ``tests/conftest.py``'s (imported there by name, as ``hang_watchdog``'s): every run
notes its census in ``config.stash[CENSUS]`` (one look at each test's markers, once per
collection), so that a plain run of the whole suite, the README's command, can check what it left
out without collecting the suite again. With ``$POOLKIT_CENSUS`` set to a path, a run also writes
its census there as JSON when its collection ends (what a ``--collect-only`` run in a subprocess
reports).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

__all__ = [
    "CENSUS",
    "ENV",
    "Census",
    "pytest_collection_finish",
    "pytest_collection_modifyitems",
    "pytest_deselected",
]

#: the environment variable naming the file a run writes its census to
ENV = "POOLKIT_CENSUS"


@dataclasses.dataclass
class Census:
    """One run's collection: how many tests it collected, the node ids of those marked
    ``timing`` and of those deselected (by ``-m``, ``-k``, ``--deselect``...)."""

    collected: int = 0
    timing: set[str] = dataclasses.field(default_factory=set)
    deselected: set[str] = dataclasses.field(default_factory=set)

    def write(self, path: Path) -> None:
        path.write_text(
            json.dumps(
                {
                    "collected": self.collected,
                    "timing": sorted(self.timing),
                    "deselected": sorted(self.deselected),
                }
            ),
            encoding="utf-8",
        )

    @classmethod
    def read(cls, path: Path) -> Census:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(int(data["collected"]), set(data["timing"]), set(data["deselected"]))


CENSUS = pytest.StashKey[Census]()


@pytest.hookimpl(tryfirst=True)  # (before the deselections: every test collected)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    census = config.stash[CENSUS] = Census()
    census.collected = len(items)
    census.timing = {item.nodeid for item in items if item.get_closest_marker("timing")}


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        census = items[0].config.stash.get(CENSUS, None)
        if census is not None:
            census.deselected.update(item.nodeid for item in items)


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ.get(ENV)
    census = session.config.stash.get(CENSUS, None)
    if path and census is not None:
        census.write(Path(path))
