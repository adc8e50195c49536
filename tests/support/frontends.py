"""One scenario, both front ends: adapters that let a test written once drive ``AsyncPool`` (on a
virtual-time loop) and ``Pool`` (threads on a :class:`~poolkit.testing.FakeClock`).

A scenario is an ``async def`` taking a :class:`Front`. On the threaded side every call is
synchronous underneath (the scenario's coroutine never suspends); on the asyncio side the pool
runs on the same loop as the scenario. Time moves only through ``advance``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
import trio.testing

import poolkit
from doubles import Conn
from poolkit import events as ev
from poolkit.testing import FakeClock, run

Scenario = Callable[["Front"], Awaitable[None]]
T = TypeVar("T")


class Pending:
    """A checkout running in the background (a task, or a clock-tracked thread)."""

    lease: poolkit.Lease[Conn] | None = None
    error: BaseException | None = None
    done = False

    def _finish(self, lease: poolkit.Lease[Conn] | None, error: BaseException | None) -> None:
        self.lease, self.error, self.done = lease, error, True


class Front:
    """What a scenario sees; subclasses bind it to one front end."""

    name = ""
    pool: Any

    def __init__(
        self, options: poolkit.PoolOptions, streams: int | list[int] = 1, quiet: bool = False
    ) -> None:
        self.options = options
        #: no listener: the pool takes its fast paths (``events`` stays empty)
        self.quiet = quiet
        self.made: list[Conn] = []
        self.events: list[ev.PoolEvent] = []
        #: (time, event) for every event, in order
        self.timed: list[tuple[float, ev.PoolEvent]] = []
        #: (time, connection id) of every keep-alive probe started
        self.probes: list[tuple[float, int]] = []
        #: how long each probe takes; errors the next probes raise, in order (then they succeed)
        self.probe_delay = 0.0
        self.probe_errors: list[BaseException] = []
        #: max_streams each connect reports, in order (the last one repeats)
        self._streams = [streams] if isinstance(streams, int) else list(streams)
        self.connect_delay = 0.0
        #: errors the next connects raise, in order (then they succeed)
        self.connect_errors: list[BaseException] = []
        #: (time, hook name, connection id) of every check and reset started (``Hooks``)
        self.hook_runs: list[tuple[float, str, int]] = []
        #: per hook name: how long each run takes, and the errors the next runs raise
        self.hook_delay: dict[str, float] = {"check": 0.0, "reset": 0.0}
        self.hook_errors: dict[str, list[BaseException]] = {"check": [], "reset": []}

    def _made(self, ctx: poolkit.ConnectContext) -> Any:
        if self.connect_errors:
            raise self.connect_errors.pop(0)
        conn = Conn(ctx.connection_id)
        self.made.append(conn)
        n = self._streams.pop(0) if len(self._streams) > 1 else self._streams[0]
        return poolkit.Established(conn, max_streams=n) if n != 1 else conn

    def _listeners(self) -> list[Any]:
        return [] if self.quiet else [self._record]

    def _record(self, event: ev.PoolEvent) -> None:
        self.events.append(event)
        self.timed.append((self.now(), event))

    def _probe_started(self, conn: Conn) -> BaseException | None:
        self.probes.append((self.now(), conn.id))
        return self.probe_errors.pop(0) if self.probe_errors else None

    def with_keep_alive(
        self, options: poolkit.PoolOptions, probe: Callable[[Any], Any]
    ) -> poolkit.PoolOptions:
        """``options`` with its ``keep_alive`` probe replaced by this front end's ``probe``."""
        if options.keep_alive is None:
            return options
        return dataclasses.replace(
            options, keep_alive=dataclasses.replace(options.keep_alive, probe=probe)
        )

    def _hook_started(self, name: str, conn: Conn) -> BaseException | None:
        self.hook_runs.append((self.now(), name, conn.id))
        errors = self.hook_errors[name]
        return errors.pop(0) if errors else None

    def with_hooks(
        self, options: poolkit.PoolOptions, make: Callable[[str], Callable[[Any], Any]]
    ) -> poolkit.PoolOptions:
        """``options`` with the ``check`` and ``reset`` hooks it sets replaced by this front end's
        (``make(name)``), which record each run and take ``hook_delay`` and ``hook_errors``."""
        hooks = options.hooks
        if hooks is None:
            return options
        check = None if hooks.check is None else make("check")
        reset = None if hooks.reset is None else make("reset")
        return dataclasses.replace(
            options, hooks=dataclasses.replace(hooks, check=check, reset=reset)
        )

    def at(self, kind: type[ev.PoolEvent]) -> list[float]:
        """The times of the events of type ``kind``."""
        return [t for t, e in self.timed if isinstance(e, kind)]

    def of(self, kind: type[Any]) -> list[Any]:
        """The events of type ``kind``."""
        return [e for e in self.events if isinstance(e, kind)]

    def closed(self) -> list[int]:
        """Ids of the connections closed so far, in the order closed."""
        return [e.connection_id for e in self.events if isinstance(e, ev.ConnectionClosedEvent)]

    def close_reasons(self) -> dict[int, str]:
        return {
            e.connection_id: e.reason
            for e in self.events
            if isinstance(e, ev.ConnectionClosedEvent)
        }

    def created(self) -> int:
        return sum(isinstance(e, ev.ConnectionCreatedEvent) for e in self.events)

    def now(self) -> float:
        raise NotImplementedError

    async def lease(self, timeout: float | None = None) -> poolkit.Lease[Conn]:
        raise NotImplementedError

    def start(self, timeout: float | None = None) -> Pending:
        raise NotImplementedError

    async def settle(self) -> None:
        raise NotImplementedError

    async def advance(self, seconds: float) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class AsyncFront(Front):
    name = "asyncio"

    def __init__(
        self, options: poolkit.PoolOptions, streams: int | list[int] = 1, quiet: bool = False
    ) -> None:
        super().__init__(options, streams, quiet)

        async def connect(ctx: poolkit.ConnectContext) -> Any:
            if self.connect_delay:
                await asyncio.sleep(self.connect_delay)
            return self._made(ctx)

        async def probe(conn: Conn) -> None:
            error = self._probe_started(conn)
            if self.probe_delay:
                await asyncio.sleep(self.probe_delay)
            if error is not None:
                raise error

        def make(name: str) -> Callable[[Any], Any]:
            async def hook(conn: Conn) -> None:
                error = self._hook_started(name, conn)
                if self.hook_delay[name]:
                    await asyncio.sleep(self.hook_delay[name])
                if error is not None:
                    raise error

            return hook

        options = self.with_hooks(self.with_keep_alive(options, probe), make)
        self.options = options
        self.pool = poolkit.AsyncPool(
            connect, address="db:1", options=options, listeners=self._listeners()
        )
        self._tasks: list[asyncio.Task[None]] = []

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def lease(self, timeout: float | None = None) -> poolkit.Lease[Conn]:
        return await self.pool.checkout(timeout)  # type: ignore[no-any-return]

    def start(self, timeout: float | None = None) -> Pending:
        pending = Pending()

        async def go() -> None:
            try:
                lease = await self.pool.checkout(timeout)
            except Exception as exc:
                pending._finish(None, exc)
            else:
                pending._finish(lease, None)

        self._tasks.append(asyncio.create_task(go()))
        return pending

    async def settle(self) -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        await self.settle()
        await asyncio.sleep(seconds)
        await self.settle()

    async def close(self) -> None:
        await self.pool.close()
        await asyncio.gather(*self._tasks)


