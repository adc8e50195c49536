from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from certs import Cert, self_signed

#: set in CI: a test whose service or data is missing fails instead of skipping
REQUIRE = os.environ.get("POOLKIT_REQUIRE_SERVICES") == "1"


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


@pytest.fixture(params=["asyncio", "threads"])
def front_kind(request: pytest.FixtureRequest) -> str:
    """Which front end a scenario of ``frontends.drive`` runs on: each test runs on both."""
    return str(request.param)


@pytest.fixture(scope="session")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    """A self-signed certificate for localhost / 127.0.0.1 (tests/certs.py)."""
    return self_signed(tmp_path_factory.mktemp("tls"))


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


# ---------------------------------------------------------------------- Redis (tests/backends)

#: the Redis server the backend tests use
REDIS_URL = os.environ.get("POOLKIT_REDIS_URL", "redis://127.0.0.1:6379/0")
_redis_answer: list[str | None] = []  # (asked once per session: the reason it is missing)


class RedisServer:
    """The reachable Redis server (``url``) and a client name (``name``) unique to one test, so
    that ``clients()`` finds exactly the connections that test made (``CLIENT LIST``)."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name

    def admin(self) -> Any:
        """A plain redis-py client for looking at (and killing) connections; close it."""
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5, client_name="poolkit-test-admin")

    def clients(self) -> list[dict[str, Any]]:
        """The server's connections named ``name``."""
        with self.admin() as admin:
            return [c for c in admin.client_list() if c.get("name") == self.name]

    def kill_all(self) -> int:
        """``CLIENT KILL`` every connection named ``name``; how many there were."""
        with self.admin() as admin:
            ids = [c["id"] for c in admin.client_list() if c.get("name") == self.name]
            for client_id in ids:
                admin.client_kill_filter(_id=client_id)
            return len(ids)

    def wait_clients(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """``clients()`` once there are ``count`` of them (the server sees a close a moment
        after the client makes it), or as they are after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.clients()
            if len(found) == count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)


@pytest.fixture
def redis_server() -> RedisServer:
    """The Redis server at ``POOLKIT_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) and a
    client name unique to the test. Skips when redis-py is missing or no server answers ``PING``;
    fails instead with ``POOLKIT_REQUIRE_SERVICES=1``."""
    if not _redis_answer:
        _redis_answer.append(_redis_missing(REDIS_URL))
    if _redis_answer[0] is not None:
        skip_or_fail(_redis_answer[0])
    return RedisServer(REDIS_URL, f"poolkit-test-{uuid.uuid4().hex[:12]}")


def _redis_missing(url: str) -> str | None:
    try:
        import redis
    except ImportError:
        return "redis-py is not installed (pip install -e '.[test]')"
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return f"no Redis server answers at {url} ({exc}); start one or set POOLKIT_REDIS_URL"
    finally:
        client.close()
    return None
