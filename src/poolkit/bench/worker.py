"""A worker process of ``poolkit bench``: one pool, ``concurrency`` tasks (or threads) repeating
the target's operation, and reports to the parent over a pipe.

The conversation, parent to worker: the :class:`~.config.RunConfig` at spawn, then ``"go"``
(start the clock: warm-up, then the measured phase) and possibly ``"stop"`` (Ctrl-C in the
parent, or another worker failed). Worker to parent: ``("ready", None)`` once its pool is open,
``("report", WorkerReport)`` every :data:`TICK` seconds and a final one, or ``("error", text)``.

Rules of this module
--------------------
* A worker ignores SIGINT: the parent decides when it stops, so that it always closes its pool
  and sends its final report (Ctrl-C then closes every connection).
* An operation is counted when it ends inside the measured phase; the wait (checkout) and the
  operation are timed separately.
* The pool is used as an application uses it: ``pool.connection()`` (with ``--no-hooks``, where
  no ``is_broken`` hook judges an error, ``checkout()`` and ``discard()`` after a failed
  operation, as an application without one must: a broken connection is never reused), nothing
  private.
* A task that fails operations in a row pauses before the next (:func:`backoff_delay`): a dead
  target is not hammered, and an error of one operation costs no pause.
* An operation the target refused before it was sent (``Workload.retryable``: a ``GOAWAY`` seen
  between the checkout and the request) is retried on another checkout, not counted as an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from multiprocessing.connection import Connection
from typing import Any

from ..asyncio import AsyncPool
from ..options import Adaptive, PoolOptions
from ..threaded import Pool
from .config import RunConfig
from .measure import Gauges, Tally, WorkerReport
from .targets import Workload, workload

__all__ = ["TICK", "backoff_delay", "pool_options", "worker_main"]

TICK = 0.2
#: the longest pause of a task after failures in a row (a target back up is used again within it)
MAX_BACKOFF = 0.25
#: attempts of one operation the target refused before it was sent (``Workload.retryable``)
ATTEMPTS = 3


def backoff_delay(failures: int) -> float:
    """Seconds a task pauses after ``failures`` failed operations in a row: none after the first
    (one operation's error), then 1 ms, doubling up to :data:`MAX_BACKOFF`."""
    if failures < 2:
        return 0.0
    return min(0.001 * (1 << min(failures - 2, 16)), MAX_BACKOFF)


def pool_options(config: RunConfig, target: Workload) -> PoolOptions:
    """The run's pool options, with the target's hooks (for the run's mode) unless off."""
    hooks = (
        target.sync_hooks()
        if config.threads
        else target.trio_hooks()
        if config.trio
        else target.async_hooks()
    )
    return PoolOptions(
        max_size=config.max_size,
        min_size=config.min_size,
        max_connecting=config.max_connecting,
        wait_queue_timeout=config.wait_queue_timeout,
        connect_timeout=config.connect_timeout,
        hooks=hooks if config.hooks else None,
        load_balanced=target.load_balanced,
        expected_streams=target.expected_streams,
        adaptive=Adaptive() if config.adaptive else None,
    )


class _Clock:
    """The phases of a run: warm-up, measured, over (by time, by operations, or "stop")."""

    def __init__(self, config: RunConfig, share: int | None) -> None:
        self.config = config
        self.share = share  # operations this worker does (--ops), None: by time
        self.started = time.perf_counter()
        self.measure_from = self.started + config.warmup
        self.until = (
            self.measure_from + config.duration
            if config.duration is not None and share is None
            else float("inf")
        )
        self.started_ops = 0
        self.stopped_at: float | None = None
        self.tally = Tally()
        self.warmup_tally = Tally()

    def current(self, now: float, started_measured: bool) -> Tally | None:
        """The tally an operation ending ``now`` counts in (None: over). By time, an operation
        counts where it ends; by count (``--ops``), where it started (so exactly ``share``
        are measured)."""
        if self.share is not None:
            return self.tally if started_measured else self.warmup_tally
        if self.stopped_at is not None or now >= self.until:
            return None
        return self.tally if now >= self.measure_from else self.warmup_tally

    def ended(self, measured: bool, t0: float, t1: float, t2: float) -> None:
        """An operation asked for a connection at ``t0``, had it at ``t1``, was done at ``t2``."""
        tally = self.current(t2, measured)
        if tally is not None:
            tally.ops += 1
            tally.wait.record(t1 - t0)
            tally.latency.record(t2 - t1)
            tally.total.record(t2 - t0)

    def failed(self, measured: bool, error: BaseException) -> None:
        tally = self.current(time.perf_counter(), measured)
        if tally is not None:
            tally.error(error)

    def start(self) -> bool | None:
        """May an operation start? None: no, the run is over; else whether it is measured."""
        now = time.perf_counter()
        if self.stopped_at is not None or now >= self.until:
            return None
        measured = now >= self.measure_from
        if self.share is not None and measured:
            if self.started_ops >= self.share:
                return None
            self.started_ops += 1
        return measured

    def done(self) -> bool:
        now = time.perf_counter()
        if self.stopped_at is None and (
            now >= self.until
            or (
                self.share is not None
                and self.tally.ops + sum(self.tally.errors.values()) >= self.share
            )
        ):
            self.stopped_at = min(now, self.until)
        return self.stopped_at is not None

    def stop(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = time.perf_counter()

    def measured(self) -> float:
        end = self.stopped_at if self.stopped_at is not None else time.perf_counter()
        return max(0.0, min(end, self.until) - self.measure_from)


def _gauges(stats: Any, before: Gauges) -> Gauges:
    return Gauges(
        total=stats.total,
        in_use=stats.in_use,
        pending=stats.pending,
        waiting=stats.waiting,
        peak_total=max(before.peak_total, stats.total),
        created=stats.connections_created,
        limit=0 if stats.adaptive is None else stats.adaptive.limit,
    )


def _share(config: RunConfig, index: int) -> int | None:
    if config.ops is None:
        return None
    base, extra = divmod(config.ops, config.processes)
    return base + (1 if index < extra else 0)


def worker_main(config: RunConfig, index: int, channel: Connection) -> None:
    """The worker process's entry point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if config.threads:
            _run_threads(config, index, channel)
        elif config.trio:
            import trio

            trio.run(_run_trio, config, index, channel)
        else:
            asyncio.run(_run_async(config, index, channel))
    except Exception as exc:  # one line for the parent: it ends the run and prints it
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        try:
            channel.send(("error", f"{type(exc).__name__}: {text}" if text else type(exc).__name__))
        except OSError:
            pass
    finally:
        channel.close()


def _repeat_async(
    config: RunConfig,
    clock: _Clock,
    target: Workload,
    use: Callable[[], Any],
    sleep: Callable[[float], Awaitable[Any]],
) -> Callable[[], Coroutine[Any, Any, None]]:
    """One task's operations on an ``AsyncPool``, asyncio's or trio's (``sleep``: the running
    library's): until ``clock`` says stop, each operation through ``use()`` (a connection's
    block), retried up to ``ATTEMPTS`` times on the target's retryable errors; a failure backed
    off, ``config.think`` seconds between operations."""
    op = target.async_op
    retryable = target.retryable
    think = config.think

    async def attempt() -> float:
        """One operation; when it had its connection."""
        for tries_left in range(ATTEMPTS - 1, -1, -1):
            async with use() as conn:
                t1 = time.perf_counter()
                try:
                    await op(conn)
                except retryable:
                    if not tries_left:
                        raise
                    continue
                return t1
        raise AssertionError("not reached")

    async def repeat() -> None:
        perf = time.perf_counter
        failures = 0
        while (measured := clock.start()) is not None:
            t0 = perf()
            try:
                t1 = await attempt()
            except Exception as exc:
                clock.failed(measured, exc)
                failures += 1
                if pause := backoff_delay(failures):
                    await sleep(pause)
            else:
                clock.ended(measured, t0, t1, perf())
                failures = 0
            if think:
                await sleep(think)

    return repeat


async def _run_async(config: RunConfig, index: int, channel: Connection) -> None:
    target = workload(config)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[str] = asyncio.Queue()
    loop.add_reader(channel.fileno(), lambda: inbox.put_nowait(channel.recv()))
    options = pool_options(config, target)
    pool: AsyncPool[Any] = AsyncPool(
        target.async_connect(), address=target.address, options=options
    )
    gauges = Gauges()
    clock: _Clock | None = None
    try:
        pool.ready()
        channel.send(("ready", None))
        if await inbox.get() != "go":
            return
        clock = _Clock(config, _share(config, index))
        use = pool.connection if config.hooks else _discarding_async(pool)
        repeat = _repeat_async(config, clock, target, use, asyncio.sleep)
        tasks = [asyncio.create_task(repeat()) for _ in range(config.concurrency)]
        while not clock.done():
            try:
                message = await asyncio.wait_for(inbox.get(), TICK)
            except TimeoutError:
                message = ""
            if message == "stop":
                clock.stop()
            if all(task.done() for task in tasks):
                clock.stop()
            gauges = _gauges(pool.stats(), gauges)
            channel.send(("report", _report(index, clock, gauges)))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        loop.remove_reader(channel.fileno())
        await pool.close()
        if clock is not None:
            gauges = _gauges(pool.stats(), gauges)
            left = pool.stats().total
            channel.send(("report", _report(index, clock, gauges, final=True, left=left)))


async def _run_trio(config: RunConfig, index: int, channel: Connection) -> None:
    """:func:`_run_async` under trio: the pool's block (its nursery) around the run, the tasks in
    a nursery of the run's, the parent's messages read when the pipe is readable."""
    import trio

    target = workload(config)
    options = pool_options(config, target)
    pool: AsyncPool[Any] = AsyncPool(
        target.trio_connect(), address=target.address, options=options
    )
    gauges = Gauges()
    clock: _Clock | None = None

    async def receive(limit: float) -> str:
        with trio.move_on_after(limit):
            await trio.lowlevel.wait_readable(channel.fileno())
            return str(channel.recv())
        return ""

    try:
        async with pool:
            channel.send(("ready", None))
            if await receive(float("inf")) != "go":
                return
            clock = _Clock(config, _share(config, index))
            use = pool.connection if config.hooks else _discarding_async(pool)
            operations = _repeat_async(config, clock, target, use, trio.sleep)

            async def repeat(left: list[int]) -> None:
                try:
                    await operations()
                finally:
                    left[0] -= 1

            left = [config.concurrency]
            async with trio.open_nursery() as tasks:
                for _ in range(config.concurrency):
                    tasks.start_soon(repeat, left)
                while not clock.done():
                    if await receive(TICK) == "stop":
                        clock.stop()
                    if not left[0]:
                        clock.stop()
                    gauges = _gauges(pool.stats(), gauges)
                    channel.send(("report", _report(index, clock, gauges)))
                tasks.cancel_scope.cancel()
    finally:
        if clock is not None:
            gauges = _gauges(pool.stats(), gauges)
            left_open = pool.stats().total
            channel.send(("report", _report(index, clock, gauges, final=True, left=left_open)))


def _report(
    index: int, clock: _Clock, gauges: Gauges, final: bool = False, left: int = 0
) -> WorkerReport:
    warming = time.perf_counter() < clock.measure_from and clock.stopped_at is None
    return WorkerReport(index, clock.measured(), warming, clock.tally.copy(), gauges, final, left)


def _run_threads(config: RunConfig, index: int, channel: Connection) -> None:
    target = workload(config)
    options = pool_options(config, target)
    pool: Pool[Any] = Pool(target.sync_connect(), address=target.address, options=options)
    gauges = Gauges()
    clock: _Clock | None = None
    try:
        pool.ready()
        channel.send(("ready", None))
        if channel.recv() != "go":
            return
        clock = _Clock(config, _share(config, index))
        lock = threading.Lock()  # guards the clock's tallies (threads record, the loop copies)
        op = target.sync_op
        run_clock = clock
        retryable = target.retryable
        use = pool.connection if config.hooks else _discarding(pool)

        def attempt() -> float:
            """One operation; when it had its connection."""
            for tries_left in range(ATTEMPTS - 1, -1, -1):
                with use() as conn:
                    t1 = time.perf_counter()
                    try:
                        op(conn)
                    except retryable:
                        if not tries_left:
                            raise
                        continue
                    return t1
            raise AssertionError("not reached")

        def repeat() -> None:
            perf = time.perf_counter
            think = config.think
            failures = 0
            while True:
                with lock:
                    measured = run_clock.start()
                if measured is None:
                    return
                t0 = perf()
                try:
                    t1 = attempt()
                except Exception as exc:
                    with lock:
                        run_clock.failed(measured, exc)
                    failures += 1
                    if pause := backoff_delay(failures):
                        time.sleep(pause)
                else:
                    t2 = perf()
                    with lock:
                        run_clock.ended(measured, t0, t1, t2)
                    failures = 0
                if think:
                    time.sleep(think)

        threads = [
            threading.Thread(target=repeat, name=f"bench-{i}", daemon=True)
            for i in range(config.concurrency)
        ]
        for thread in threads:
            thread.start()
        while True:
            with lock:
                if clock.done():
                    break
            if channel.poll(TICK) and channel.recv() == "stop":
                with lock:
                    clock.stop()
            if not any(thread.is_alive() for thread in threads):
                with lock:
                    clock.stop()
            gauges = _gauges(pool.stats(), gauges)
            with lock:
                report = _report(index, clock, gauges)
            channel.send(("report", report))
        pool.close()  # (waiting checkouts fail at once; operations in flight end on their own)
        for thread in threads:
            thread.join(config.op_timeout + 1.0)
    finally:
        pool.close()
        if clock is not None:
            gauges = _gauges(pool.stats(), gauges)
            left = pool.stats().total
            channel.send(("report", _report(index, clock, gauges, final=True, left=left)))


def _discarding_async(pool: AsyncPool[Any]) -> Any:
    """``pool.connection()`` for a pool without hooks: a connection whose operation raised is
    discarded, not given back (nothing else can tell whether it still works)."""

    @contextlib.asynccontextmanager
    async def use() -> AsyncIterator[Any]:
        lease = await pool.checkout()
        try:
            yield lease.connection
        except BaseException as exc:
            lease.discard(exc)
            raise
        lease.release()

    return use


def _discarding(pool: Pool[Any]) -> Any:
    """:func:`_discarding_async` for the threaded pool."""

    @contextlib.contextmanager
    def use() -> Iterator[Any]:
        lease = pool.checkout()
        try:
            yield lease.connection
        except BaseException as exc:
            lease.discard(exc)
            raise
        lease.release()

    return use
