"""A runner for the official CMAP spec test files (``shared/spec-tests/cmap-format``).

It follows the runner rules of the spec's ``cmap-format/README.md``: operations run on the main
thread or on named threads, events are captured in order, ``ignore`` filters them, and each
expected event must MATCH the actual one at the same index (42 / "42" mean "any value").

Each front end is run: ``AsyncPool`` on :class:`poolkit.testing.VirtualTimeLoop` (threads are
tasks), ``AsyncPool`` under trio on trio's ``MockClock`` (threads are tasks), and ``Pool`` on
:class:`poolkit.testing.FakeClock` (threads are real threads the clock tracks). Time is virtual
in all three, so the runs are deterministic and take milliseconds.

Integration files are run as emulations: their ``failPoint`` (``failCommand`` on the handshake)
becomes a scripted connect function. ``blockConnection``/``blockTimeMS`` makes the connect take
that long; ``errorCode`` makes it fail, and then the pool's owner clears the pool first, as a
driver's server monitor does on a "shutting down" handshake error (code 91); ``closeConnection``
makes it fail with a network error. ``mode`` is ``alwaysOn`` or ``{"times": n}``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import trio
import trio.testing

import poolkit
from poolkit.testing import FakeClock, VirtualTimeLoop
from spec_dirs import find_spec_dir, where_looked

#: the official files: 26 unit and 7 integration files, each run on each front end (AsyncPool
#: under asyncio and under trio, Pool)
SPEC_FILES = 33
FRONT_ENDS = ("asyncio", "threads", "trio")
#: seconds of virtual time after which a trio run is failed as deadlocked
DEADLOCK_AFTER = 24 * 3600.0


def find_cmap_dir(setting: str | None) -> Path:
    """The folder of the CMAP spec files (:func:`spec_dirs.find_spec_dir`)."""
    return find_spec_dir("cmap-format", setting)


def missing_reason(cmap_dir: Path) -> str:
    """One line: how many spec cases did not run, why, and what to set."""
    cases = SPEC_FILES * len(FRONT_ENDS)
    return (
        f"{cases} CMAP spec cases ({SPEC_FILES} files x {len(FRONT_ENDS)} front ends) did not "
        f"run: no *.json spec files in {where_looked('cmap-format', cmap_dir)}"
    )


CMAP_DIR = find_cmap_dir(os.environ.get("POOLKIT_SPEC_TESTS"))
ADDRESS = "localhost:27017"
#: virtual seconds a waitForEvent / waitForThread may wait before the test fails
DEFAULT_WAIT = 30.0


def load(name: str) -> dict[str, Any]:
    with open(CMAP_DIR / name, encoding="utf-8") as f:
        return json.load(f)  # type: ignore[no-any-return]


def pool_options(spec: dict[str, Any]) -> poolkit.PoolOptions:
    raw = dict(spec.get("poolOptions", {}))
    kwargs: dict[str, Any] = {}
    if "maxPoolSize" in raw:
        kwargs["max_size"] = raw.pop("maxPoolSize")
    if "minPoolSize" in raw:
        kwargs["min_size"] = raw.pop("minPoolSize")
    if "maxConnecting" in raw:
        kwargs["max_connecting"] = raw.pop("maxConnecting")
    if "maxIdleTimeMS" in raw:
        ms = raw.pop("maxIdleTimeMS")
        kwargs["max_idle_time"] = ms / 1000 if ms else None
    if "waitQueueTimeoutMS" in raw:
        ms = raw.pop("waitQueueTimeoutMS")
        kwargs["wait_queue_timeout"] = ms / 1000 if ms else None
    if "backgroundThreadIntervalMS" in raw:
        ms = raw.pop("backgroundThreadIntervalMS")
        kwargs["background_interval"] = math.inf if ms < 0 else ms / 1000
    raw.pop("appName", None)
    if raw:
        raise NotImplementedError(f"pool options the runner does not map: {sorted(raw)}")
    return poolkit.PoolOptions(**kwargs)


class HandshakeError(Exception):
    """What the emulated server answers a failed handshake with."""

    def __init__(self, code: int) -> None:
        super().__init__(f"handshake failed with server error code {code}")
        self.code = code


class FailPoint:
    """The ``failCommand`` fail point on ``hello``, as a script for connect functions."""

    def __init__(self, spec: dict[str, Any] | None) -> None:
        self.data: dict[str, Any] = {}
        self.remaining: float = 0
        if spec is None:
            return
        if spec.get("configureFailPoint") != "failCommand":
            raise NotImplementedError(f"fail point {spec.get('configureFailPoint')!r}")
        data = spec["data"]
        if not {"hello", "isMaster"} & set(data.get("failCommands", [])):
            raise NotImplementedError("fail points on commands other than the handshake")
        mode = spec["mode"]
        self.remaining = math.inf if mode == "alwaysOn" else mode["times"]
        self.data = data

    def next(self) -> dict[str, Any] | None:
        """The fail point's effect on the next handshake, or ``None``."""
        if self.remaining <= 0:
            return None
        self.remaining -= 1
        return self.data


