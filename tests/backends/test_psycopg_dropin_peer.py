"""What the psycopg_pool drop-ins do as psycopg_pool does, where psycopg's own pool tests
(tools/psycopg_pool_suite) time or count it: the retry delays of a failed connect and of a failed
``check`` (psycopg_pool's ``AttemptWithBackoff``, read at each retry), the check at every
hand-out (a new connection too), ``max_lifetime`` checked when a connection comes back, idle
connections handed out in turn, growth past ``min_size`` one connect at a time, the null pool's
``requests_queued`` and its close within ``putconn``, a connect given up by the pool closing what
it made, and the poolkit pool's "connects failing" warning kept off psycopg_pool's users' log."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import pytest

from pg_service import PgServer, need, pg

__all__ = ["pg"]

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from poolkit.backends import _psycopg_dropin as dropin
    from poolkit.backends import psycopg as pk
else:  # (the drivers first: missing, the tests skip, or fail under POOLKIT_REQUIRE_SERVICES=1)
    psycopg = need("psycopg")
    psycopg_pool = need("psycopg_pool")
    pk = need("poolkit.backends.psycopg")
    dropin = need("poolkit.backends._psycopg_dropin")


def kw(server: PgServer) -> dict[str, Any]:
    """psycopg_pool's ``kwargs=``: this test's application_name (its sessions are found by it)."""
    return {"application_name": server.app}


def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg_pool's retry delays set as its own tests set them: 0.1 s, doubling, no jitter."""
    monkeypatch.setattr(psycopg_pool.base.AttemptWithBackoff, "INITIAL_DELAY", 0.1)
    monkeypatch.setattr(psycopg_pool.base.AttemptWithBackoff, "DELAY_JITTER", 0.0)


# ---------------------------------------------------------------- retry delays (no server)


def test_reconnect_delays_are_attempt_with_backoffs_read_at_each_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = dropin.pool_options(min_size=1, max_size=1, null=False, max_waiting=0,
                                  max_idle=600.0, reconnect_timeout=300.0, num_workers=3,
                                  hooks=None)  # fmt: skip
    retry = options.connect_retry
    assert retry is not None
    assert [retry.delay(n) for n in (1, 2, 3)] == pytest.approx([1.0, 2.0, 4.0])
    assert 0.9 <= retry.delay(1, 0.0) < retry.delay(1, 0.999) <= 1.1  # (+-10 %)
    assert retry.delay(20) == pytest.approx(60.0)  # (at most max_delay)
    fast_retries(monkeypatch)  # (after the pool's options were made: read at each retry)
    for rand in (0.0, 0.5, 0.999):
        assert [retry.delay(n, rand) for n in (1, 2, 3)] == pytest.approx([0.1, 0.2, 0.4])


def test_the_reconnect_delays_are_cut_to_end_at_the_reconnect_timeout() -> None:
    left: list[float | None] = [None]
    retry = dropin.RetryBackoff(base=1.0, factor=2.0, jitter=0.1, max_delay=60.0,
                                give_up_in=lambda: left[0])  # fmt: skip
    assert retry.delay(3) == pytest.approx(4.0)  # (no run of failures timed: not cut)
    left[0] = 0.25
    assert retry.delay(3) == pytest.approx(0.25)
    assert retry.delay(1, 0.0) == pytest.approx(0.25)
    left[0] = -1.0  # (past it: at once)
    assert retry.delay(2) == 0.0


@pytest.mark.timing  # (a machine stalled for half a second would call it late)
def test_reconnect_failed_is_called_at_the_reconnect_timeout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(psycopg_pool.base.AttemptWithBackoff, "INITIAL_DELAY", 0.4)
    monkeypatch.setattr(psycopg_pool.base.AttemptWithBackoff, "DELAY_JITTER", 0.0)
    with socket.socket() as sock:  # (a port nothing listens on: connects are refused)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    called: list[float] = []
    with caplog.at_level(logging.WARNING, "psycopg.pool"):
        started = time.monotonic()
        with pk.ConnectionPool(f"host=127.0.0.1 port={port} user=postgres", min_size=1,
                               reconnect_timeout=0.5, open=True,
                               reconnect_failed=lambda pool: called.append(time.monotonic()),
                               ) as p:  # fmt: skip
            PgServer.wait(lambda: bool(called), "reconnect_failed", timeout=3.0)
        assert p.closed
    # failed at 0 and 0.4 s; the next, 0.8 s later, is cut to fall at 0.5 s and gives up there
    assert called[0] - started < 1.0
    assert "reconnection attempt in pool" in caplog.text


