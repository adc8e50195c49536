"""redis-py's observability through the drop-in pools, as through redis-py's own: its metrics
(connection create time, wait time, connection counts by state, recorded with OpenTelemetry) and
its ``AfterConnectionReleasedEvent`` (redis-py's re-authentication listens to it).

The metrics need a global OpenTelemetry meter provider, which a process sets once: they are
measured in a child process, the same steps through redis-py's pools and through poolkit's.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.event

from poolkit.backends import redis as pk_redis
from services import RedisServer

#: the child: the same steps on each pool class, one after the other; what each added to the
#: metrics, with two connections out and at the end
CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    import redis, redis.asyncio
    from redis.observability.config import MetricGroup, OTelConfig
    from redis.observability.providers import get_observability_instance
    from poolkit.backends import redis as pk
    get_observability_instance().init(OTelConfig(
        metric_groups=[MetricGroup.CONNECTION_BASIC, MetricGroup.CONNECTION_ADVANCED]))
    url, name = sys.argv[1], sys.argv[2]
    SYNC = {"redis": redis.ConnectionPool, "redis-blocking": redis.BlockingConnectionPool,
            "poolkit": pk.ConnectionPool, "poolkit-blocking": pk.BlockingConnectionPool}
    ASYNC = {"redis": redis.asyncio.ConnectionPool,
             "redis-blocking": redis.asyncio.BlockingConnectionPool,
             "poolkit": pk.AsyncConnectionPool, "poolkit-blocking": pk.AsyncBlockingConnectionPool}

    def snapshot():
        out, data = {}, reader.get_metrics_data()
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        attrs = dict(point.attributes)
                        key = metric.name
                        if "db.client.connection.state" in attrs:
                            key += ":" + attrs["db.client.connection.state"]
                        value = getattr(point, "count", None)
                        if value is None:
                            value = point.value
                        out[key] = out.get(key, 0) + value
        return out

    def added(now, before):
        keys = set(now) | set(before)
        return {k: now.get(k, 0) - before.get(k, 0) for k in sorted(keys)
                if now.get(k, 0) != before.get(k, 0)}

    result, pools = {}, []
    for kind, cls in SYNC.items():
        pool = cls.from_url(url, max_connections=4, client_name=name)
        pools.append(pool)
        before = snapshot()
        held = [pool.get_connection() for _ in range(3)]
        for c in held:
            pool.release(c)
        held = [pool.get_connection() for _ in range(2)]
        result["sync-" + kind + ":2 out"] = added(snapshot(), before)
        for c in held:
            pool.release(c)
        result["sync-" + kind] = added(snapshot(), before)

    async def main():
        for kind, cls in ASYNC.items():
            pool = cls.from_url(url, max_connections=4, client_name=name)
            before = snapshot()
            held = [await pool.get_connection() for _ in range(3)]
            for c in held:
                await pool.release(c)
            held = [await pool.get_connection() for _ in range(2)]
            result["async-" + kind + ":2 out"] = added(snapshot(), before)
            for c in held:
                await pool.release(c)
            result["async-" + kind] = added(snapshot(), before)
            await pool.aclose()

    asyncio.run(main())
    for pool in pools:
        pool.close()
    print(json.dumps(result))
    """
)