class MockConnection:
    def __init__(self, connection_id: int) -> None:
        self.id = connection_id
        self.closed = False

    def close(self) -> None:
        self.closed = True


def event_as_spec(event: poolkit.events.PoolEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"type": event.cmap_name, "address": event.address}
    for name, key in (
        ("connection_id", "connectionId"),
        ("duration", "duration"),
        ("options", "options"),
        ("reason", "reason"),
        ("interrupt_in_use_connections", "interruptInUseConnections"),
        ("service_id", "serviceId"),
    ):
        if hasattr(event, name):
            out[key] = getattr(event, name)
    return out


def matches(actual: Any, expected: Any, where: str = "") -> None:
    """The spec's MATCH: ``expected`` is a subset of ``actual``; 42 and "42" mean "exists"."""
    if expected == 42 or expected == "42":
        assert actual is not None, f"{where}: expected a value, got none"
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}: missing {key!r} in {actual!r}"
            matches(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        for i, value in enumerate(expected):
            assert i < len(actual), f"{where}: no item {i} in {actual!r}"
            matches(actual[i], value, f"{where}[{i}]")
    else:
        assert type(actual) is type(expected) or (
            isinstance(actual, int | float) and isinstance(expected, int | float)
        ), f"{where}: expected {expected!r}, got {actual!r}"
        assert actual == expected, f"{where}: expected {expected!r}, got {actual!r}"


def check_outcome(
    spec: dict[str, Any], events: list[poolkit.events.PoolEvent], error: BaseException | None
) -> None:
    expected_error = spec.get("error")
    if expected_error is not None:
        assert error is not None, f"expected {expected_error['type']}, nothing was raised"
        matches({"type": type(error).__name__, "message": str(error)}, expected_error, "error")
    elif error is not None:
        raise AssertionError(f"unexpected error on the main thread: {error!r}") from error
    ignore = set(spec.get("ignore", []))
    # (poolkit's own events, which have no CMAP name, are outside the spec)
    actual = [event_as_spec(e) for e in events if e.cmap_name and e.cmap_name not in ignore]
    for i, expected in enumerate(spec["events"]):
        assert i < len(actual), (
            f"event {i} {expected['type']} missing; got {[a['type'] for a in actual]}"
        )
        matches(actual[i], expected, f"event {i}")


def count_events(events: list[poolkit.events.PoolEvent], name: str) -> int:
    return sum(1 for e in list(events) if e.cmap_name == name)


# ---------------------------------------------------------------------- asyncio


def async_connect(
    failpoint: FailPoint,
    holder: dict[str, poolkit.AsyncPool[MockConnection]],
    sleep: Callable[[float], Awaitable[Any]],
) -> Callable[[poolkit.ConnectContext], Awaitable[MockConnection]]:
    """The spec's connect for AsyncPool (asyncio's or trio's: ``sleep`` is the library's): the
    fail point's next effect (a blocked connect, a handshake error that clears the pool in
    ``holder`` as the server monitor would, a connection closed), else a new connection."""

    async def connect(ctx: poolkit.ConnectContext) -> MockConnection:
        effect = failpoint.next()
        if effect is not None:
            if effect.get("blockConnection"):
                await sleep(effect["blockTimeMS"] / 1000)
            if "errorCode" in effect:
                error = HandshakeError(effect["errorCode"])
                holder["pool"].clear(cause=error)  # the server monitor's reaction
                raise error
            if effect.get("closeConnection"):
                raise ConnectionResetError("connection closed by the server during the handshake")
        return MockConnection(ctx.connection_id)

    return connect


async def run_async(
    spec: dict[str, Any],
) -> tuple[list[poolkit.events.PoolEvent], BaseException | None]:
    """Run one spec file on AsyncPool; return the events seen and the main thread's error."""
    events: list[poolkit.events.PoolEvent] = []
    failpoint = FailPoint(spec.get("failPoint"))
    holder: dict[str, poolkit.AsyncPool[MockConnection]] = {}

    connect = async_connect(failpoint, holder, asyncio.sleep)

    pool: poolkit.AsyncPool[MockConnection] = poolkit.AsyncPool(
        connect, address=ADDRESS, options=pool_options(spec), listeners=[events.append]
    )
    holder["pool"] = pool
    labels: dict[str, poolkit.Lease[MockConnection]] = {}
    held: list[poolkit.Lease[MockConnection]] = []
    queues: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}
    workers: dict[str, asyncio.Task[None]] = {}
    thread_errors: dict[str, BaseException] = {}

    async def execute(op: dict[str, Any]) -> None:
        name = op["name"]
        if name == "checkOut":
            lease = await pool.checkout()
            held.append(lease)  # a driver holds what it checked out, labelled or not
            if "label" in op:
                labels[op["label"]] = lease
        elif name == "checkIn":
            await pool.checkin(labels[op["connection"]])
        elif name == "clear":
            pool.clear(interrupt_in_use=op.get("interruptInUseConnections", False))
        elif name == "close":
            await pool.close()
        elif name == "ready":
            pool.ready()
        elif name == "wait":
            await asyncio.sleep(op["ms"] / 1000)
        elif name == "waitForEvent":
            limit = op.get("timeout", DEFAULT_WAIT * 1000) / 1000
            async with asyncio.timeout(limit):
                while count_events(events, op["event"]) < op["count"]:  # noqa: ASYNC110 - virtual time
                    await asyncio.sleep(0.0005)
        elif name == "start":
            target = op["target"]
            queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
            queues[target] = queue

            async def worker(target: str = target, queue: asyncio.Queue[Any] = queue) -> None:
                while (item := await queue.get()) is not None:
                    try:
                        await execute(item)
                    except Exception as exc:
                        thread_errors.setdefault(target, exc)
                        return

            workers[target] = asyncio.create_task(worker(), name=f"spec-{target}")
        elif name == "waitForThread":
            target = op["target"]
            queues[target].put_nowait(None)
            async with asyncio.timeout(DEFAULT_WAIT):
                await workers[target]
            if target in thread_errors:
                raise thread_errors[target]
        else:
            raise NotImplementedError(f"operation {name!r}")

    error: BaseException | None = None
    try:
        for op in spec["operations"]:
            if "thread" in op:
                queues[op["thread"]].put_nowait(op)
            else:
                await execute(op)
    except Exception as exc:
        error = exc
    seen = list(events)
    for task in workers.values():
        task.cancel()
    await asyncio.gather(*workers.values(), return_exceptions=True)
    await pool.close()
    return seen, error


