"""``PoolOptions(hooks=...)``: what the front ends run around a connection (issue 16). Both
pools, real connect functions, no timing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trio

import poolkit
from doubles import Conn
from frontends import AsyncFront, Front, ThreadFront, TrioFront, drive
from poolkit import events as ev


class Session(Conn):
    """A connection with session state that a hook configures."""

    def __init__(self, conn_id: int) -> None:
        super().__init__(conn_id)
        self.settings: dict[str, str] = {}


def run_both(front_kind: str, options: poolkit.PoolOptions, body: Any) -> list[Session]:
    """Run ``body(pool)`` (a coroutine function for asyncio, a plain one for threads) on a ready
    pool of ``front_kind`` whose connect makes ``Session`` objects; returns them."""
    made: list[Session] = []
    if front_kind != "threads":  # (AsyncPool, under asyncio or trio)

        async def aconnect(ctx: poolkit.ConnectContext) -> Session:
            made.append(Session(ctx.connection_id))
            return made[-1]

        async def main() -> None:
            async with poolkit.AsyncPool(aconnect, options=options) as pool:
                await body(pool)

        if front_kind == "trio":
            trio.run(main)
        else:
            asyncio.run(main())
    else:

        def connect(ctx: poolkit.ConnectContext) -> Session:
            made.append(Session(ctx.connection_id))
            return made[-1]

        with poolkit.Pool(connect, options=options) as pool:
            body(pool)
    return made


def test_configure_runs_once_per_connection_before_its_first_use(front_kind: str) -> None:
    calls: list[int] = []

    def set_up(conn: Session) -> None:
        assert conn.settings == {}
        conn.settings["timezone"] = "UTC"
        calls.append(conn.id)

    async def aset_up(conn: Session) -> None:
        set_up(conn)

    hooks = poolkit.Hooks(configure=aset_up if front_kind != "threads" else set_up)
    options = poolkit.PoolOptions(max_size=2, hooks=hooks)
    seen: list[dict[str, str]] = []

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        for _ in range(3):
            async with pool.connection() as conn:
                seen.append(dict(conn.settings))

    def body(pool: poolkit.Pool[Session]) -> None:
        for _ in range(3):
            with pool.connection() as conn:
                seen.append(dict(conn.settings))

    made = run_both(front_kind, options, abody if front_kind != "threads" else body)
    assert seen == [{"timezone": "UTC"}] * 3
    assert calls == [c.id for c in made] == [1]


def test_a_failed_configure_is_a_failed_connect_and_closes_the_connection(
    front_kind: str,
) -> None:
    failures = [RuntimeError("SET failed")]

    def set_up(conn: Session) -> None:
        if failures:
            raise failures.pop()

    async def aset_up(conn: Session) -> None:
        set_up(conn)

    hooks = poolkit.Hooks(configure=aset_up if front_kind != "threads" else set_up)
    options = poolkit.PoolOptions(max_size=1, hooks=hooks)
    stats: list[poolkit.PoolStats] = []

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        with pytest.raises(RuntimeError, match="SET failed"):
            await pool.checkout(timeout=5)
        lease = await pool.checkout(timeout=5)
        lease.release()
        stats.append(pool.stats())

    def body(pool: poolkit.Pool[Session]) -> None:
        with pytest.raises(RuntimeError, match="SET failed"):
            pool.checkout(timeout=5)
        pool.checkout(timeout=5).release()
        stats.append(pool.stats())

    made = run_both(front_kind, options, abody if front_kind != "threads" else body)
    assert [c.closed for c in made] == [1, 1]  # the first at once, the second at close
    (s,) = stats
    assert (s.connect_failures, s.connect_attempts, s.connections_created, s.total) == (1, 2, 1, 1)


def test_is_broken_decides_between_discard_and_release(front_kind: str) -> None:
    asked: list[tuple[int, str]] = []

    def is_broken(conn: Session, error: BaseException) -> bool:
        asked.append((conn.id, type(error).__name__))
        return isinstance(error, ConnectionError)

    options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=is_broken))

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        for error in (ZeroDivisionError(), ConnectionResetError(), ValueError()):
            with pytest.raises(type(error)):
                async with pool.connection():
                    raise error
        async with pool.connection():
            pass  # no error: is_broken is not asked

    def body(pool: poolkit.Pool[Session]) -> None:
        for error in (ZeroDivisionError(), ConnectionResetError(), ValueError()):
            with pytest.raises(type(error)), pool.connection():
                raise error
        with pool.connection():
            pass

    made = run_both(front_kind, options, abody if front_kind != "threads" else body)
    assert asked == [
        (1, "ZeroDivisionError"),
        (1, "ConnectionResetError"),
        (2, "ValueError"),
    ]
    assert [c.closed for c in made] == [1, 1]  # discarded as broken; the second at close


def test_an_is_broken_that_raises_discards(front_kind: str) -> None:
    def is_broken(conn: Session, error: BaseException) -> bool:
        raise RuntimeError("cannot tell")

    options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(is_broken=is_broken))

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        with pytest.raises(KeyError):
            async with pool.connection():
                raise KeyError("x")

    def body(pool: poolkit.Pool[Session]) -> None:
        with pytest.raises(KeyError), pool.connection():
            raise KeyError("x")

    made = run_both(front_kind, options, abody if front_kind != "threads" else body)
    assert [c.closed for c in made] == [1]


class Lent:
    """What a test's ``lend`` hands out: the connection and the lease it was lent for."""

    def __init__(self, conn: Session, lease: poolkit.Lease[Any]) -> None:
        self.conn, self.lease = conn, lease


