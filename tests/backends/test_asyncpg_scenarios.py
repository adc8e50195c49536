"""The issue's scenarios on a pool of asyncpg connections made by ``create_pool``: they need the
pool to run the backend's hooks (``test_asyncpg.py`` shows each going wrong without them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

import poolkit
from pg_service import PgServer, SilentProxy, need, pg, wait_until

__all__ = ["pg"]

asyncpg = need("asyncpg")
if TYPE_CHECKING:
    from poolkit.backends import asyncpg as pk_asyncpg
else:
    pk_asyncpg = need("poolkit.backends.asyncpg")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def one_connection(server: PgServer, **kwargs: Any) -> pk_asyncpg.Pool:
    """A pool of one connection: the next caller surely gets the previous caller's session."""
    options = poolkit.PoolOptions(max_size=1)
    app = server.app
    return pk_asyncpg.create_pool(server.dsn, options=options, application_name=app, **kwargs)


class Made:
    """A ``configure`` hook that keeps the connections the pool makes (the connections
    themselves: a test watches one close after the proxy it was handed refuses use)."""

    def __init__(self) -> None:
        self.connections: list[Any] = []

    async def __call__(self, conn: Any) -> None:
        self.connections.append(conn)

    def last_closed(self) -> bool:
        return bool(self.connections[-1].is_closed())


def test_a_set_and_a_transaction_do_not_reach_the_next_caller(pg: PgServer) -> None:
    async def main() -> None:
        async with one_connection(pg) as pool:
            async with pool.connection() as conn:
                default_tz = await conn.fetchval("SHOW timezone")
                pid = conn.get_server_pid()
                await conn.execute("SET timezone = 'Pacific/Chatham'")
                await conn.execute("BEGIN")
                await conn.execute("CREATE TEMP TABLE left_behind (x int)")
            async with pool.connection() as conn:
                assert conn.get_server_pid() == pid  # the same session, cleaned
                assert not conn.is_in_transaction()
                assert await conn.fetchval("SHOW timezone") == default_tz
                assert await conn.fetchval("SELECT to_regclass('left_behind')") is None

    run(main)


def test_a_failed_transaction_does_not_reach_the_next_caller(pg: PgServer) -> None:
    async def main() -> None:
        async with one_connection(pg) as pool:
            with pytest.raises(asyncpg.DivisionByZeroError):
                await fail_in_a_transaction(pool)
            async with pool.connection() as conn:
                assert await conn.fetchval("SELECT 1") == 1
            assert pool.stats().connections_closed.get("error", 0) == 0  # kept: not broken

    run(main)


async def fail_in_a_transaction(pool: pk_asyncpg.Pool | poolkit.AsyncPool[Any]) -> None:
    async with pool.connection() as conn:
        await conn.execute("BEGIN")
        await conn.execute("SELECT 1/0")


def test_a_terminated_connection_is_replaced_unseen_when_checked(pg: PgServer) -> None:
    async def main() -> None:
        made = Made()
        async with one_connection(pg, configure=made) as pool:  # check="closed": no round trip
            async with pool.connection() as conn:
                pid = conn.get_server_pid()
            pg.terminate(pid)
            await wait_until(made.last_closed, "asyncpg to see the connection closed")
            for _ in range(3):
                async with pool.connection() as fresh:
                    assert await fresh.fetchval("SELECT 1") == 1
                    assert fresh.get_server_pid() != pid
            assert pool.stats().connections_closed.get("error") == 1

    run(main)


def test_a_ping_finds_a_dead_connection_the_loop_has_not_noticed(pg: PgServer) -> None:
    async def main() -> None:
        async with one_connection(pg, check="ping") as pool:
            async with pool.connection() as conn:
                pid = conn.get_server_pid()
            pg.terminate(pid)  # (blocks the loop: asyncpg has not read the goodbye yet)
            async with pool.connection() as fresh:
                assert await fresh.fetchval("SELECT 1") == 1
                assert fresh.get_server_pid() != pid

    run(main)


