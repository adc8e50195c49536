"""poolkit's asyncpg drop-in (``poolkit.backends.asyncpg.Pool``, what ``create_pool`` returns):
asyncpg's pool's methods and their behaviour, against a real PostgreSQL (issue 39, point 2).
asyncpg's own ``tests/test_pool.py`` runs against it too (tools/asyncpg_suite); these tests
cover what that suite does not run with it (the tests it skips read asyncpg's private
attributes) and poolkit's additions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import pytest

from pg_service import PgServer, need, pg, wait_until

__all__ = ["pg"]

asyncpg = need("asyncpg")
if TYPE_CHECKING:
    from poolkit.backends import asyncpg as pk
else:
    pk = need("poolkit.backends.asyncpg")


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def make(server: PgServer, **kwargs: Any) -> pk.Pool:
    kwargs.setdefault("min_size", 1)
    kwargs.setdefault("max_size", 1)
    return pk.create_pool(server.dsn, application_name=server.app, **kwargs)


def test_the_signature_and_defaults_are_asyncpgs() -> None:
    import inspect

    theirs = inspect.signature(asyncpg.create_pool).parameters
    ours = inspect.signature(pk.create_pool).parameters
    for name, parameter in theirs.items():
        assert name in ours, name
        if name not in ("min_size", "max_size", "max_inactive_connection_lifetime"):
            assert ours[name].default == parameter.default, name  # (those three: None = asyncpg's)
    assert ours["max_queries"].default == 50000


def test_max_queries_closes_a_connection_after_that_many_queries(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg, max_queries=3) as pool:
            async with pool.acquire() as con:
                first = con.get_server_pid()
                for _ in range(3):
                    await con.fetchval("SELECT 1")
            async with pool.acquire() as con:
                second = con.get_server_pid()
                assert second != first  # (the first was closed at its release)
                await con.fetchval("SELECT 1")
            async with pool.acquire() as con:
                assert con.get_server_pid() == second  # (1 query + the reset: under 3)
        pg.wait_sessions(0)

    run(main)


def test_max_queries_holds_for_poolkits_connection_block_too(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg, max_queries=2) as pool:
            async with pool.connection() as con:
                first = con.get_server_pid()
                await con.fetchval("SELECT 1")
                await con.fetchval("SELECT 1")
            async with pool.connection() as con:
                assert con.get_server_pid() != first

    run(main)


def test_setup_runs_at_each_acquire_on_the_proxy_and_a_failing_one_closes(pg: PgServer) -> None:
    seen: list[Any] = []

    async def setup(con: Any) -> None:
        seen.append(con)
        if len(seen) == 2:
            raise RuntimeError("setup failed")

    async def main() -> None:
        async with make(pg, setup=setup) as pool:
            async with pool.acquire() as con:
                assert seen == [con]
                first = con.get_server_pid()
            with pytest.raises(RuntimeError, match="setup failed"):
                await pool.acquire()
            assert seen[1].is_closed()
            async with pool.acquire() as con:
                assert seen[2] is con and con.get_server_pid() != first

    run(main)


def test_release_refuses_what_is_not_its_own_and_tolerates_a_second_release(
    pg: PgServer,
) -> None:
    async def main() -> None:
        async with make(pg) as pool, make(pg) as other:
            con = await pool.acquire()
            with pytest.raises(asyncpg.InterfaceError, match="is not a member of this pool"):
                await other.release(con)
            with pytest.raises(asyncpg.InterfaceError, match="is not a member of this pool"):
                await pool.release(con._con)  # type: ignore[attr-defined]
            await pool.release(con)
            await pool.release(con)  # (released already: nothing, as asyncpg's)
            with pytest.raises(asyncpg.InterfaceError, match="released back to the pool"):
                await con.fetchval("SELECT 1")
            assert pool.get_idle_size() == 1

    run(main)


def test_release_resets_the_session(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg) as pool:
            con = await pool.acquire()
            await con.execute("SET application_name = 'changed'")
            await pool.release(con)
            async with pool.acquire() as con:
                assert await con.fetchval("SHOW application_name") == pg.app

    run(main)


def test_acquire_times_out_with_timeouterror_and_loses_nothing(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg) as pool:
            held = await pool.acquire()
            with pytest.raises(TimeoutError):
                await pool.acquire(timeout=0.05)
            await pool.release(held)
            assert (pool.get_size(), pool.get_idle_size()) == (1, 1)
            assert pool.stats().waiting == 0

    run(main)


def test_expire_connections_replaces_idle_and_in_use_connections(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg, min_size=2, max_size=2) as pool:
            held = await pool.acquire()
            old = {held.get_server_pid(), *pg.pids()}
            await pool.expire_connections()
            await pool.release(held)  # (closed: of an expired generation)
            async with pool.acquire() as a, pool.acquire() as b:
                assert not {a.get_server_pid(), b.get_server_pid()} & old

    run(main)


def test_set_connect_args_takes_effect_for_new_connections(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg) as pool:
            pool.set_connect_args(pg.dsn, server_settings={"search_path": "changed"})
            await pool.expire_connections()
            async with pool.acquire() as con:
                assert await con.fetchval("SHOW search_path") == "changed"

    run(main)


def test_close_waits_for_acquired_connections_to_be_released(pg: PgServer) -> None:
    async def main() -> None:
        pool = await make(pg)
        con = await pool.acquire()
        closing = asyncio.ensure_future(pool.close())
        await asyncio.sleep(0.1)
        assert not closing.done() and pool.is_closing()
        with pytest.raises(asyncpg.InterfaceError, match="pool is closing"):
            await pool.acquire()
        await pool.release(con)
        await asyncio.wait_for(closing, 5)
        with pytest.raises(asyncpg.InterfaceError, match="pool is closed"):
            await pool.acquire()
        pg.wait_sessions(0)

    run(main)


def test_terminate_aborts_every_connection(pg: PgServer) -> None:
    async def main() -> None:
        pool = await make(pg, min_size=2, max_size=2)
        con = await pool.acquire()
        pool.terminate()
        assert pool.is_closing()
        assert con._con.is_closed()  # type: ignore[attr-defined]
        await wait_until(lambda: pg.pids() == [], "the sessions to end")

    run(main)


def test_sizes_and_queries_on_the_pool(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg, min_size=2, max_size=3, init_size=2) as pool:
            assert (pool.get_min_size(), pool.get_max_size(), pool.get_init_size()) == (2, 3, 2)
            assert (pool.get_size(), pool.get_idle_size()) == (2, 2)
            async with pool.acquire():
                assert (pool.get_size(), pool.get_idle_size()) == (2, 1)
            assert await pool.fetchval("SELECT $1::int", 7) == 7
            assert (await pool.fetchrow("SELECT 1 AS a"))["a"] == 1
            assert [r[0] for r in await pool.fetch("SELECT generate_series(1, 3)")] == [1, 2, 3]
            assert await pool.execute("SELECT 1") == "SELECT 1"

    run(main)


def test_a_pool_not_awaited_or_awaited_twice_says_so(pg: PgServer) -> None:
    async def main() -> None:
        pool = make(pg)
        with pytest.raises(asyncpg.InterfaceError, match="pool is not initialized"):
            await pool.acquire()
        assert await pool is pool
        assert await pool is pool  # (awaiting again: the same pool)
        await pool.close()
        await pool.close()  # (closed already: nothing)

    run(main)


def test_bad_arguments_are_refused_with_asyncpgs_messages() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_queries": 0}, "max_queries is expected to be greater than zero"),
        ({"min_size": 3, "max_size": 2}, "min_size is greater than max_size"),
        ({"min_size": 2, "init_size": 1}, "init_size is smaller than min_size"),
        ({"max_inactive_connection_lifetime": -1}, "max_inactive_connection_lifetime is expected"),
    ]
    for kwargs, says in cases:
        with pytest.raises(ValueError, match=says):
            pk.create_pool("postgresql://nowhere", **kwargs)
    with pytest.raises(TypeError, match="connection_class is expected to be a subclass"):
        pk.create_pool("postgresql://nowhere", connection_class=int)  # type: ignore[arg-type]


def test_terminate_outside_the_loop_leaves_nothing_to_reconnect(pg: PgServer) -> None:
    """asyncpg's test harness terminates its pools between tests, outside the loop, then runs
    the next test on the same loop: the pool must not refill ``min_size`` there."""
    loop = asyncio.new_event_loop()
    try:
        pool = loop.run_until_complete(make(pg, min_size=2, max_size=2)._async__init__())
        assert len(pg.pids()) == 2
        pool.terminate()
        loop.run_until_complete(asyncio.sleep(1.5))  # (past the pool's background interval)
        assert pool.stats().total == 0
        assert pg.pids() == []
    finally:
        loop.close()


# ------------------------------------------------------------ asyncpg's tests that read _queue
# (tools/asyncpg_suite skips them: they count asyncpg's queue of holders; here the same races,
# with the pool's public counts and an acquire that must be served)


_Connection: Any = asyncpg.Connection


class SlowResetConnection(_Connection):  # type: ignore[misc]
    async def reset(self, *, timeout: float | None = None) -> None:
        await asyncio.sleep(0.2)
        await super().reset(timeout=timeout)


class SlowCancelConnection(_Connection):  # type: ignore[misc]
    async def _cancel(self, waiter: Any, cancel_waiter: Any = None) -> None:
        await asyncio.sleep(0.2)
        await super()._cancel(waiter, cancel_waiter)


async def _all_back(pool: pk.Pool) -> None:
    await asyncio.sleep(0.5)  # (the cleanup ends)
    assert (pool.get_size(), pool.get_idle_size()) == (1, 1)
    async with pool.acquire(timeout=1) as con:
        assert await con.fetchval("SELECT 1") == 1


@pytest.mark.parametrize("where", ["acquire", "release", "query"])
def test_a_task_cancelled_in_acquire_release_or_a_query_gives_its_connection_back(
    pg: PgServer, where: str
) -> None:
    classes = {"release": SlowResetConnection, "query": SlowCancelConnection}

    async def worker(pool: pk.Pool) -> None:
        async with pool.acquire(timeout=100) as con:
            if where == "query":
                await con.execute("SELECT pg_sleep(10)")

    async def main() -> None:
        cls = classes.get(where, asyncpg.Connection)
        async with make(pg, connection_class=cls) as pool:
            task = asyncio.ensure_future(worker(pool))
            await asyncio.sleep(1e-9 if where == "acquire" else 0.1)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await _all_back(pool)

    run(main)


def _resets_apart() -> list[str]:
    """The release steps running in tasks of their own (the drop-in's resets apart)."""
    names = (t.get_coro().__qualname__ for t in asyncio.all_tasks())  # type: ignore[union-attr]
    return sorted(n.rsplit(".", 1)[-1] for n in names if n.startswith("Pool._re"))


def test_a_release_cancelled_in_its_reset_ends_at_once_and_keeps_its_connection(
    pg: PgServer,
) -> None:
    # released in the caller's task (no task of its own, unlike asyncpg's shielded release):
    # a cancellation there ends the release at once, and the reset goes on in a task apart
    async def main() -> None:
        async with make(pg, connection_class=SlowResetConnection) as pool:
            con = await pool.acquire()
            pid = con.get_server_pid()
            releasing = asyncio.ensure_future(pool.release(con))
            await asyncio.sleep(0.1)  # (in the reset's 0.2 s)
            assert _resets_apart() == []
            releasing.cancel()
            await asyncio.sleep(0)
            assert releasing.cancelled()
            assert _resets_apart() == ["_reset_and_give_back"]  # (started again, apart)
            from poolkit.backends import _common

            loop = asyncio.get_running_loop()  # (tasks of other tests' loops, closed, stay held)
            held = [t.get_coro().__qualname__ for t in _common._held if t.get_loop() is loop]  # type: ignore[attr-defined]
            assert held == ["Pool._reset_and_give_back"]  # (held until it ends: not collected)
            assert pool.get_idle_size() == 0
            async with pool.acquire(timeout=2) as again:
                assert again.get_server_pid() == pid  # (the same connection, reset)
                assert await again.fetchval("SELECT 1") == 1

    run(main)


def test_a_task_cancelled_in_its_block_resets_in_a_task_apart(pg: PgServer) -> None:
    # a task being cancelled (anyio cancels it at each await) resets where a cancellation cannot
    # reach, as asyncpg's every release: a second cancellation leaves the reset to its course
    pids: list[int] = []

    async def worker(pool: pk.Pool, entered: asyncio.Event) -> None:
        async with pool.acquire() as con:
            pids.append(con.get_server_pid())
            entered.set()
            await con.execute("SELECT pg_sleep(10)")

    async def main() -> None:
        async with make(pg, connection_class=SlowResetConnection) as pool:
            entered = asyncio.Event()
            task = asyncio.ensure_future(worker(pool, entered))
            await entered.wait()
            task.cancel()
            await asyncio.sleep(0.1)  # (the statement cancelled; the reset under way)
            assert _resets_apart() == ["_release"]  # (shielded from the start)
            task.cancel()  # (again, as an anyio scope would)
            await asyncio.gather(task, return_exceptions=True)
            assert task.cancelled()
            assert _resets_apart() == ["_release"]  # (not cut short)
            async with pool.acquire(timeout=2) as again:
                assert again.get_server_pid() == pids[0]
                assert _resets_apart() == []

    run(main)


def test_a_release_yields_before_its_connection_is_back_even_with_nothing_to_send(
    pg: PgServer,
) -> None:
    # asyncpg's release is a task of its own: the caller yields before the connection is back,
    # so callers started together overlap (asyncpg's test_pool_07 counts the connections made)
    async def reset(con: Any) -> None:
        pass  # (and the connection is in no transaction: the reset sends nothing)

    async def user(pool: pk.Pool) -> None:
        async with pool.acquire():
            pass

    async def main() -> None:
        async with make(pg, min_size=1, max_size=2, reset=reset) as pool:
            await asyncio.gather(user(pool), user(pool))
            assert pool.stats().total == 2  # (the second user found the first one out: a connect)

    run(main)


def test_release_after_a_protocol_abort_ends_the_connections_cleanup(pg: PgServer) -> None:
    async def main() -> None:
        async with make(pg, min_size=0) as pool:
            conn = await pool.acquire()
            raw = conn._con  # type: ignore[attr-defined]
            terminated = asyncio.Event()
            conn.add_termination_listener(lambda _: terminated.set())
            assert await conn.fetchval("SELECT 1") == 1
            stmt = next(iter(raw._stmt_cache.iter_statements()))
            raw._protocol.abort()
            await pool.release(conn)
            await asyncio.wait_for(terminated.wait(), 1.0)
            assert stmt.closed and len(raw._stmt_cache) == 0
            await pool.release(conn)  # (again: nothing)
            async with pool.acquire(timeout=1) as conn2:
                assert conn2._con is not raw  # type: ignore[attr-defined]
                assert await conn2.fetchval("SELECT 1") == 1

    run(main)


def test_terminate_ends_a_close_that_waits_for_releases(pg: PgServer) -> None:
    async def main() -> None:
        pool = await make(pg)
        await pool.acquire()
        closing = asyncio.ensure_future(pool.close())
        await asyncio.sleep(0.05)
        assert not closing.done()
        pool.terminate()
        await asyncio.wait_for(closing, 5)
        await wait_until(lambda: pg.pids() == [], "the sessions to end")

    run(main)


def test_inactive_connections_above_min_size_close_and_min_size_is_kept(pg: PgServer) -> None:
    """asyncpg 0.32's ``max_inactive_connection_lifetime`` and ``min_size`` floor (its tests of
    them read ``_holders``): idle connections above ``min_size`` close after the lifetime, those
    up to it stay, and one lost while idle is replaced."""

    async def main() -> None:
        async with make(
            pg, min_size=1, max_size=3, init_size=3, max_inactive_connection_lifetime=0.3
        ) as pool:
            assert pool.get_size() == 3
            await wait_until(lambda: pool.get_size() == 1, "the two above min_size to close")
            # (the server ends a closed session's backend a moment after the client's goodbye)
            await wait_until(lambda: len(pg.pids()) == 1, "their sessions to end")
            (kept,) = pg.pids()
            await asyncio.sleep(1.5)
            assert pg.pids() == [kept]  # (the floor stays)
            pg.terminate(kept)
            await wait_until(
                lambda: len(pg.pids()) == 1 and pg.pids() != [kept], "min_size to be refilled"
            )

    run(main)