def run_async_file(
    spec: dict[str, Any],
) -> tuple[list[poolkit.events.PoolEvent], BaseException | None]:
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(run_async(spec))


# ---------------------------------------------------------------------- trio


async def run_trio(
    spec: dict[str, Any],
) -> tuple[list[poolkit.events.PoolEvent], BaseException | None]:
    """Run one spec file on AsyncPool under trio (a MockClock: virtual time); the spec's threads
    are tasks. An operation given to a thread starts after the one given before it (to any
    thread) has started: trio may run the tasks woken together in any order, and the spec's
    order is the order the operations were written in."""
    events: list[poolkit.events.PoolEvent] = []
    failpoint = FailPoint(spec.get("failPoint"))
    holder: dict[str, poolkit.AsyncPool[MockConnection]] = {}

    connect = async_connect(failpoint, holder, trio.sleep)

    pool: poolkit.AsyncPool[MockConnection] = poolkit.AsyncPool(
        connect, address=ADDRESS, options=pool_options(spec), listeners=[events.append]
    )
    holder["pool"] = pool
    labels: dict[str, poolkit.Lease[MockConnection]] = {}
    held: list[poolkit.Lease[MockConnection]] = []
    senders: dict[str, trio.MemorySendChannel[Any]] = {}
    finished: dict[str, trio.Event] = {}
    thread_errors: dict[str, BaseException] = {}
    #: the event set when the last operation given to a thread started
    last_started: list[trio.Event | None] = [None]

    async def execute(op: dict[str, Any]) -> None:
        name = op["name"]
        if name == "checkOut":
            lease = await pool.checkout()
            held.append(lease)  # a driver holds what it checked out, labelled or not
            if "label" in op:
                labels[op["label"]] = lease
        elif name == "checkIn":
            await pool.checkin(labels[op["connection"]])
        elif name == "clear":
            pool.clear(interrupt_in_use=op.get("interruptInUseConnections", False))
        elif name == "close":
            await pool.close()
        elif name == "ready":
            pool.ready()
        elif name == "wait":
            await trio.sleep(op["ms"] / 1000)
        elif name == "waitForEvent":
            limit = op.get("timeout", DEFAULT_WAIT * 1000) / 1000
            with trio.fail_after(limit):
                while count_events(events, op["event"]) < op["count"]:  # noqa: ASYNC110 - virtual time
                    await trio.sleep(0.0005)
        elif name == "start":
            target = op["target"]
            send, receive = trio.open_memory_channel[Any](math.inf)
            senders[target] = send
            done = finished[target] = trio.Event()

            async def worker(
                target: str = target,
                receive: trio.MemoryReceiveChannel[Any] = receive,
                done: trio.Event = done,
            ) -> None:
                try:
                    async for before, started, item in receive:
                        if item is None:
                            return
                        if before is not None:
                            await before.wait()
                        started.set()
                        try:
                            await execute(item)
                        except Exception as exc:
                            thread_errors.setdefault(target, exc)
                            return
                finally:
                    done.set()

            nursery.start_soon(worker, name=f"spec-{target}")
        elif name == "waitForThread":
            target = op["target"]
            senders[target].send_nowait((None, trio.Event(), None))
            with trio.fail_after(DEFAULT_WAIT):
                await finished[target].wait()
            if target in thread_errors:
                raise thread_errors[target]
        else:
            raise NotImplementedError(f"operation {name!r}")

    error: BaseException | None = None
    seen: list[poolkit.events.PoolEvent] = []
    async with trio.open_nursery() as nursery, pool.running(ready=False):
        try:
            for op in spec["operations"]:
                if "thread" in op:
                    started = trio.Event()
                    senders[op["thread"]].send_nowait((last_started[0], started, op))
                    last_started[0] = started
                else:
                    await execute(op)
        except Exception as exc:
            error = exc
        seen = list(events)
        nursery.cancel_scope.cancel()  # the spec's threads (the pool's nursery is its own)
        await pool.close()
    return seen, error


