"""Giving a connection back, and handing it to a waiter, in every form a user writes (issue 38).

Each front end writes its check-in and check-out fast paths more than once (``lease.release()``,
``pool.checkin()``, ``connection()``'s exit and entry), and they run only when nobody observes
the pool. These tests drive each form through the public API, with the fast paths on (no
listener, DEBUG logging off) and off (a listener; DEBUG logging), on a pool of one connection:
giving back must serve the waiters in the order they came, at once, in every way of waiting.
Every wait is bounded, so that a lost wake-up fails in seconds instead of hanging.
``tools/mutate_handoffs.py`` removes each step of each copy in turn and names the test here that
catches it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import poolkit
from doubles import Conn
from poolkit import events as ev
from poolkit import log

#: the longest any test here waits for one thing: a lost wake-up fails, never hangs
BOUND = 5.0
#: waiters queued behind the holder
WAITERS = 3

MODES = ["fast", "listener", "debug"]
#: how the holder (and each waiter, where it can) gives its connection back
GIVE_BACKS = ["block", "block_error", "release", "checkin", "discard"]
#: how each waiter waits
WAITS = ["checkout", "checkout_timeout", "connection", "connection_timeout", "request"]


class Boom(Exception):
    """What leaves a ``connection()`` block by exception."""


class Observed:
    """What a pool's observers saw: its events (mode ``listener``), its DEBUG log (``debug``)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.events: list[ev.PoolEvent] = []

    def listeners(self) -> list[Callable[[ev.PoolEvent], None]]:
        return [self.events.append] if self.mode == "listener" else []

    def count(self, kind: type[ev.PoolEvent]) -> int:
        return sum(isinstance(e, kind) for e in self.events)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """``fast``: nobody observes, the fast paths run (DEBUG known off: the logger's cached
    answer); ``listener``: a listener is attached; ``debug``: the CMAP log at DEBUG."""
    logger = logging.getLogger("poolkit.connection")
    level = logger.level
    chosen = str(request.param)
    logger.setLevel(logging.DEBUG if chosen == "debug" else logging.WARNING)
    try:
        if chosen != "debug":
            assert not logger.isEnabledFor(logging.DEBUG)
            assert log.cached_level(logging.DEBUG) is False  # (the fast paths may run)
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
    """Real time, and ``Pool``'s blocking waits held after their wake-up until ``gate`` is set:
    a woken waiter resumes only when the test lets it."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def monotonic(self) -> float:
        return time.monotonic()

    def new_signal(self) -> GatedSignal:
        return GatedSignal(self.gate)


class GatedSignal:
    def __init__(self, gate: threading.Event) -> None:
        self._woken = threading.Event()
        self._gate = gate

    def wait(self) -> None:
        self._woken.wait()
        self._gate.wait()

    def set(self) -> None:
        self._woken.set()


def _timeout(wait: str) -> dict[str, float]:
    return {"timeout": BOUND} if wait.endswith("_timeout") else {}


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
        options=poolkit.PoolOptions(**options),
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


async def _until(test: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not test():
        assert time.monotonic() < deadline, "the waiters never queued"
        await asyncio.sleep(0)


async def _async_handoffs(mode: str, give_back: str, wait: str) -> None:
    observed = Observed(mode)
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
            await _until(lambda: pool.stats().waiting == i + 1)
        return tasks

    async with pool:
        if give_back in ("block", "block_error"):
            try:
                async with pool.connection():
                    tasks = await start_waiters()
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = await pool.checkout()
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
    assert stats.checkouts == 1 + WAITERS
    assert stats.waits == 1 + WAITERS  # (the first waited for its connect; each hand-off too)
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
    if seen.mode == "listener":
        assert seen.count(ev.ConnectionCheckedOutEvent) == 1 + WAITERS
        assert seen.count(ev.ConnectionCheckedInEvent) == 1 + WAITERS


@pytest.mark.parametrize("wait", WAITS)
@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_asyncio_giving_back_serves_the_oldest_waiter(mode: str, give_back: str, wait: str) -> None:
    asyncio.run(_async_handoffs(mode, give_back, wait))


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
        options=poolkit.PoolOptions(**options),
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


def _thread_handoffs(mode: str, give_back: str, wait: str) -> None:
    observed = Observed(mode)
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
            _thread_give_back(pool, result, "release" if give_back.startswith("block") else give_back)
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
            _thread_until(lambda: pool.stats().waiting == i + 1)
        return threads

    with pool:
        if give_back in ("block", "block_error"):
            try:
                with pool.connection():
                    threads = start_waiters()
                    if give_back == "block_error":
                        raise Boom
            except Boom:
                pass
        else:
            lease = pool.checkout()
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
    _thread_handoffs(mode, give_back, wait)