class TrioFront(Front):
    """``AsyncPool`` under trio, on trio's ``MockClock`` (virtual time, jumping to the next
    deadline when every task is blocked: see ``run_trio``). The pool's nursery is opened by
    ``drive`` (``pool.running()``), the background checkouts run in the scenario's nursery."""

    name = "trio"

    def __init__(
        self, options: poolkit.PoolOptions, streams: int | list[int] = 1, quiet: bool = False
    ) -> None:
        super().__init__(options, streams, quiet)

        async def connect(ctx: poolkit.ConnectContext) -> Any:
            if self.connect_delay:
                await trio.sleep(self.connect_delay)
            return self._made(ctx)

        async def probe(conn: Conn) -> None:
            error = self._probe_started(conn)
            if self.probe_delay:
                await trio.sleep(self.probe_delay)
            if error is not None:
                raise error

        def make(name: str) -> Callable[[Any], Any]:
            async def hook(conn: Conn) -> None:
                error = self._hook_started(name, conn)
                if self.hook_delay[name]:
                    await trio.sleep(self.hook_delay[name])
                if error is not None:
                    raise error

            return hook

        options = self.with_hooks(self.with_keep_alive(options, probe), make)
        self.options = options
        self.pool = poolkit.AsyncPool(
            connect, address="db:1", options=options, listeners=self._listeners()
        )
        self.nursery: trio.Nursery | None = None
        self._last_started: trio.Event | None = None

    def now(self) -> float:
        return trio.current_time()

    async def lease(self, timeout: float | None = None) -> poolkit.Lease[Conn]:
        return await self.pool.checkout(timeout)  # type: ignore[no-any-return]

    def start(self, timeout: float | None = None) -> Pending:
        """A checkout in a task of its own; the checkouts started one after another queue in
        that order (trio may run the tasks made ready together in any order: each waits for the
        one started before it to have called ``checkout``, which queues before it suspends)."""
        pending = Pending()
        before, mine = self._last_started, trio.Event()
        self._last_started = mine

        async def go() -> None:
            if before is not None:
                await before.wait()
            mine.set()
            try:
                lease = await self.pool.checkout(timeout)
            except Exception as exc:
                pending._finish(None, exc)
            else:
                pending._finish(lease, None)

        assert self.nursery is not None
        self.nursery.start_soon(go)
        return pending

    async def settle(self) -> None:
        for _ in range(50):
            await trio.lowlevel.checkpoint()

    async def advance(self, seconds: float) -> None:
        await self.settle()
        await trio.sleep(seconds)
        await self.settle()

    async def close(self) -> None:
        await self.pool.close()