def test_lend_hands_out_one_object_a_lease_and_the_other_hooks_get_the_connection(
    front_kind: str,
) -> None:
    """``Hooks.lend`` (issue 24, point 2: what the asyncpg backend hands out its proxy with)."""
    lent: list[Lent] = []
    broken: list[Any] = []
    ended: list[Any] = []

    def lend(conn: Session, lease: poolkit.Lease[Any]) -> Lent:
        lent.append(Lent(conn, lease))
        return lent[-1]

    def is_broken(conn: Any, error: BaseException) -> bool:
        broken.append(conn)
        return False

    def end(conn: Any, error: BaseException | None) -> None:
        ended.append(conn)

    async def aend(conn: Any, error: BaseException | None) -> None:
        end(conn, error)

    hooks = poolkit.Hooks(
        lend=lend, is_broken=is_broken, end=aend if front_kind != "threads" else end
    )
    options = poolkit.PoolOptions(max_size=1, hooks=hooks)

    def check_lease(lease: poolkit.Lease[Any]) -> None:
        assert lent == []  # not before its connection is read
        first = lease.connection
        assert isinstance(first, Lent) and lease.connection is first and len(lent) == 1
        assert first.lease is lease and isinstance(first.conn, Session)
        lease.release()
        with pytest.raises(poolkit.InvalidLeaseError):
            lease.connection  # noqa: B018  (given back: refused as without lend)

    handed: list[Any] = []  # what each block got

    async def ablock(pool: poolkit.AsyncPool[Session]) -> None:
        async with pool.connection() as conn:
            handed.append(conn)
            raise KeyError("x")

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        check_lease(await pool.checkout())
        with pytest.raises(KeyError):
            await ablock(pool)

    def block(pool: poolkit.Pool[Session]) -> None:
        with pool.connection() as conn:
            handed.append(conn)
            raise KeyError("x")

    def body(pool: poolkit.Pool[Session]) -> None:
        check_lease(pool.checkout())
        with pytest.raises(KeyError):
            block(pool)

    made = run_both(front_kind, options, abody if front_kind != "threads" else body)
    assert handed == [lent[1]]
    assert [x.conn for x in lent] == [made[0], made[0]]
    assert broken == [made[0]]  # the connection itself
    assert ended == [lent[1]]  # what the block got
    with pytest.raises(TypeError, match=r"Hooks\.lend must be a plain function"):
        poolkit.Hooks(lend=aend)


def test_pool_refuses_async_hooks() -> None:
    async def reset(conn: Any) -> None:
        pass

    with pytest.raises(TypeError, match=r"PoolOptions\.hooks\.reset must be a plain function"):
        poolkit.Pool(
            lambda ctx: Conn(1), options=poolkit.PoolOptions(hooks=poolkit.Hooks(reset=reset))
        )