def test_metrics_recorded_as_by_redis_py_pools(redis_server: RedisServer) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")
    run = subprocess.run(
        [sys.executable, "-c", CHILD, redis_server.url, redis_server.name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    result: dict[str, dict[str, Any]] = json.loads(run.stdout.strip().splitlines()[-1])
    timings = ("db.client.connection.create_time", "db.client.connection.wait_time")
    for side in ("sync", "async"):
        for blocking in ("", "-blocking"):
            ours, theirs = f"{side}-poolkit{blocking}", f"{side}-redis{blocking}"
            for moment in ("", ":2 out"):
                for name in timings:  # (recorded as redis-py's pools record them)
                    got = result[ours + moment].get(name)
                    assert got == result[theirs + moment].get(name), (ours + moment, result)
            # the counts by state, balanced (redis-py's asyncio BlockingConnectionPool counts
            # each release, not the hand-outs: its counts drift by two per use)
            assert result[ours + ":2 out"]["db.client.connection.count:used"] == 2
            assert result[ours + ":2 out"]["db.client.connection.count:idle"] == 1
            assert result[ours]["db.client.connection.count:idle"] == 3
            assert "db.client.connection.count:used" not in result[ours]
    assert result["sync-poolkit-blocking"] == {
        "db.client.connection.create_time": 3,  # (3 connections made, each recorded once)
        "db.client.connection.count:idle": 3,  # (and given back)
        "db.client.connection.wait_time": 5,  # (a blocking pool's 5 hand-outs)
    }
    assert result["sync-redis"] == result["sync-poolkit"]  # (all alike without waits)


class _Released(redis.event.EventListenerInterface):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def listen(self, event: object) -> None:
        self.seen.append(event)


class _AsyncReleased(redis.event.AsyncEventListenerInterface):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def listen(self, event: object) -> None:
        self.seen.append(event)


@pytest.mark.parametrize("cls", [pk_redis.ConnectionPool, pk_redis.BlockingConnectionPool])
def test_released_event_as_redis_py(cls: Any, redis_server: RedisServer) -> None:
    listener = _Released()
    dispatcher = redis.event.EventDispatcher()
    dispatcher.register_listeners({redis.event.AfterConnectionReleasedEvent: [listener]})
    pool = cls.from_url(
        redis_server.url, event_dispatcher=dispatcher, client_name=redis_server.name
    )
    try:
        connection = pool.get_connection()
        pool.release(connection)
        pool.release(connection)  # (not out: no event, as redis-py)
        assert [event.connection for event in listener.seen] == [connection]
    finally:
        pool.close()


@pytest.mark.parametrize(
    "cls", [pk_redis.AsyncConnectionPool, pk_redis.AsyncBlockingConnectionPool]
)
def test_async_released_event_as_redis_py(cls: Any, redis_server: RedisServer) -> None:
    async def main() -> None:
        listener = _AsyncReleased()
        dispatcher = redis.event.EventDispatcher()
        dispatcher.register_listeners({redis.event.AsyncAfterConnectionReleasedEvent: [listener]})
        pool = cls.from_url(
            redis_server.url, event_dispatcher=dispatcher, client_name=redis_server.name
        )
        try:
            connection = await pool.get_connection()
            await pool.release(connection)
            await pool.release(connection)
            assert [event.connection for event in listener.seen] == [connection]
        finally:
            await pool.aclose()

    asyncio.run(main())


class _Token:
    """A re-authentication token (what redis-py's credential providers hand the pool)."""

    def try_get(self, key: str) -> str:
        return "user"

    def get_value(self) -> str:
        return "secret"


@pytest.mark.parametrize("cls", [pk_redis.ConnectionPool, pk_redis.BlockingConnectionPool])
def test_a_token_set_by_re_auth_callback_re_authenticates_a_connection_given_back(
    cls: Any, redis_server: RedisServer
) -> None:
    # The pool's own dispatcher (none given): releases dispatch nothing until a token is set,
    # then redis-py's ReAuthConnectionListener re-authenticates each connection given back.
    pool = cls.from_url(redis_server.url, client_name=redis_server.name)
    try:
        connection = pool.get_connection()
        calls: list[object] = []
        connection.re_auth = lambda: calls.append(connection)  # (no AUTH sent to the server)
        pool.release(connection)
        assert calls == []  # nothing set: nothing dispatched
        again = pool.get_connection()
        assert again is connection
        pool.re_auth_callback(_Token())
        assert connection._re_auth_token is not None
        pool.release(connection)
        assert calls == [connection]
    finally:
        pool.close()


@pytest.mark.parametrize(
    "cls", [pk_redis.AsyncConnectionPool, pk_redis.AsyncBlockingConnectionPool]
)
def test_async_a_token_set_by_re_auth_callback_re_authenticates_a_connection_given_back(
    cls: Any, redis_server: RedisServer
) -> None:
    async def main() -> None:
        pool = cls.from_url(redis_server.url, client_name=redis_server.name)
        try:
            connection = await pool.get_connection()
            calls: list[object] = []

            async def re_auth() -> None:
                calls.append(connection)

            connection.re_auth = re_auth
            await pool.release(connection)
            assert calls == []
            assert await pool.get_connection() is connection
            await pool.re_auth_callback(_Token())
            await pool.release(connection)
            assert calls == [connection]
        finally:
            await pool.aclose()

    asyncio.run(main())
