"""Giving a connection back, and handing it to a waiter, in every form a user writes (issue 38).

Each front end writes its check-in and check-out fast paths more than once (``lease.release()``,
``pool.checkin()``, ``connection()``'s exit and entry), and they run only when nobody observes
the pool. These tests drive each form through the public API, with the fast paths on (no
listener, DEBUG logging off) and off (a listener; DEBUG logging; hooks that reset and end), on
a pool of one connection: giving back must serve the waiters in the order they came, at once,
in every way of waiting. Besides: a connection is given back once; one closed (a clear) or
perished on the way is never handed out, and comes back; a waiter cancelled once handed one
gives it straight back; DEBUG turned on while a connection is out logs its check-in.
Every wait is bounded (``BOUND``, a whole scenario ``WHOLE``), so that a lost wake-up fails in
seconds instead of hanging.
``tools/mutate_handoffs.py`` removes each step of each copy in turn and names the test here that
catches it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

import poolkit
from doubles import Conn
from poolkit import events as ev
from poolkit import log

T = TypeVar("T")
#: the longest any test here waits for one thing: a lost wake-up fails, never hangs
BOUND = 5.0
#: the longest a whole scenario may take (each of its waits is bounded by ``BOUND`` besides)
WHOLE = 4 * BOUND
#: waiters queued behind the holder
WAITERS = 3

#: ``hooks``: nobody observes, but ``hooks.reset`` and ``hooks.end`` are set (every check-in
#: resets the connection, in the caller, before it serves a waiter; no exit fast path)
MODES = ["fast", "listener", "debug", "hooks"]
#: how the holder (and each waiter, where it can) gives its connection back
GIVE_BACKS = ["block", "block_error", "release", "checkin", "discard"]
#: how each waiter waits
WAITS = ["checkout", "checkout_timeout", "connection", "connection_timeout", "request"]


class Boom(Exception):
    """What leaves a ``connection()`` block by exception."""


class Observed(logging.Handler):
    """What a pool's observers saw: its events (mode ``listener``), its DEBUG log (``debug``)."""

    def __init__(self, mode: str) -> None:
        super().__init__(logging.DEBUG)
        self.mode = mode
        self.events: list[ev.PoolEvent] = []
        self.messages: list[str] = []
        self.resets = self.ended = 0  #: the hooks' runs (mode ``hooks``)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> Observed:
        if self.mode == "debug":
            logging.getLogger("poolkit.connection").addHandler(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        logging.getLogger("poolkit.connection").removeHandler(self)

    def listeners(self) -> list[Callable[[ev.PoolEvent], None]]:
        return [self.events.append] if self.mode == "listener" else []

    def options(self, **options: Any) -> poolkit.PoolOptions:
        """The pool's options (``hooks``: with a reset and an end hook, plain functions)."""
        if self.mode == "hooks":
            options["hooks"] = poolkit.Hooks(reset=self._reset, end=self._end)
        return poolkit.PoolOptions(**options)

    def _reset(self, connection: Any) -> None:
        self.resets += 1

    def _end(self, connection: Any, error: BaseException | None) -> None:
        self.ended += 1

    def checked(self) -> tuple[int, int]:
        """How many check-outs and check-ins the observers saw."""
        if self.mode == "listener":
            out = sum(isinstance(e, ev.ConnectionCheckedOutEvent) for e in self.events)
            back = sum(isinstance(e, ev.ConnectionCheckedInEvent) for e in self.events)
            return out, back
        out = sum(m.startswith("Connection checked out:") for m in self.messages)
        back = sum(m.startswith("Connection checked in:") for m in self.messages)
        return out, back


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """``fast``: nobody observes, the fast paths run (DEBUG known off: the logger's cached
    answer); ``listener``: a listener is attached; ``debug``: the CMAP log at DEBUG; ``hooks``:
    nobody observes, hooks set (see ``MODES``)."""
    logger = logging.getLogger("poolkit.connection")
    level = logger.level
    chosen = str(request.param)
    logger.setLevel(logging.DEBUG if chosen == "debug" else logging.WARNING)
    try:
        if chosen != "debug":
            assert not logger.isEnabledFor(logging.DEBUG)
            assert log._cached_level(logging.DEBUG) is False  # (the fast paths may run)
        yield chosen
    finally:
        logger.setLevel(level)


class Request:
    """A request object (``pool.lease_request``): ``complete`` calls ``done`` with the result."""

    def __init__(self, rid: int, done: Callable[[Any], None]) -> None:
        self.id = rid
        self._done = done

    def complete(self, result: Any) -> None:
        self._done(result)


class ManualClock:
    """A clock that moves only when told (``now``); no timers of its own."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class GatedClock:
    """A ``poolkit.DrivenClock`` of real time (its timers and threads the machine's), whose
    ``Pool`` blocking waits are held after their wake-up until ``gate`` is set: a woken waiter
    resumes only when the test lets it."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], Any]) -> threading.Timer:
        timer = threading.Timer(max(0.0, when - time.monotonic()), callback)
        timer.daemon = True
        timer.start()
        return timer

    def start_thread(self, target: Callable[[], Any], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def new_signal(self) -> GatedSignal:
        return GatedSignal(self.gate)


class GatedSignal:
    def __init__(self, gate: threading.Event) -> None:
        self._woken = threading.Event()
        self._gate = gate

    def wait(self) -> None:
        self._woken.wait()
        self._gate.wait(BOUND)  # (bounded: a test that never opens it fails, never hangs)

    def set(self) -> None:
        self._woken.set()


def _waiting(pool: Any, count: int) -> Callable[[], bool]:
    """Whether ``count`` checkouts wait in ``pool``."""
    return lambda: pool.stats().waiting == count


def _timeout(wait: str) -> dict[str, float]:
    return {"timeout": BOUND} if wait.endswith("_timeout") else {}


def _bounded(call: Callable[[], T], bound: float = BOUND) -> T:
    """``call()`` in a thread of its own, waited for at most ``bound`` seconds (``pytest.fail``
    in it fails the test)."""
    result: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            result.append((True, call()))
        except BaseException as exc:
            result.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        pytest.fail(f"{call!r} never returned (a lost wake-up)")
    ok, value = result[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


async def _whole(scenario: Awaitable[None]) -> None:
    """A whole scenario, for at most ``WHOLE`` seconds: whatever waits in it, it never hangs."""
    try:
        await asyncio.wait_for(scenario, WHOLE)
    except TimeoutError:
        pytest.fail(f"the scenario did not end in {WHOLE} s (a lost wake-up)")


async def _abounded(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, for at most ``BOUND`` seconds."""
    try:
        return await asyncio.wait_for(awaitable, BOUND)
    except TimeoutError:
        pytest.fail(f"{awaitable!r} never returned (a lost wake-up)")


# ---------------------------------------------------------------------- asyncio


async def _connect(ctx: poolkit.ConnectContext) -> Conn:
    return Conn(ctx.connection_id)


def _async_pool(
    observed: Observed, made: list[Conn], clock: Any = None, **options: Any
) -> poolkit.AsyncPool[Conn]:
    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        conn = Conn(ctx.connection_id)
        made.append(conn)
        return conn

    return poolkit.AsyncPool(
        connect,
        address="db:1",
        options=observed.options(**options),
        listeners=observed.listeners(),
        clock=clock,
    )


async def _async_give_back(pool: poolkit.AsyncPool[Conn], lease: Any, give_back: str) -> None:
    """Give ``lease`` back in the form ``give_back`` (a block's forms: ``release()``)."""
    if give_back == "checkin":
        await pool.checkin(lease)
    elif give_back == "discard":
        lease.discard()
    else:
        lease.release()


async def _async_warm(pool: poolkit.AsyncPool[Conn]) -> None:
    """Make the pool's connection and give it back: the next checkout finds it available (the
    check-out fast paths; a block that is the lease itself)."""
    lease = await _abounded(pool.checkout())
    lease.release()


async def _until(test: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not test():
        assert time.monotonic() < deadline, "the waiters never queued"
        await asyncio.sleep(0)


async def _async_handoffs(observed: Observed, give_back: str, wait: str) -> None:
    made: list[Conn] = []
    pool = _async_pool(observed, made, max_size=1)
    order: list[int] = []
    errors: list[BaseException] = []
    requests_done = asyncio.Event()

    async def waiter(i: int) -> None:
        if wait.startswith("checkout"):
            lease = await pool.checkout(**_timeout(wait))
            order.append(i)
            await _async_give_back(pool, lease, give_back)
            return
        try:
            async with pool.connection(**_timeout(wait)):
                order.append(i)
                if give_back == "block_error":
                    raise Boom
        except Boom:
            pass

    def completed(i: int) -> Callable[[Any], None]:
        def done(result: Any) -> None:
            if not isinstance(result, poolkit.Lease):
                errors.append(result)
                requests_done.set()
                return
            order.append(i)
            if give_back == "discard":
                result.discard()
            else:
                result.release()  # (``checkin`` is awaited: here, in a plain callback, release)
            if i == WAITERS - 1:
                requests_done.set()

        return done

    async def start_waiters() -> list[asyncio.Task[None]]:
        tasks = []
        for i in range(WAITERS):
            if wait == "request":
                pool.lease_request(Request(i, completed(i)))
            else:
                tasks.append(asyncio.create_task(waiter(i)))
            await _until(_waiting(pool, i + 1))
        return tasks

    async with pool:
        await _async_warm(pool)
        if give_back in ("block", "block_error"):
            try:
                async with pool.connection():
                    tasks = await start_waiters()
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = await _abounded(pool.checkout())
            tasks = await start_waiters()
            await _async_give_back(pool, lease, give_back)
        try:
            if wait == "request":
                await asyncio.wait_for(requests_done.wait(), BOUND)
            else:
                await asyncio.wait_for(asyncio.gather(*tasks), BOUND)
        except TimeoutError:
            pytest.fail(f"waiters served: {order} of {list(range(WAITERS))} (a lost wake-up)")
        assert not errors
        assert order == list(range(WAITERS))
        _check_after(pool.stats(), give_back, wait, made, observed)


def _check_after(
    stats: poolkit.PoolStats, give_back: str, wait: str, made: list[Conn], seen: Observed
) -> None:
    """Everything given back, once each: the pool's counts and what its observers saw."""
    assert stats.in_use == 0
    assert stats.waiting == 0
    assert stats.checkouts == 2 + WAITERS  # (the warm-up's, the holder's, the waiters')
    assert stats.waits == 1 + WAITERS  # (the warm-up waited for its connect; each hand-off too)
    if give_back == "discard" and wait.startswith("connection"):  # (its waiters: the exit)
        assert [c.closed for c in made] == [1, 0]  # a new one for the first waiter, kept
        assert stats.available == 1
    elif give_back == "discard":  # each one closed, a new one made for each waiter
        assert [c.closed for c in made] == [1] * (1 + WAITERS)
        assert stats.available == 0
    else:  # the same connection, handed from one to the next
        assert len(made) == 1
        assert made[0].closed == 0
        assert stats.available == 1
    if seen.mode == "hooks":
        assert stats.resets > 0  # (every check-in but a discard's)
        assert (seen.ended > 0) == (give_back.startswith("block") or wait.startswith("connection"))
    if seen.mode in ("listener", "debug"):  # (each check-out and check-in seen, none unseen)
        assert seen.checked() == (2 + WAITERS, 2 + WAITERS)


@pytest.mark.parametrize("wait", WAITS)
@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_asyncio_giving_back_serves_the_oldest_waiter(mode: str, give_back: str, wait: str) -> None:
    with Observed(mode) as observed:
        asyncio.run(_whole(_async_handoffs(observed, give_back, wait)))


# ---------------------------------------------------------------------- threads


def _thread_pool(
    observed: Observed, made: list[Conn], clock: Any = None, **options: Any
) -> poolkit.Pool[Conn]:
    def connect(ctx: poolkit.ConnectContext) -> Conn:
        conn = Conn(ctx.connection_id)
        made.append(conn)
        return conn

    return poolkit.Pool(
        connect,
        address="db:1",
        options=observed.options(**options),
        listeners=observed.listeners(),
        clock=clock,
    )


def _thread_give_back(pool: poolkit.Pool[Conn], lease: Any, give_back: str) -> None:
    if give_back == "checkin":
        pool.checkin(lease)
    elif give_back == "discard":
        lease.discard()
    else:
        lease.release()


def _thread_warm(pool: poolkit.Pool[Conn]) -> None:
    """``_async_warm`` for ``Pool``."""
    _bounded(pool.checkout).release()


def _thread_until(test: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not test():
        assert time.monotonic() < deadline, "the waiters never queued"
        time.sleep(0.001)


def _join(threads: list[threading.Thread], order: list[int]) -> None:
    deadline = time.monotonic() + BOUND
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            pytest.fail(f"waiters served: {order} of {list(range(WAITERS))} (a lost wake-up)")


def _thread_handoffs(observed: Observed, give_back: str, wait: str) -> None:
    made: list[Conn] = []
    pool = _thread_pool(observed, made, max_size=1)
    order: list[int] = []
    errors: list[BaseException] = []
    requests_done = threading.Event()

    def waiter(i: int) -> None:
        try:
            if wait.startswith("checkout"):
                lease = pool.checkout(**_timeout(wait))
                order.append(i)
                _thread_give_back(pool, lease, give_back)
                return
            try:
                with pool.connection(**_timeout(wait)):
                    order.append(i)
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        except BaseException as exc:
            errors.append(exc)

    def completed(i: int) -> Callable[[Any], None]:
        def done(result: Any) -> None:
            if not isinstance(result, poolkit.Lease):
                errors.append(result)
                requests_done.set()
                return
            order.append(i)
            form = "release" if give_back.startswith("block") else give_back
            _thread_give_back(pool, result, form)
            if i == WAITERS - 1:
                requests_done.set()

        return done

    def start_waiters() -> list[threading.Thread]:
        threads = []
        for i in range(WAITERS):
            if wait == "request":
                pool.lease_request(Request(i, completed(i)))
            else:
                thread = threading.Thread(target=waiter, args=(i,), daemon=True)
                thread.start()
                threads.append(thread)
            _thread_until(_waiting(pool, i + 1))
        return threads

    with pool:
        _thread_warm(pool)
        if give_back in ("block", "block_error"):
            try:
                with pool.connection():
                    threads = start_waiters()
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = _bounded(pool.checkout)
            threads = start_waiters()
            _thread_give_back(pool, lease, give_back)
        if wait == "request":
            if not requests_done.wait(BOUND):
                pytest.fail(f"requests served: {order} of {list(range(WAITERS))} (a lost wake-up)")
        else:
            _join(threads, order)
        assert not errors
        assert order == list(range(WAITERS))
        _check_after(pool.stats(), give_back, wait, made, observed)


@pytest.mark.parametrize("wait", WAITS)
@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_threads_giving_back_serves_the_oldest_waiter(mode: str, give_back: str, wait: str) -> None:
    with Observed(mode) as observed:
        _bounded(lambda: _thread_handoffs(observed, give_back, wait), WHOLE)


# ---------------------------------------------------------------------- given back once


async def _async_twice(observed: Observed, give_back: str) -> None:
    made: list[Conn] = []
    pool = _async_pool(observed, made, max_size=1)
    async with pool:
        await _async_warm(pool)
        if give_back in ("block", "block_error"):
            block = pool.connection()
            try:
                async with block:
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
            with pytest.raises(poolkit.InvalidLeaseError):
                await block.__aexit__(None, None, None)  # (its exit, run again)
        else:
            lease = await _abounded(pool.checkout())
            await _async_give_back(pool, lease, give_back)
            with pytest.raises(poolkit.InvalidLeaseError):
                await _async_give_back(pool, lease, give_back)
        stats = pool.stats()
        assert (stats.in_use, stats.available) == (0, 0 if give_back == "discard" else 1)
        first = await pool.checkout(timeout=BOUND)
        with pytest.raises(poolkit.WaitQueueTimeoutError):  # (one connection, and it is out)
            await pool.checkout(timeout=0.01)
        first.release()


@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_asyncio_a_connection_is_given_back_once(mode: str, give_back: str) -> None:
    with Observed(mode) as observed:
        asyncio.run(_whole(_async_twice(observed, give_back)))


def _thread_twice(observed: Observed, give_back: str) -> None:
    made: list[Conn] = []
    pool = _thread_pool(observed, made, max_size=1)
    with pool:
        _thread_warm(pool)
        if give_back in ("block", "block_error"):
            block = pool.connection()
            try:
                with block:
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
            with pytest.raises(poolkit.InvalidLeaseError):
                block.__exit__(None, None, None)  # (its exit, run again)
        else:
            lease = _bounded(pool.checkout)
            _thread_give_back(pool, lease, give_back)
            with pytest.raises(poolkit.InvalidLeaseError):
                _thread_give_back(pool, lease, give_back)
        stats = pool.stats()
        assert (stats.in_use, stats.available) == (0, 0 if give_back == "discard" else 1)
        first = pool.checkout(timeout=BOUND)
        with pytest.raises(poolkit.WaitQueueTimeoutError):  # (one connection, and it is out)
            pool.checkout(timeout=0.01)
        first.release()


@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_threads_a_connection_is_given_back_once(mode: str, give_back: str) -> None:
    with Observed(mode) as observed:
        _bounded(lambda: _thread_twice(observed, give_back), WHOLE)


# ---------------------------------------------------------------------- closed on the way

#: the forms that hand the connection itself to the waiter (a discard makes a new one)
HANDING = ["block", "block_error", "release", "checkin"]
#: the waits that resume after their hand-off (a request object is completed in the hand-off)
RESUMING = ["checkout", "checkout_timeout", "connection", "connection_timeout"]


async def _async_cleared(observed: Observed, give_back: str, wait: str) -> None:
    """A connection handed to a waiter, closed by ``clear(interrupt_in_use=True)`` before the
    waiter resumes: the waiter fails with ``PoolClearedError``, never gets a closed one."""
    made: list[Conn] = []
    pool = _async_pool(observed, made, max_size=1)

    async def waiter() -> Any:
        if wait.startswith("checkout"):
            lease = await pool.checkout(**_timeout(wait))
            conn = lease.connection
            lease.release()
            return conn
        async with pool.connection(**_timeout(wait)) as conn:
            return conn

    async with pool:
        await _async_warm(pool)
        if give_back in ("block", "block_error"):
            try:
                async with pool.connection():
                    task = asyncio.create_task(waiter())
                    await _until(lambda: pool.stats().waiting == 1)
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = await _abounded(pool.checkout())
            task = asyncio.create_task(waiter())
            await _until(lambda: pool.stats().waiting == 1)
            await _async_give_back(pool, lease, give_back)
        pool.clear(interrupt_in_use=True)  # (the waiter, woken, has not resumed yet)
        with pytest.raises(poolkit.PoolClearedError):
            await asyncio.wait_for(task, BOUND)
        assert made[0].closed == 1
        assert pool.stats().in_use == 0
        if observed.mode in ("listener", "debug"):  # (the closed one came back: a check-in each)
            out, back = observed.checked()
            assert out == back


@pytest.mark.parametrize("wait", RESUMING)
@pytest.mark.parametrize("give_back", HANDING)
def test_asyncio_a_connection_closed_before_the_waiter_resumes(
    mode: str, give_back: str, wait: str
) -> None:
    with Observed(mode) as observed:
        asyncio.run(_whole(_async_cleared(observed, give_back, wait)))


def _thread_cleared(observed: Observed, give_back: str, wait: str) -> None:
    made: list[Conn] = []
    clock = GatedClock()
    pool = _thread_pool(observed, made, clock, max_size=1)
    outcome: list[Any] = []

    def waiter() -> None:
        try:
            if wait.startswith("checkout"):
                lease = pool.checkout(**_timeout(wait))
                lease.release()
                outcome.append(lease)
                return
            with pool.connection(**_timeout(wait)) as conn:
                outcome.append(conn)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=waiter, daemon=True)
    with pool:
        _thread_warm(pool)
        if give_back in ("block", "block_error"):
            try:
                with pool.connection():
                    clock.gate.clear()  # the waiter, once woken, waits for the test
                    thread.start()
                    _thread_until(lambda: pool.stats().waiting == 1)
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = _bounded(pool.checkout)
            clock.gate.clear()
            thread.start()
            _thread_until(lambda: pool.stats().waiting == 1)
            _thread_give_back(pool, lease, give_back)
        pool.clear(interrupt_in_use=True)
        clock.gate.set()
        _join([thread], [])
        assert len(outcome) == 1 and isinstance(outcome[0], poolkit.PoolClearedError)
        assert made[0].closed == 1
        assert pool.stats().in_use == 0
        if observed.mode in ("listener", "debug"):  # (the closed one came back: a check-in each)
            out, back = observed.checked()
            assert out == back


@pytest.mark.parametrize("wait", RESUMING)
@pytest.mark.parametrize("give_back", HANDING)
def test_threads_a_connection_closed_before_the_waiter_resumes(
    mode: str, give_back: str, wait: str
) -> None:
    with Observed(mode) as observed:
        _bounded(lambda: _thread_cleared(observed, give_back, wait), WHOLE)


# ---------------------------------------------------------------------- perished on the way


async def _async_perished(observed: Observed, wait: str) -> None:
    """A checkout that meets a perished connection (past ``max_lifetime``) on its way to a good
    one closes it then and there, whichever path it takes."""
    made: list[Conn] = []
    clock = ManualClock()
    pool = _async_pool(
        observed, made, clock, max_size=2, max_lifetime=1000.0, max_lifetime_jitter=0.0
    )
    async with pool:
        old = await _abounded(pool.checkout())
        clock.now = 500.0
        new = await _abounded(pool.checkout())
        clock.now = 900.0
        new.release()
        old.release()  # (the most recently used: met first)
        clock.now = 1001.0  # the old one perished, the new one not
        if wait.startswith("checkout"):
            lease = await pool.checkout(**_timeout(wait))
            got, closed = lease.connection, made[0].closed
            lease.release()
        else:
            async with pool.connection(**_timeout(wait)) as got:
                closed = made[0].closed
        assert got is made[1]
        assert closed == 1  # (closed before the checkout returned)


@pytest.mark.parametrize("wait", RESUMING)
def test_asyncio_a_checkout_closes_the_perished_connections_it_meets(mode: str, wait: str) -> None:
    with Observed(mode) as observed:
        asyncio.run(_whole(_async_perished(observed, wait)))


def _thread_perished(observed: Observed, wait: str) -> None:
    made: list[Conn] = []
    clock = ManualClock()
    pool = _thread_pool(
        observed, made, clock, max_size=2, max_lifetime=1000.0, max_lifetime_jitter=0.0
    )
    with pool:
        old = _bounded(pool.checkout)
        clock.now = 500.0
        new = _bounded(pool.checkout)
        clock.now = 900.0
        new.release()
        old.release()
        clock.now = 1001.0
        if wait.startswith("checkout"):
            lease = pool.checkout(**_timeout(wait))
            got, closed = lease.connection, made[0].closed
            lease.release()
        else:
            with pool.connection(**_timeout(wait)) as got:
                closed = made[0].closed
        assert got is made[1]
        assert closed == 1


@pytest.mark.parametrize("wait", RESUMING)
def test_threads_a_checkout_closes_the_perished_connections_it_meets(mode: str, wait: str) -> None:
    with Observed(mode) as observed:
        _bounded(lambda: _thread_perished(observed, wait), WHOLE)


# ---------------------------------------------------------------------- cancelled, handed one


async def _async_cancelled(observed: Observed, give_back: str, wait: str) -> None:
    """A waiter handed the connection and cancelled before it resumes gives it straight back:
    the next waiter gets it."""
    made: list[Conn] = []
    pool = _async_pool(observed, made, max_size=1)

    async def waiter() -> Any:
        if wait.startswith("checkout"):
            lease = await pool.checkout(**_timeout(wait))
            conn = lease.connection
            lease.release()
            return conn
        async with pool.connection(**_timeout(wait)) as conn:
            return conn

    async with pool:
        await _async_warm(pool)
        if give_back in ("block", "block_error"):
            try:
                async with pool.connection():
                    first = asyncio.create_task(waiter())
                    await _until(lambda: pool.stats().waiting == 1)
                    second = asyncio.create_task(waiter())
                    await _until(lambda: pool.stats().waiting == 2)
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = await _abounded(pool.checkout())
            first = asyncio.create_task(waiter())
            await _until(lambda: pool.stats().waiting == 1)
            second = asyncio.create_task(waiter())
            await _until(lambda: pool.stats().waiting == 2)
            await _async_give_back(pool, lease, give_back)
        first.cancel()  # (handed the connection, not resumed yet)
        assert await asyncio.wait_for(second, BOUND) is made[0]
        assert first.cancelled()
        stats = pool.stats()
        assert (stats.in_use, stats.available, len(made)) == (0, 1, 1)


@pytest.mark.parametrize("wait", RESUMING)
@pytest.mark.parametrize("give_back", HANDING)
def test_asyncio_a_waiter_cancelled_after_its_hand_off_gives_it_back(
    mode: str, give_back: str, wait: str
) -> None:
    with Observed(mode) as observed:
        asyncio.run(_whole(_async_cancelled(observed, give_back, wait)))


# ---------------------------------------------------------------------- DEBUG turned on meanwhile


@pytest.fixture
def quiet_logger() -> Iterator[logging.Logger]:
    """The CMAP logger, DEBUG off (and known off: the fast paths run) until the test turns it
    on."""
    logger = logging.getLogger("poolkit.connection")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        assert not logger.isEnabledFor(logging.DEBUG)
        yield logger
    finally:
        logger.setLevel(level)


async def _async_debug_meanwhile(logger: logging.Logger, give_back: str) -> None:
    made: list[Conn] = []
    pool = _async_pool(Observed("fast"), made, max_size=1)
    async with pool:
        await _async_warm(pool)
        assert log._cached_level(logging.DEBUG) is False
        if give_back in ("block", "block_error"):
            try:
                async with pool.connection():  # (the fast path: the block is the lease)
                    logger.setLevel(logging.DEBUG)
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = await _abounded(pool.checkout())
            logger.setLevel(logging.DEBUG)
            await _async_give_back(pool, lease, give_back)


def _thread_debug_meanwhile(logger: logging.Logger, give_back: str) -> None:
    made: list[Conn] = []
    pool = _thread_pool(Observed("fast"), made, max_size=1)
    with pool:
        _thread_warm(pool)
        assert log._cached_level(logging.DEBUG) is False
        if give_back in ("block", "block_error"):
            try:
                with pool.connection():
                    logger.setLevel(logging.DEBUG)
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = _bounded(pool.checkout)
            logger.setLevel(logging.DEBUG)
            _thread_give_back(pool, lease, give_back)


@pytest.mark.parametrize("front", ["asyncio", "threads"])
@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_debug_turned_on_while_a_connection_is_out_logs_its_check_in(
    quiet_logger: logging.Logger, front: str, give_back: str
) -> None:
    """Checked out unobserved (the fast path), given back once DEBUG is on: the check-in is
    logged (each give-back copy asks the logger again)."""
    with Observed("debug") as observed:
        if front == "asyncio":
            asyncio.run(_whole(_async_debug_meanwhile(quiet_logger, give_back)))
        else:
            _bounded(lambda: _thread_debug_meanwhile(quiet_logger, give_back), WHOLE)
    assert observed.checked() == (0, 1)