def test_hooks_are_checked() -> None:
    with pytest.raises(TypeError, match=r"Hooks\.check must be a function"):
        poolkit.Hooks(check=42)  # type: ignore[arg-type]  # (the wrong type on purpose)
    with pytest.raises(ValueError, match=r"Hooks\.check_after must be >= 0"):
        poolkit.Hooks(check_after=-1)
    with pytest.raises(TypeError, match=r"PoolOptions\.hooks must be a poolkit\.Hooks"):
        poolkit.PoolOptions(hooks={"check": print})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Hooks\.cancel_safe must be a bool"):
        poolkit.Hooks(cancel_safe=1)  # type: ignore[arg-type]  # (the wrong type on purpose)


@pytest.mark.parametrize("cancel_safe", [False, True])
def test_a_cancelled_block_discards_its_connection_unless_cancel_safe(cancel_safe: bool) -> None:
    """A block of ``connection()`` cancelled may leave its connection mid-message: discarded,
    unless ``Hooks.cancel_safe`` says the protocol ends what was abandoned (HTTP/2's stream reset):
    then released, and the next block gets it again."""

    async def main() -> None:
        hooks = poolkit.Hooks(cancel_safe=cancel_safe)
        pool = poolkit.AsyncPool(
            lambda ctx: asyncio.sleep(0, Conn(ctx.connection_id)),
            options=poolkit.PoolOptions(max_size=1, hooks=hooks),
        )
        pool.ready()
        entered = asyncio.Event()

        async def block() -> None:
            async with pool.connection():
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(block())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stats = pool.stats()
        assert (stats.total, stats.connections_closed) == (
            (1, {}) if cancel_safe else (0, {"error": 1})
        )
        async with pool.connection() as conn:
            assert conn.id == 1 if cancel_safe else conn.id == 2
        await pool.close()

    asyncio.run(main())


# ---------------------------------------------------------------------- check and reset


def _replaced(connection: Any) -> None:  # pragma: no cover - the front end puts its own hook
    raise AssertionError("the test front end replaces this hook")


def checked(after: float = 0.0, **more: Any) -> poolkit.Hooks:
    return poolkit.Hooks(check=_replaced, check_after=after, **more)


def resetting(**more: Any) -> poolkit.Hooks:
    return poolkit.Hooks(reset=_replaced, **more)


def release_apart(f: Front, lease: poolkit.Lease[Any]) -> None:
    """Give ``lease`` back from a thread the clock tracks (``Pool`` resets in the thread that
    checks in, and a reset that takes time must not block the scenario)."""
    if isinstance(f, ThreadFront):
        f.clock.start_thread(lease.release)
    else:
        lease.release()


