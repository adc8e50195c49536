from __future__ import annotations

import os

import pytest

#: set in CI: a test whose service or data is missing fails instead of skipping
REQUIRE = os.environ.get("POOLKIT_REQUIRE_SERVICES") == "1"


@pytest.fixture(params=["asyncio", "threads"])
def front_kind(request: pytest.FixtureRequest) -> str:
    """Which front end a scenario of ``frontends.drive`` runs on: each test runs on both."""
    return str(request.param)


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``, or fail with it when POOLKIT_REQUIRE_SERVICES=1."""
    if REQUIRE:
        pytest.fail(f"{reason} (POOLKIT_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


class Conn:
    """A connection double that counts its closes."""

    def __init__(self, cid: int) -> None:
        self.id = cid
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