def test_a_failed_checks_retries_follow_attempt_with_backoff_up_to_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast_retries(monkeypatch)
    retry = dropin.CheckRetry(deadline=1.0)
    assert retry.wait(0.0) == 0.0  # (the second try at once, as psycopg_pool's)
    assert retry.wait(0.0) == pytest.approx(0.1)
    assert retry.wait(0.1) == pytest.approx(0.2)
    assert retry.wait(0.3) == pytest.approx(0.4)
    assert retry.wait(0.7) == pytest.approx(0.3)  # (0.8, cut to end at the deadline)
    assert retry.wait(1.0) is None


# ---------------------------------------------------------------- check, at every hand-out


def test_check_runs_on_a_new_connection_and_a_failed_one_goes_back_to_the_pool(
    pg: PgServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fast_retries(monkeypatch)
    checked: list[int] = []
    failing = [False]

    def check(conn: psycopg.Connection[Any]) -> None:
        checked.append(conn.info.backend_pid)
        if failing[0]:
            failing[0] = False
            raise RuntimeError("first check fails")

    with (
        pk.NullConnectionPool(pg.dsn, kwargs=kw(pg), check=check, open=True) as null,
        null.connection(timeout=5.0) as conn,  # (made for this caller, checked still)
    ):
        assert checked == [conn.info.backend_pid]
    checked.clear()
    failing[0] = True
    with (
        caplog.at_level(logging.INFO, "psycopg.pool"),
        pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), check=check, open=True) as p,
    ):
        p.wait(5.0)
        with p.connection(timeout=5.0) as conn:
            # the connection that failed its check was not broken: it went back to the pool and
            # was taken again (psycopg_pool's _getconn_with_check_loop), not closed
            assert checked == [conn.info.backend_pid] * 2
            assert p.get_stats().get("connections_lost", 0) == 0
    assert "connection failed check: first check fails" in caplog.text
    pg.wait_sessions(0)