def test_a_check_runs_before_a_hand_out_and_a_failed_one_is_never_seen(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease(timeout=5)  # a new connection is handed out unchecked
        lease.release()
        lease = await f.lease(timeout=5)
        assert [(name, cid) for _, name, cid in f.hook_runs] == [("check", 1)]
        assert lease.connection_id == 1
        lease.release()
        f.hook_errors["check"].append(ConnectionResetError("server closed the connection"))
        lease = await f.lease(timeout=5)  # the check fails: closed, and a new one is made
        assert lease.connection_id == 2
        assert f.close_reasons() == {1: "error"}
        (failed,) = f.of(ev.ConnectionCheckFailedEvent)
        assert failed.connection_id == 1 and isinstance(failed.error, ConnectionResetError)
        stats = f.pool.stats()
        assert (stats.checks, stats.checks_failed, stats.checkouts) == (2, 1, 3)
        assert stats.checkout_failures == {}
        lease.release()

    drive(front_kind, scenario, max_size=2, hooks=checked())


def test_a_check_runs_only_after_check_after_seconds_available(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        (await f.lease()).release()
        await f.advance(9.9)
        (await f.lease()).release()  # available for 9.9 s: no check
        assert f.hook_runs == []
        await f.advance(10)
        t = f.now()
        (await f.lease()).release()  # available for 10 s: checked
        assert f.hook_runs == [(t, "check", 1)]
        (await f.lease()).release()  # just checked and used: no check
        assert len(f.hook_runs) == 1

    drive(front_kind, scenario, max_size=1, hooks=checked(10))


def test_a_check_that_times_out_closes_its_connection_and_the_waiter_is_served(
    front_kind: str,
) -> None:
    async def scenario(f: Front) -> None:
        await f.advance(1)
        f.hook_delay["check"] = 5
        pending = f.start(timeout=30)
        await f.advance(2)  # the check of connection 1 ran out of time
        assert f.close_reasons() == {1: "error"}
        (failed,) = f.of(ev.ConnectionCheckFailedEvent)
        assert isinstance(failed.error, poolkit.HookTimeoutError)
        assert (failed.error.hook, failed.error.timeout) == ("check", 2)
        await f.advance(3)  # (Pool: the checkout's thread ran the check: free once it returns)
        assert pending.done and pending.lease is not None
        assert pending.lease.connection_id == 2 and f.made[0].closed == 1
        assert f.pool.stats().checks_failed == 1
        pending.lease.release()

    drive(front_kind, scenario, min_size=1, max_size=2, hooks=checked(timeout=2))


def test_a_reset_runs_on_check_in_and_the_connection_is_neither_available_nor_in_use(
    front_kind: str,
) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        f.hook_delay["reset"] = 1
        release_apart(f, lease)
        await f.settle()
        stats = f.pool.stats()
        assert (stats.resetting, stats.available, stats.in_use, stats.total) == (1, 0, 0, 1)
        waiter = f.start(timeout=10)  # the pool is full: it waits for the reset
        await f.settle()
        assert not waiter.done and f.pool.stats().waiting == 1
        await f.advance(1)
        assert waiter.done and waiter.lease is not None and waiter.lease.connection_id == 1
        assert [(name, cid) for _, name, cid in f.hook_runs] == [("reset", 1)]
        stats = f.pool.stats()
        assert (stats.resets, stats.resetting, stats.in_use, stats.available) == (1, 0, 1, 0)
        f.hook_delay["reset"] = 0
        waiter.lease.release()
        await f.settle()
        stats = f.pool.stats()
        assert (stats.resets, stats.resets_failed, stats.available) == (2, 0, 1)

    drive(front_kind, scenario, max_size=1, hooks=resetting())


def test_a_failed_reset_closes_the_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        f.hook_errors["reset"].append(RuntimeError("ROLLBACK failed"))
        lease.release()
        await f.settle()
        assert f.close_reasons() == {1: "error"} and f.made[0].closed == 1
        (failed,) = f.of(ev.ConnectionResetFailedEvent)
        assert failed.connection_id == 1 and isinstance(failed.error, RuntimeError)
        lease = await f.lease()
        assert lease.connection_id == 2
        stats = f.pool.stats()
        assert (stats.resets, stats.resets_failed) == (1, 1)
        lease.release()

    drive(front_kind, scenario, max_size=1, hooks=resetting())


def test_a_reset_that_times_out_closes_and_its_late_end_is_ignored(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        f.hook_delay["reset"] = 5
        release_apart(f, lease)
        await f.advance(3)
        (failed,) = f.of(ev.ConnectionResetFailedEvent)
        assert isinstance(failed.error, poolkit.HookTimeoutError)
        assert failed.error.hook == "reset"
        assert f.close_reasons() == {1: "error"}
        await f.advance(3)  # the reset returns, late
        stats = f.pool.stats()
        assert (stats.total, stats.resets, stats.resets_failed) == (0, 1, 1)

    drive(front_kind, scenario, max_size=1, hooks=resetting(timeout=3))


@pytest.mark.parametrize("quiet", [False, True], ids=["observed", "unobserved"])
@pytest.mark.parametrize("hook", ["check", "reset"])
def test_a_hook_that_times_out_on_threads_closes_its_connection_only_when_it_returns(
    front_kind: str, hook: str, quiet: bool
) -> None:
    # Issue 24, defect 3: Pool closed a psycopg connection from the timer thread while its reset
    # still ran on it in another thread; the freed descriptor went to the next connect, which
    # then hung for good. The pool gives up on the hook at its timeout (the connection is closed
    # in its view, waiters are freed), but the connection itself is closed when the hook's
    # thread is done with it, once. On asyncio the hook's task is cancelled first, so the
    # connection is closed at the timeout. Unobserved, ``Pool`` runs the hook in the caller
    # (``_check_inline``, ``_release``): the same must hold.
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        if hook == "reset":
            f.hook_delay["reset"] = 5
            release_apart(f, lease)
        else:
            lease.release()
            await f.advance(1)
            f.hook_delay["check"] = 5
            pending = f.start(timeout=30)
        await f.advance(3)
        if not quiet:
            assert f.close_reasons() == {1: "error"}
        stats = f.pool.stats()
        assert (stats.checks_failed if hook == "check" else stats.resets_failed) == 1
        assert f.made[0].closed == (0 if isinstance(f, ThreadFront) else 1)
        assert stats.total in (0, 1)  # (a check's checkout connects anew meanwhile)
        await f.advance(3)  # the hook returns, late
        assert f.made[0].closed == 1
        if hook == "check":  # the checkout goes on, and gets a new connection
            assert pending.done and pending.lease is not None
            assert pending.lease.connection_id == 2
            pending.lease.release()
        assert f.pool.stats().in_use == 0

    hooks = resetting(timeout=3) if hook == "reset" else checked(after=0.5, timeout=3)
    drive(front_kind, scenario, max_size=2, hooks=hooks, quiet=quiet)


def test_closing_the_pool_during_a_reset_closes_the_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        f.hook_delay["reset"] = 5
        release_apart(f, lease)
        await f.settle()
        if isinstance(f, ThreadFront):
            f.pool.close()
        elif isinstance(f, TrioFront):
            assert f.nursery is not None
            f.nursery.start_soon(f.pool.close)  # (awaited by the scenario's nursery)
        else:
            closing = asyncio.ensure_future(f.pool.close())
        await f.advance(5)
        if isinstance(f, AsyncFront):
            await closing
        assert f.close_reasons() == {1: "poolClosed"} and f.made[0].closed == 1
        stats = f.pool.stats()
        assert (stats.total, stats.resetting, stats.resets) == (0, 0, 0)

    drive(front_kind, scenario, max_size=1, hooks=resetting())


def test_the_check_in_is_told_when_it_happens_not_when_its_reset_ends(front_kind: str) -> None:
    # (both pools ran the reset with the check-in's events still queued, and delivered them
    # only at the pool's next step that had events of its own, if there was one)
    async def scenario(f: Front) -> None:
        lease = await f.lease()
        f.hook_delay["reset"] = 5
        release_apart(f, lease)
        await f.settle()
        assert f.pool.stats().resetting == 1
        assert len(f.of(ev.ConnectionCheckedInEvent)) == 1
        await f.advance(5)
        assert f.pool.stats().available == 1
        assert len(f.of(ev.ConnectionCheckedInEvent)) == 1

    drive(front_kind, scenario, max_size=1, hooks=resetting())


def test_without_hooks_nothing_is_checked_or_reset(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        for _ in range(3):
            (await f.lease()).release()
        stats = f.pool.stats()
        assert (stats.checks, stats.resets, stats.checking, stats.resetting) == (0, 0, 0, 0)

    drive(front_kind, scenario, max_size=1)


# ---------------------------------------------------------------------- end


def test_end_runs_in_the_caller_when_the_block_ends(front_kind: str) -> None:
    ended: list[tuple[int, str | None]] = []
    fail_commit = [RuntimeError("COMMIT failed")]

    def end(conn: Session, error: BaseException | None) -> None:
        ended.append((conn.id, None if error is None else type(error).__name__))
        if error is None and len(ended) == 3:
            raise fail_commit.pop()  # the third block's commit fails
        if error is not None:
            raise OSError("ROLLBACK failed too")  # logged; the block's error is raised

    async def aend(conn: Session, error: BaseException | None) -> None:
        end(conn, error)

    hooks = poolkit.Hooks(end=aend if front_kind != "threads" else end)
    options = poolkit.PoolOptions(max_size=1, hooks=hooks)
    stats: list[poolkit.PoolStats] = []

    async def abody(pool: poolkit.AsyncPool[Session]) -> None:
        async with pool.connection():
            assert ended == []  # not yet: when the block ends
        with pytest.raises(KeyError):
            async with pool.connection():
                raise KeyError("x")
        with pytest.raises(RuntimeError, match="COMMIT failed"):
            async with pool.connection():
                pass
        stats.append(pool.stats())

    def body(pool: poolkit.Pool[Session]) -> None:
        with pool.connection():
            assert ended == []
        with pytest.raises(KeyError), pool.connection():
            raise KeyError("x")
        with pytest.raises(RuntimeError, match="COMMIT failed"), pool.connection():
            pass
        stats.append(pool.stats())

    made = run_both(front_kind, options, abody if front_kind != "threads" else body)
    assert ended == [(1, None), (1, "KeyError"), (1, None)]
    (s,) = stats
    assert (s.total, s.available, s.in_use) == (1, 1, 0)  # given back every time
    assert made[0].closed == 1  # (at close)


def test_each_waiter_gets_a_check_of_its_own_and_no_connect_is_needed(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        assert f.pool.stats().available == 2
        f.hook_delay["check"] = 1
        first, second = f.start(timeout=10), f.start(timeout=10)
        await f.settle()
        # the second checkout is not left waiting beside an available connection
        assert sorted(cid for _, name, cid in f.hook_runs if name == "check") == [1, 2]
        stats = f.pool.stats()
        assert (stats.checking, stats.available, stats.pending, stats.total) == (2, 0, 0, 2)
        await f.advance(1)
        assert first.lease is not None and second.lease is not None
        assert {first.lease.connection_id, second.lease.connection_id} == {1, 2}
        assert f.created() == 2
        f.hook_delay["check"] = 0
        first.lease.release()
        second.lease.release()

    drive(front_kind, scenario, min_size=2, max_size=4, hooks=checked())


def test_a_reset_running_covers_a_waiter_as_a_connect_in_flight_does(front_kind: str) -> None:
    """Issue 24, point 5: a caller back for more while its connection is reset waits for that
    reset; no second connection is made for it (the pool is far from full). A second waiter is
    not covered by the one reset: a connect starts for it. A reset that fails leaves its waiter
    uncovered: a connect starts then."""

    async def scenario(f: Front) -> None:
        lease = await f.lease()
        f.hook_delay["reset"] = 1
        release_apart(f, lease)
        await f.settle()
        first = f.start(timeout=10)
        await f.settle()
        stats = f.pool.stats()
        assert (stats.resetting, stats.waiting, stats.pending, f.created()) == (1, 1, 0, 1)
        await f.advance(1)
        assert first.lease is not None and first.lease.connection_id == 1
        assert f.created() == 1  # served by the connection that was reset: no connect at all

        release_apart(f, first.lease)
        await f.settle()
        second, third = f.start(timeout=10), f.start(timeout=10)
        await f.settle()
        # the reset covers one waiter, a connect (made at once here) serves the other
        assert (f.created(), f.pool.stats().waiting) == (2, 1)
        await f.advance(1)
        assert second.lease is not None and third.lease is not None
        assert {second.lease.connection_id, third.lease.connection_id} == {1, 2}
        assert f.created() == 2

        leases = {second.lease.connection_id: second.lease, third.lease.connection_id: third.lease}
        f.hook_errors["reset"].append(RuntimeError("ROLLBACK failed"))
        release_apart(f, leases[1])
        await f.settle()
        fourth = f.start(timeout=10)
        await f.settle()
        assert (f.created(), f.pool.stats().waiting) == (2, 1)  # covered by the reset
        await f.advance(1)  # ... which fails: connection 1 is closed, a connect serves the waiter
        assert fourth.lease is not None and fourth.lease.connection_id == 3
        assert f.close_reasons() == {1: "error"}
        f.hook_delay["reset"] = 0
        fourth.lease.release()
        leases[2].release()

    drive(front_kind, scenario, max_size=10, hooks=resetting())


def test_a_probe_returning_the_last_stream_resets_what_a_lease_used_meanwhile(
    front_kind: str,
) -> None:
    # Issue 24, defect 21: on a multiplexed connection a user lease given back while the
    # keep-alive probe held the other stream was never reset: the probe's stream came back last,
    # and a probe's return skips the reset (a probe is no use).
    async def scenario(f: Front) -> None:
        f.probe_delay = 3
        (await f.lease()).release()  # connection 1, reset once
        await f.settle()
        assert [name for _, name, _ in f.hook_runs] == ["reset"]
        await f.advance(5.5)  # idle 5 s: its probe starts and holds one stream for 3 s
        assert len(f.probes) == 1
        lease = await f.lease()  # the other stream
        assert lease.connection_id == 1
        lease.release()  # not the last stream back: the probe still holds one
        await f.settle()
        assert [name for _, name, _ in f.hook_runs] == ["reset"]
        await f.advance(3)  # the probe returns the last stream: the session is reset now
        assert [name for _, name, _ in f.hook_runs] == ["reset", "reset"]
        await f.advance(20)  # a probe alone (nothing used meanwhile) resets nothing
        assert len(f.probes) >= 2
        assert [name for _, name, _ in f.hook_runs] == ["reset", "reset"]

    drive(
        front_kind,
        scenario,
        2,
        max_size=1,
        hooks=resetting(),
        keep_alive=poolkit.KeepAlive(5.0, _replaced),
    )


# ---------------------------------------------------------------------- nobody listening

# With no listener (and DEBUG logging off) the pools take their fast paths, and ``Pool`` runs a
# check and a reset in the caller's thread between two turns of its lock (``_check_inline``,
# ``_release``) instead of through the core's action list. What the pool decides must not change.


def test_unobserved_checks_and_resets_run_and_count_as_observed_ones_do(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease(timeout=5)  # new: not checked
        release_apart(f, lease)
        await f.settle()
        lease = await f.lease(timeout=5)
        assert [(name, cid) for _, name, cid in f.hook_runs] == [("reset", 1), ("check", 1)]
        release_apart(f, lease)
        await f.settle()
        f.hook_errors["check"].append(ConnectionResetError("server closed the connection"))
        lease = await f.lease(timeout=5)  # the check fails: closed, and a new one is made
        assert lease.connection_id == 2 and f.made[0].closed == 1
        stats = f.pool.stats()
        assert (stats.checks, stats.checks_failed, stats.resets, stats.checkouts) == (2, 1, 2, 3)
        f.hook_errors["reset"].append(ConnectionResetError("reset failed"))
        release_apart(f, lease)
        await f.settle()
        assert f.made[1].closed == 1  # the failed reset closed it
        stats = f.pool.stats()
        assert (stats.resets, stats.resets_failed, stats.total, stats.in_use) == (3, 1, 0, 0)
        assert f.events == []

    hooks = poolkit.Hooks(check=_replaced, reset=_replaced)
    drive(front_kind, scenario, max_size=2, hooks=hooks, quiet=True)


def test_an_interrupt_in_a_check_run_by_the_caller_is_raised_and_the_connection_closed() -> None:
    def check(conn: Any) -> None:
        raise KeyboardInterrupt

    pool = poolkit.Pool(
        lambda ctx: Conn(ctx.connection_id),
        options=poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(check=check)),
    )
    with pool:
        pool.checkout(timeout=5).release()  # new: not checked
        with pytest.raises(KeyboardInterrupt):
            pool.checkout(timeout=5)
        stats = pool.stats()
        assert (stats.checks_failed, stats.total, stats.in_use, stats.waiting) == (1, 0, 0, 0)


def test_an_asyncio_reset_that_answers_at_once_ends_in_the_check_in() -> None:
    """``AsyncPool``: a reset returning a plain result (as the backends' do for a clean
    connection) ends in the check-in's own step, with no task; one that raises closes the
    connection there too."""
    seen: list[int] = []

    def reset(conn: Conn) -> None:
        seen.append(conn.id)
        if len(seen) == 2:
            raise ConnectionResetError("reset failed")

    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        return Conn(ctx.connection_id)

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(reset=reset))
        async with poolkit.AsyncPool(connect, options=options) as pool:
            lease = await pool.checkout(timeout=5)
            first = lease.connection
            lease.release()
            stats = pool.stats()
            assert (stats.resets, stats.available, stats.resetting) == (1, 1, 0)
            async with pool.connection() as conn:
                assert conn is first
            stats = pool.stats()
            assert (stats.resets, stats.resets_failed, stats.total) == (2, 1, 0)
            assert first.closed == 1
            async with pool.connection() as conn:
                assert conn is not first
        assert seen == [1, 1, 2]

    asyncio.run(main())


@pytest.mark.parametrize("says", [True, None])
def test_an_end_that_says_it_reset_the_connection_spares_the_reset(
    front_kind: str, says: bool | None
) -> None:
    """``hooks.end`` returning ``True`` after a block that succeeded: the check-in runs no
    ``reset`` (counted among the resets all the same); anything else, and after a block that
    raised, the reset runs as usual."""
    resets: list[int] = []
    ends: list[object] = []

    def reset(conn: Conn) -> None:
        resets.append(conn.id)

    def end(conn: Conn, error: BaseException | None) -> bool | None:
        ends.append(error)
        return says

    async def areset(conn: Conn) -> None:
        reset(conn)

    async def aend(conn: Conn, error: BaseException | None) -> bool | None:
        return end(conn, error)

    def check(pool: Any) -> None:
        stats = pool.stats()
        assert (stats.resets, stats.resets_failed, stats.in_use, stats.total) == (3, 0, 0, 1)
        assert resets == ([1, 1] if says else [1, 1, 1])  # (the checkout + release, the error)
        assert len(ends) == 2 and ends[0] is None and isinstance(ends[1], ValueError)

    if front_kind == "asyncio":

        async def aconnect(ctx: poolkit.ConnectContext) -> Conn:
            return Conn(ctx.connection_id)

        async def main() -> None:
            hooks = poolkit.Hooks(reset=areset, end=aend)
            options = poolkit.PoolOptions(max_size=1, hooks=hooks)
            async with poolkit.AsyncPool(aconnect, options=options) as pool:
                (await pool.checkout()).release()
                for _ in range(10):  # (the reset runs in a task of the pool's)
                    await asyncio.sleep(0)
                async with pool.connection():
                    pass
                with pytest.raises(ValueError, match="the block raised"):
                    async with pool.connection():
                        raise ValueError("the block raised")
                for _ in range(10):
                    await asyncio.sleep(0)
                check(pool)

        asyncio.run(main())
        return
    hooks = poolkit.Hooks(reset=reset, end=end)
    options = poolkit.PoolOptions(max_size=1, hooks=hooks)
    with poolkit.Pool(lambda ctx: Conn(ctx.connection_id), options=options) as pool:
        pool.checkout().release()
        with pool.connection():
            pass
        with pytest.raises(ValueError, match="the block raised"), pool.connection():
            raise ValueError("the block raised")
        check(pool)


@pytest.mark.parametrize("watched", [False, True], ids=["plain", "leak-watched"])
def test_a_lease_released_with_reset_false_is_handed_out_again_without_the_reset(
    front_kind: str, watched: bool
) -> None:
    """``lease.release(reset=False)``: the caller reset the connection itself (a driver's own
    reset, as the asyncpg drop-in's ``release()``), so ``hooks.reset`` does not run for it and it
    is available at once; ``release()`` runs the reset. A leak-watched lease (``leak_timeout``)
    is unwatched either way; a lease given back twice raises the second time."""
    resets: list[int] = []

    def reset(conn: Conn) -> None:
        resets.append(conn.id)

    async def areset(conn: Conn) -> None:
        reset(conn)

    leak = 60.0 if watched else None

    def check(pool: Any) -> None:
        stats = pool.stats()
        assert resets == [1]  # (the release() only)
        # (the caller's reset is counted among the resets, as a ``hooks.end``'s is)
        assert (stats.resets, stats.in_use, stats.available, stats.total) == (2, 0, 1, 1)

    if front_kind == "asyncio":

        async def aconnect(ctx: poolkit.ConnectContext) -> Conn:
            return Conn(ctx.connection_id)

        async def main() -> None:
            hooks = poolkit.Hooks(reset=areset)
            options = poolkit.PoolOptions(max_size=1, hooks=hooks, leak_timeout=leak)
            async with poolkit.AsyncPool(aconnect, options=options) as pool:
                lease = await pool.checkout()
                lease.release(reset=False)
                assert pool.stats().available == 1 and resets == []
                with pytest.raises(poolkit.InvalidLeaseError, match="already returned"):
                    lease.release(reset=False)
                (await pool.checkout()).release()
                for _ in range(10):  # (the reset runs in a task of the pool's)
                    await asyncio.sleep(0)
                check(pool)

        asyncio.run(main())
        return

    def connect(ctx: poolkit.ConnectContext) -> Conn:
        return Conn(ctx.connection_id)

    options = poolkit.PoolOptions(max_size=1, hooks=poolkit.Hooks(reset=reset), leak_timeout=leak)
    with poolkit.Pool(connect, options=options) as pool:
        lease = pool.checkout()
        lease.release(reset=False)
        assert pool.stats().available == 1 and resets == []
        with pytest.raises(poolkit.InvalidLeaseError, match="already returned"):
            lease.release(reset=False)
        pool.checkout().release()
        check(pool)