def test_a_ping_with_a_timeout_finds_a_connection_gone_silent(pg: PgServer) -> None:
    """A link a firewall dropped: no error, no close, no answer. The ping times out
    (``hooks_timeout``), the connection is closed (bounded by ``close_timeout``) and the caller
    gets a new one."""

    async def main() -> None:
        async with SilentProxy(pg.dsn) as proxy:
            options = poolkit.PoolOptions(max_size=1)
            async with pk_asyncpg.create_pool(
                proxy.dsn,
                options=options,
                application_name=pg.app,
                check="ping",
                hooks_timeout=0.5,
                close_timeout=0.2,
            ) as pool:
                async with pool.connection() as conn:
                    pid = conn.get_server_pid()
                proxy.freeze()
                async with pool.connection() as fresh:
                    assert await fresh.fetchval("SELECT 1") == 1
                    assert fresh.get_server_pid() != pid

    run(main)


def test_unchecked_a_terminated_connection_gives_one_clear_error(pg: PgServer) -> None:
    async def main() -> None:
        made = Made()
        async with one_connection(pg, check=None, configure=made) as pool:
            async with pool.connection() as conn:
                pid = conn.get_server_pid()
            # (the reset runs in a task of the pool: once it is over the connection is idle)
            await wait_until(lambda: pool.stats().available == 1, "the reset to end")
            pg.terminate(pid)
            await wait_until(made.last_closed, "asyncpg to see the connection closed")
            with pytest.raises(asyncpg.InterfaceError, match="connection is closed"):
                await select_one(pool)
            # is_broken discarded it: the next caller gets a new connection
            async with pool.connection() as fresh:
                assert await fresh.fetchval("SELECT 1") == 1
                assert fresh.get_server_pid() != pid
            assert pool.stats().total == 1

    run(main)


async def select_one(pool: pk_asyncpg.Pool | poolkit.AsyncPool[Any]) -> None:
    async with pool.connection() as conn:
        await conn.fetchval("SELECT 1")


def test_reset_off_leaves_the_session_as_it_was(pg: PgServer) -> None:
    async def main() -> None:
        async with one_connection(pg, reset=False) as pool:
            async with pool.connection() as conn:
                await conn.execute("SET timezone = 'Pacific/Chatham'")
            async with pool.connection() as conn:
                assert await conn.fetchval("SHOW timezone") == "Pacific/Chatham"

    run(main)


def test_server_settings_survive_the_reset_and_configure_runs_once(pg: PgServer) -> None:
    """RESET ALL goes back to the session's defaults: those sent at connect
    (``server_settings``) stay; ``configure`` runs once per connection."""
    configured: list[int] = []

    async def configure(conn: Any) -> None:
        configured.append(conn.get_server_pid())

    async def main() -> None:
        settings = {"search_path": "kept_path"}
        async with one_connection(pg, server_settings=settings, configure=configure) as pool:
            for _ in range(3):
                async with pool.connection() as conn:
                    assert await conn.fetchval("SHOW search_path") == "kept_path"
                    await conn.execute("SET search_path = 'changed'")
        assert len(configured) == 1

    run(main)


def test_the_new_users_workload_with_sessions_left_dirty(pg: PgServer) -> None:
    """10,000 ``SELECT 1`` from 50 tasks on 10 connections; every 50th block leaves a SET and an
    open transaction, every 50th (another) a failed transaction: no caller ever sees either."""

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=10)
        async with pk_asyncpg.create_pool(pg.dsn, options=options, application_name=pg.app) as p:
            async with p.connection() as conn:
                default_tz = await conn.fetchval("SHOW timezone")
            done = failed = 0

            async def task(n: int) -> None:
                nonlocal done, failed
                for i in range(200):
                    try:
                        async with p.connection() as conn:
                            assert not conn.is_in_transaction()
                            assert await conn.fetchval("SELECT 1") == 1
                            if (n + i) % 50 == 0:
                                await conn.execute("SET timezone = 'Pacific/Chatham'; BEGIN")
                            elif (n + i) % 50 == 25:
                                await conn.execute("BEGIN; SELECT 1/0")
                            elif (n + i) % 10 == 5:
                                assert await conn.fetchval("SHOW timezone") == default_tz
                    except asyncpg.DivisionByZeroError:
                        failed += 1
                    done += 1

            await asyncio.gather(*(task(n) for n in range(50)))
            assert done == 10_000
            assert failed == 200
            assert len(pg.pids()) <= 10
            assert p.stats().connections_closed.get("error", 0) == 0

    run(main)