@pytest.mark.timing  # (how many retries fit in the 1 s: a stalled machine fits fewer)
def test_a_check_that_always_fails_times_out_after_backed_off_retries(
    pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_retries(monkeypatch)
    tries: list[float] = []

    def check(conn: Any) -> None:
        tries.append(time.monotonic())
        raise RuntimeError("never good")

    with pk.ConnectionPool(pg.dsn, min_size=1, kwargs=kw(pg), check=check, open=True) as p:
        p.wait(5.0)
        with pytest.raises(psycopg_pool.PoolTimeout), p.connection(timeout=1.0):
            pytest.fail("a connection was handed out")
    # at 0, at once, then after 0.1, 0.2, 0.4 s; the next (0.3 s later) would be past the deadline
    assert len(tries) == 5


# ---------------------------------------------------------------- max_lifetime, at putconn


def test_max_lifetime_is_checked_when_a_connection_comes_back(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=1, max_lifetime=0.2, kwargs=kw(pg),
                           open=True) as p:  # fmt: skip
        p.wait(5.0)
        first = p.getconn()
        time.sleep(0.3)  # (past its lifetime while out: kept by the caller, given back...)
        p.putconn(first)
        assert first.closed  # (...and closed there)
        with p.connection(timeout=5.0) as second:
            assert second is not first
            pid = second.info.backend_pid
        time.sleep(0.3)  # (past its lifetime while idle: psycopg_pool still hands it out once)
        with p.connection(timeout=5.0) as again:
            assert again is second and again.info.backend_pid == pid
        assert second.closed
    pg.wait_sessions(0)


def test_check_closes_the_idle_connections_past_their_lifetime(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=1, max_lifetime=0.2, kwargs=kw(pg),
                           open=True) as p:  # fmt: skip
        p.wait(5.0)
        with p.connection(timeout=5.0) as conn:
            pid = conn.info.backend_pid
        time.sleep(0.3)
        p.check()  # (as psycopg_pool's check(): closed there, and min_size refilled)
        assert conn.closed
        with p.connection(timeout=5.0) as again:
            assert again.info.backend_pid != pid
    pg.wait_sessions(0)


# ---------------------------------------------------------------- idle connections in turn


def test_idle_connections_are_handed_out_in_turn(pg: PgServer) -> None:
    with pk.ConnectionPool(pg.dsn, min_size=3, kwargs=kw(pg), open=True) as p:
        p.wait(5.0)
        used: list[int] = []
        for _ in range(6):
            with p.connection(timeout=5.0) as conn:
                used.append(id(conn))
        assert len(set(used)) == 3 and used[:3] == used[3:]  # (FIFO, as psycopg_pool's deque)
    pg.wait_sessions(0)


# ---------------------------------------------------------------- growth, one at a time


def test_the_pool_grows_one_connect_at_a_time_and_fills_min_size_with_num_workers(
    pg: PgServer,
) -> None:
    lock = threading.Lock()
    running = [0]
    most: list[int] = []

    class Slow(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            with lock:
                running[0] += 1
                most.append(running[0])
            try:
                time.sleep(0.1)
                return super().connect(*args, **kwargs)
            finally:
                with lock:
                    running[0] -= 1

    with pk.ConnectionPool(pg.dsn, min_size=3, max_size=6, num_workers=3, kwargs=kw(pg),
                           connection_class=Slow, open=True) as p:  # fmt: skip
        p.wait(5.0)
        assert max(most) == 3  # (min_size filled by num_workers connects at once)
        most.clear()
        held = [p.getconn(timeout=5.0) for _ in range(3)]
        ends: list[float] = []
        together = threading.Barrier(3, timeout=5.0)

        def take() -> None:
            with p.connection(timeout=5.0):
                ends.append(time.monotonic())
                together.wait()  # (each holds its connection until all three have one)

        started = time.monotonic()
        threads = [threading.Thread(target=take) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for conn in held:
            p.putconn(conn)
        assert most and max(most) == 1  # (past min_size: one connect at a time)
        assert max(ends) - started >= 0.29  # (three connects of 0.1 s, one after the other)
    pg.wait_sessions(0)


# ---------------------------------------------------------------- null pools


def test_null_pool_counts_only_the_callers_that_wait_for_a_connection_given_back(
    pg: PgServer,
) -> None:
    with pk.NullConnectionPool(pg.dsn, max_size=1, kwargs=kw(pg), open=True) as p:
        first = p.getconn(timeout=5.0)  # (connected for it: not queued)
        assert p.get_stats().get("requests_queued", 0) == 0
        with pytest.raises(psycopg_pool.PoolTimeout):
            p.getconn(timeout=0.2)  # (max_size out: queued, and timed)
        stats = p.get_stats()
        assert stats["requests_queued"] == 1
        assert 150 <= stats["requests_wait_ms"] < 2000
        p.putconn(first)
    pg.wait_sessions(0)


def test_async_null_pool_closes_a_connection_within_putconn(pg: PgServer) -> None:
    async def main() -> None:
        async with pk.AsyncNullConnectionPool(pg.dsn, kwargs=kw(pg)) as p:
            async with p.connection(timeout=5.0) as conn:
                pass
            assert conn.closed  # (no caller waits for it: closed before putconn returned)
            assert p.get_stats()["pool_size"] == 0

    asyncio.run(main())
    pg.wait_sessions(0)


# ---------------------------------------------------------------- a connect given up


def test_a_connect_the_closing_pool_gives_up_closes_what_it_made(pg: PgServer) -> None:
    made: list[psycopg.AsyncConnection[Any]] = []

    class SlowAfter(psycopg.AsyncConnection[Any]):
        """Connects, then takes a while more (as a subclass that sets the session up in its
        connect would): a cancellation then would leave the connection it made."""

        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            conn = await super().connect(*args, **kwargs)
            made.append(conn)
            await asyncio.sleep(0.2)
            return conn

    async def main() -> None:
        p = pk.AsyncConnectionPool(pg.dsn, min_size=2, kwargs=kw(pg), connection_class=SlowAfter,
                                   open=False)  # fmt: skip
        await p.open()
        await asyncio.sleep(0.1)  # (both connected, neither returned to the pool)
        await p.close()
        assert len(made) == 2
        assert all(conn.closed for conn in made)  # (closed by the time close() returned)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        asyncio.run(main())
    pg.wait_sessions(0)


# ---------------------------------------------------------------- the log


def test_a_failing_connect_is_logged_once_as_psycopg_pool_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as sock:  # (a port nothing listens on: connects are refused)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"host=127.0.0.1 port={port} user=postgres connect_timeout=2"
    with caplog.at_level(logging.WARNING):
        with pk.ConnectionPool(dsn, min_size=1, open=True) as p:
            PgServer.wait(lambda: "error connecting in" in caplog.text, "a failed connect")
            time.sleep(0.05)  # (the poolkit pool's own event about it, had it one, is out)
        assert p.closed
    assert [r.name for r in caplog.records if "error connecting in" in r.message] == [
        "psycopg.pool"
    ]
    assert "connects to" not in caplog.text  # (the poolkit pool's line for the same failure)