def run_trio(main: Callable[[], Awaitable[T]]) -> T:
    """``trio.run(main)`` on a ``MockClock`` that jumps to the next deadline as soon as every task
    is blocked (virtual time, as ``poolkit.testing.run`` gives asyncio), its scheduler's choices
    seeded (trio shuffles the tasks made ready together: the same order every run)."""
    getattr(trio._core._run, "_r").seed(0)  # noqa: B009 - trio's own test hook (pytest-trio's)

    async def guarded() -> T:
        # (every task blocked with no deadline is a deadlock, not a wait: the clock jumps to
        # this one and the run fails at once, rather than hanging)
        with trio.fail_after(24 * 3600.0):
            return await main()

    return trio.run(guarded, clock=trio.testing.MockClock(autojump_threshold=0))


class ThreadFront(Front):
    name = "threads"

    def __init__(
        self, options: poolkit.PoolOptions, streams: int | list[int] = 1, quiet: bool = False
    ) -> None:
        super().__init__(options, streams, quiet)
        self.clock = clock = FakeClock()

        def connect(ctx: poolkit.ConnectContext) -> Any:
            if self.connect_delay:
                clock.sleep(self.connect_delay)
            return self._made(ctx)

        def probe(conn: Conn) -> None:
            error = self._probe_started(conn)
            if self.probe_delay:
                clock.sleep(self.probe_delay)
            if error is not None:
                raise error

        def make(name: str) -> Callable[[Any], Any]:
            def hook(conn: Conn) -> None:
                error = self._hook_started(name, conn)
                if self.hook_delay[name]:
                    clock.sleep(self.hook_delay[name])
                if error is not None:
                    raise error

            return hook

        options = self.with_hooks(self.with_keep_alive(options, probe), make)
        self.options = options
        self.pool = poolkit.Pool(
            connect,
            address="db:1",
            options=options,
            listeners=self._listeners(),
            clock=clock,
        )

    def now(self) -> float:
        return self.clock.monotonic()

    async def lease(self, timeout: float | None = None) -> poolkit.Lease[Conn]:
        return self.pool.checkout(timeout)  # type: ignore[no-any-return]

    def start(self, timeout: float | None = None) -> Pending:
        pending = Pending()

        def go() -> None:
            try:
                lease = self.pool.checkout(timeout)
            except Exception as exc:
                pending._finish(None, exc)
            else:
                pending._finish(lease, None)

        self.clock.start_thread(go)
        return pending

    async def settle(self) -> None:
        self.clock.settle()

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.clock.settle()

    async def close(self) -> None:
        self.pool.close()
        self.clock.settle()
        assert self.clock.errors == []


def drive(
    kind: str,
    scenario: Scenario,
    streams: int | list[int] = 1,
    *,
    ready: bool = True,
    quiet: bool = False,
    **options: Any,
) -> Front:
    """Run ``scenario`` on a fresh pool of front end ``kind``, made ready unless ``ready`` is
    false; close it afterwards."""
    opts = poolkit.PoolOptions(**options)
    box: list[Front] = []

    async def main() -> None:
        front: Front = (
            AsyncFront(opts, streams, quiet)
            if kind == "asyncio"
            else ThreadFront(opts, streams, quiet)
        )
        box.append(front)
        if ready:
            front.pool.ready()
        await front.settle()
        try:
            await scenario(front)
        finally:
            await front.close()

    async def on_trio() -> None:
        front = TrioFront(opts, streams, quiet)
        box.append(front)
        async with trio.open_nursery() as nursery, front.pool.running(ready=ready):
            front.nursery = nursery
            await front.settle()
            try:
                await scenario(front)
            finally:
                await front.close()

    if kind == "asyncio":
        run(main())
    elif kind == "trio":
        run_trio(on_trio)
    else:
        asyncio.run(main())
    return box[0]