def run_trio_file(
    spec: dict[str, Any],
) -> tuple[list[poolkit.events.PoolEvent], BaseException | None]:
    getattr(trio._core._run, "_r").seed(0)  # noqa: B009 - trio's own test hook (pytest-trio's)

    async def guarded() -> tuple[list[poolkit.events.PoolEvent], BaseException | None]:
        # (every task blocked with no deadline is a deadlock, not a wait: the clock jumps to
        # this one and the run fails at once, rather than hanging)
        with trio.fail_after(DEADLOCK_AFTER):
            return await run_trio(spec)

    return trio.run(guarded, clock=trio.testing.MockClock(autojump_threshold=0))


# ---------------------------------------------------------------------- threads


class _Worker:
    """A spec "thread": a real thread, tracked by the fake clock, running queued operations."""

    def __init__(
        self, clock: FakeClock, name: str, execute: Callable[[dict[str, Any]], None]
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._items: list[dict[str, Any] | None] = []
        self._signal: Any = None
        self._execute = execute
        self.busy = False
        self.done = False
        self.error: BaseException | None = None
        clock.start_thread(self._run, f"spec-{name}")

    def put(self, op: dict[str, Any] | None) -> None:
        with self._lock:
            self._items.append(op)
            self.busy = True
            signal, self._signal = self._signal, None
        if signal is not None:
            signal.set()

    def _get(self) -> dict[str, Any] | None:
        while True:
            with self._lock:
                if self._items:
                    return self._items.pop(0)
                self.busy = False
                signal = self._signal = self._clock.new_signal()
            signal.wait()

    def _run(self) -> None:
        try:
            while (op := self._get()) is not None:
                if self.error is None:
                    try:
                        self._execute(op)
                    except Exception as exc:
                        self.error = exc
        finally:
            with self._lock:
                self.busy = False
                self.done = True


def run_threads(
    spec: dict[str, Any],
) -> tuple[list[poolkit.events.PoolEvent], BaseException | None]:
    """Run one spec file on the threaded Pool under a FakeClock."""
    clock = FakeClock()
    events: list[poolkit.events.PoolEvent] = []
    failpoint = FailPoint(spec.get("failPoint"))
    holder: dict[str, poolkit.Pool[MockConnection]] = {}

    def connect(ctx: poolkit.ConnectContext) -> MockConnection:
        effect = failpoint.next()
        if effect is not None:
            if effect.get("blockConnection"):
                clock.sleep(effect["blockTimeMS"] / 1000)
            if "errorCode" in effect:
                error = HandshakeError(effect["errorCode"])
                holder["pool"].clear(cause=error)
                raise error
            if effect.get("closeConnection"):
                raise ConnectionResetError("connection closed by the server during the handshake")
        return MockConnection(ctx.connection_id)

    pool: poolkit.Pool[MockConnection] = poolkit.Pool(
        connect, address=ADDRESS, options=pool_options(spec), listeners=[events.append], clock=clock
    )
    holder["pool"] = pool
    labels: dict[str, poolkit.Lease[MockConnection]] = {}
    held: list[poolkit.Lease[MockConnection]] = []
    workers: dict[str, _Worker] = {}

    def run_until(done: Callable[[], bool], limit: float, what: str) -> None:
        deadline = clock.monotonic() + limit
        while True:
            clock.settle()
            if done():
                return
            nxt = clock.next_timer()
            if nxt is None or nxt > deadline:
                raise TimeoutError(f"{what}: not reached within {limit} s of pool time")
            clock.jump()

    def execute(op: dict[str, Any]) -> None:
        name = op["name"]
        if name == "checkOut":
            lease = pool.checkout()
            held.append(lease)  # a driver holds what it checked out, labelled or not
            if "label" in op:
                labels[op["label"]] = lease
        elif name == "checkIn":
            pool.checkin(labels[op["connection"]])
        elif name == "clear":
            pool.clear(interrupt_in_use=op.get("interruptInUseConnections", False))
        elif name == "close":
            pool.close()
        elif name == "ready":
            pool.ready()
        else:
            raise NotImplementedError(f"operation {name!r}")

    main = _Worker(clock, "main", execute)
    error: BaseException | None = None
    try:
        for op in spec["operations"]:
            name = op["name"]
            if "thread" in op:
                workers[op["thread"]].put(op)
            elif name == "start":
                workers[op["target"]] = _Worker(clock, op["target"], execute)
            elif name == "wait":
                clock.advance(op["ms"] / 1000)
            elif name == "waitForEvent":
                limit = op.get("timeout", DEFAULT_WAIT * 1000) / 1000
                # (the casts: mypy cannot infer a lambda whose parameter has a default)
                run_until(
                    cast(
                        Callable[[], bool],
                        lambda op=op: count_events(events, op["event"]) >= op["count"],
                    ),
                    limit,
                    f"waitForEvent {op['event']} x{op['count']}",
                )
            elif name == "waitForThread":
                worker = workers[op["target"]]
                worker.put(None)
                done = cast(Callable[[], bool], lambda w=worker: w.done)
                run_until(done, DEFAULT_WAIT, f"waitForThread {op['target']}")
                if worker.error is not None:
                    raise worker.error
            else:
                main.put(op)
                run_until(lambda: not main.busy, DEFAULT_WAIT, f"main thread {name}")
                if main.error is not None:
                    raise main.error
    except Exception as exc:
        error = exc
    clock.settle()
    seen = list(events)
    pool.close()
    for worker in (main, *workers.values()):
        worker.put(None)
    clock.advance(3600)  # let connects still sleeping on the clock finish
    clock.settle()
    return seen, error
