"""The services the tests use (a Redis server, for now) and the rule for one that is missing:
skip with the reason, or fail with it under ``POOLKIT_REQUIRE_SERVICES=1`` (as CI runs). The
fixtures that hand them out are in ``tests/conftest.py``; tests import the classes from here."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

#: set in CI: a test whose service or data is missing fails instead of skipping
REQUIRE = os.environ.get("POOLKIT_REQUIRE_SERVICES") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``, or fail with it when POOLKIT_REQUIRE_SERVICES=1."""
    if REQUIRE:
        pytest.fail(f"{reason} (POOLKIT_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


# ---------------------------------------------------------------------- Redis (tests/backends)

#: the Redis server the backend tests use
REDIS_URL = os.environ.get("POOLKIT_REDIS_URL", "redis://127.0.0.1:6379/0")


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


def redis_missing(url: str) -> str | None:
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
