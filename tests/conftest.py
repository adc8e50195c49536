from __future__ import annotations

import uuid

import pytest

# what a run collected (tests/support/census.py: tests/project/test_readme_timing.py reads it)
import census
import hang_watchdog
from census import (  # noqa: F401
    pytest_collection_finish,
    pytest_deselected,
)
from certs import Cert, self_signed

# the suite's watchdog (tests/support/hang_watchdog.py): a hang ends the run, even one that
# pytest-timeout's signal cannot end (hooks, found here by their names)
from hang_watchdog import (  # noqa: F401
    pytest_configure,
    pytest_runtest_protocol,
    pytest_sessionfinish,
    pytest_unconfigure,
)
from services import REDIS_URL, RedisServer, redis_missing, skip_or_fail

#: the Redis server's answer, asked once per session: the reason it is missing, or None
_redis_answer: list[str | None] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    """pytest-asyncio's ``asyncio_default_fixture_loop_scope``, which pyproject.toml sets (unset,
    pytest-asyncio >= 0.24 warns at start-up, and warnings are errors here), is declared here
    too: without the plugin (or with one older than the option) pytest knows the key instead of
    calling it unknown, another error. Declared the way pytest-asyncio declares it (a string,
    no default), so that with the plugin nothing changes."""
    parser.addini(
        "asyncio_default_fixture_loop_scope",
        "pytest-asyncio's default event loop scope of async fixtures (the suite has none)",
    )
    hang_watchdog.addoption(parser)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the Hypothesis tests' time to shrink a failure (hang_watchdog), then the census
    hang_watchdog.give_hypothesis_time(items)
    census.pytest_collection_modifyitems(config, items)


@pytest.fixture(params=["asyncio", "threads", "trio"])
def front_kind(request: pytest.FixtureRequest) -> str:
    """Which front end a scenario of ``frontends.drive`` runs on: each test runs on each (the
    asyncio pool under asyncio and under trio, the threaded pool)."""
    return str(request.param)


@pytest.fixture(scope="session")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    """A self-signed certificate for localhost / 127.0.0.1 (tests/support/certs.py)."""
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def redis_server() -> RedisServer:
    """The Redis server at ``POOLKIT_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) and a
    client name unique to the test. Skips when redis-py is missing or no server answers ``PING``;
    fails instead with ``POOLKIT_REQUIRE_SERVICES=1``."""
    if not _redis_answer:
        _redis_answer.append(redis_missing(REDIS_URL))
    if _redis_answer[0] is not None:
        skip_or_fail(_redis_answer[0])
    return RedisServer(REDIS_URL, f"poolkit-test-{uuid.uuid4().hex[:12]}")
