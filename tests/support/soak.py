"""Soak: one long-lived pool per front end under a bounded mixed workload with random faults.

    python tests/support/soak.py [--minutes 10] [--front both|threads|asyncio] [--seed N]

``--minutes`` takes fractions (``0.5``: 30 s). Unlike ``tests/support/stress.py`` (a fresh pool per
seed, ``close()`` racing the workers), a soak keeps ONE pool per front end open for the whole
run and looks at what piles up over time. With ``--front both`` (the default) the two run at
once in one process: a ``Pool`` driven by worker threads, and an ``AsyncPool`` driven by tasks
on an asyncio loop in a thread of its own. Each front end so gets the whole duration, and the
event loop shares the interpreter with busy threads, so its timers and probes fire late as they
do in a real application that has both; a memory failure is then narrowed down with
``--front threads`` / ``--front asyncio`` and the growth-by-line listing printed with it.

The workload, drawn from the seed for each worker: mostly checkouts with short holds (half
through ``connection()``, half through ``checkout()``), released; and a steady rate of faults:
connects that are slow, fail, or hang until the pool's ``connect_timeout`` abandons them;
discards; exceptions inside ``connection()``; checkouts that may not wait (timeout 0) or wait
behind a long hold and time out; too many waiters (``max_waiting``); cancelled checkouts and
holds (asyncio); ``clear()`` every 0.5-2 s, half of them with ``interrupt_in_use``; leases
dropped without being given back, which the pool must reclaim when they are garbage-collected
and report (a warning on ``poolkit.pool``); keep-alive probes that succeed, fail or time out;
``max_idle_time``, ``max_lifetime``, ``min_size`` and overflow connections so that the pool's
timers churn; and short windows (a fifth of each sampling period) with the CMAP log at DEBUG,
so that the observed paths (events built) run as well as the fast ones.

Rules checked (a broken one fails the run):

* every connection object made is closed exactly once by the end, is never handed out (or
  probed) while closed, outside an ``interrupt_in_use`` clear that raced it, and never has two
  holders at once (a keep-alive probe counts as a holder);
* the connect function never runs twice for one connection id; ``stats()`` stay consistent
  while the pool runs and agree with the tracked objects at the end (connects started,
  connections established, records closed);
* the pool counts no more connects against ``max_size`` / ``max_connecting`` (pending, or
  abandoned while their function still runs) than connect functions are running, in two
  samples in a row, nor any abandoned one once the workers stopped and every connect returned
  (else its limits shrink for good);
* every lease dropped without release is reclaimed and reported by the pool; no connection,
  pool thread or task is left after ``close()``; the pool logs no error (a close, its timer or
  a listener that raised); its warnings are counted in the report;
* no checkout returns later than its timeout plus ``SLACK`` seconds;
* memory: the Python heap (``tracemalloc``, after ``gc.collect()``) is sampled with the
  cumulative operation count; over the second half of the run (the first half is warm-up:
  connections, caches, free lists and the tallies' reasons reach their steady state) the least
  squares slope of heap against operations must stay below ``HEAP_BOUND`` bytes per operation.
  See ``memory_verdict`` for the bound and why.

Threads change hands every 0.1 ms during a run (``sys.setswitchinterval``; CPython's default is
5 ms): more interleavings per minute. ``--seed`` fixes what each worker, probe and connect draws;
the threads' timing still differs from run to run. ``--self-check-leak BYTES`` keeps BYTES per
operation on purpose: the memory verdict must then fail (``tests/pools/test_soak.py`` checks it).

Exit status 0 when every rule held, 1 otherwise. ``tests/pools/test_soak.py`` runs a few seconds
of it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import logging
import math
import os
import random
import sys
import threading
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, cast

import poolkit

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import stress  # noqa: E402  (tests/support/stress.py, beside this file)
from stress import Book, Config, ConnectRefused, Tracked, UserError  # noqa: E402

# ---------------------------------------------------------------------------------- settings

#: worker threads driving the threaded pool, tasks driving the asyncio pool
THREAD_WORKERS = 6
TASK_WORKERS = 8

#: the pools' options (both front ends): a small pool, so that connections are shared and waited
#: for; kept (min_size), demand and overflow connections; every timer short enough to churn
MAX_SIZE = 6
MIN_SIZE = 2
SOFT_MAX_SIZE = 4
MAX_CONNECTING = 2
MAX_IDLE_TIME = 0.5
MAX_LIFETIME = 2.0
BACKGROUND_INTERVAL = 0.1
CONNECT_TIMEOUT = 0.3
MAX_WAITING = 5
KEEP_ALIVE_INTERVAL = 0.15
KEEP_ALIVE_TIMEOUT = 0.1

#: connects (``stress.connect_blocking`` / ``connect_async``): refused, or hanging for longer
#: than ``CONNECT_TIMEOUT`` (the pool abandons them), else 0-20 ms
CONNECT_FAIL = 0.05
CONNECT_HANG = 0.01
HANG = (0.5, 1.0)

#: per operation
ZERO_TIMEOUT = 0.02  #: a checkout that may not wait (timeout 0)
TIMEOUTS = (0.05, 0.25)  #: else its timeout, uniform
HOLD = 0.4  #: a hold of up to SHORT_HOLD seconds (else none: the connection comes straight back)
SHORT_HOLD = 0.001
LONG_HOLD = 0.001  #: a hold of 30-120 ms (others wait behind it, some time out)
LONG_HOLDS = (0.03, 0.12)
RAISE = 0.02  #: connection(): an exception inside the block (the connection is released)
DISCARD = 0.005  #: checkout(): the lease is discarded
DROP = 0.0005  #: checkout(): the lease is dropped without release (the pool must reclaim it)
CANCEL = 0.02  #: asyncio: the operation is cancelled at a random moment
PAUSE = 0.0005  #: the worker pauses 0.1-0.4 s after the operation (connections go idle)
PAUSES = (0.1, 0.4)

#: every LULL_EVERY seconds the workers of a front end all rest for LULL seconds: the
#: connections sit idle, kept ones are probed, demand ones close for idleness
LULL_EVERY = 3.0
LULL = 0.6

#: keep-alive probes: fail, or outlast ``KEEP_ALIVE_TIMEOUT``
PROBE_FAIL = 0.02
PROBE_SLOW = 0.01

#: seconds between clear() calls, uniform; half of them interrupt the connections in use
CLEAR_EVERY = (0.5, 2.0)

#: how late a checkout may return past its timeout (the machine is small and shared, and the
#: sampler stops every thread for a full ``gc.collect()`` and, twice, a tracemalloc snapshot)
SLACK = 3.0

#: the fraction of each sampling period the CMAP log is at DEBUG (the pools' observed paths)
OBSERVED = 0.2

#: heap growth allowed over the fit window, in bytes per operation, and the growth in bytes
#: below which a slope is noise (see ``memory_verdict``)
HEAP_BOUND = 0.25
HEAP_FLOOR = 64 * 1024


class ProbeFailed(OSError):
    """A keep-alive probe's injected failure."""


#: the holder a keep-alive probe records on the connection it probes
PROBE = "keep-alive probe"

#: retained by ``--self-check-leak``: a leak on purpose, for the memory verdict to catch
_self_check_leak: list[bytes] = []


# ---------------------------------------------------------------------------------- book


class SoakTracked(Tracked):
    """A ``stress.Tracked`` connection that tells its book when it is closed (so that the book
    keeps only the connections still open: its memory does not grow with the run)."""

    def __init__(self, book: SoakBook, ctx: poolkit.ConnectContext) -> None:
        super().__init__(book, ctx.connection_id)
        self.soak_book = book
        self.ctx = ctx
        #: handed to a checkout or a probe at least once
        self.used = False

    def close(self) -> None:
        super().close()
        self.soak_book.retired(self)


class AsyncSoakTracked(SoakTracked):
    """For ``AsyncPool``: closed by an ``aclose()`` coroutine (the pool runs it in a task)."""

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        self.close()


class SoakBook(Book):
    """``stress.Book`` for one long-lived pool: bounded memory, and the counts the report needs.

    ``Book`` keeps every connection made (``made``) and every connection id connected
    (``connect_calls``); a soak keeps the open connections only (``live``), counts the others,
    and remembers the recent connection ids only (ids are handed out in increasing order)."""

    def __init__(self, config: Config, front: str) -> None:
        super().__init__(config)
        self.front = front
        self.live: dict[int, SoakTracked] = {}
        self.recent_ids: set[int] = set()
        self.connects = 0
        self.running = 0  #: connect functions running now
        self.excess = 0  #: connects counted beyond those, at the last sample
        self.shrunk = False
        self.t0 = time.monotonic()
        self.made_count = 0
        self.closed_count = 0
        #: connections that came back from a connect the pool had given up on (it closes them
        #: and does not count them as established); told by their ``ctx.cancelled``
        self.late = 0
        #: closed, never used, ``ctx.cancelled`` still false: in the threaded pool the flag may
        #: be set a moment after the late connection is closed; settled a second later
        self.suspects: deque[tuple[float, SoakTracked]] = deque()
        self.dropped = 0
        self.probes = 0
        self.probe_faults: Counter[str] = Counter()
        self.clears: Counter[bool] = Counter()
        self.latest = 0.0  #: the most a checkout returned past its timeout, in seconds
        self.closing = False

    def connect_called(self, ctx: poolkit.ConnectContext) -> None:
        cid = ctx.connection_id
        with self.lock:
            self.connects += 1
            self.running += 1
            if cid in self.recent_ids:
                self.broken(f"connect called twice for connection id {cid}")
            self.recent_ids.add(cid)
            if len(self.recent_ids) > 256:
                self.recent_ids = {i for i in self.recent_ids if i > cid - 128}

    def connect_ended(self) -> None:
        with self.lock:
            self.running -= 1

    def check_abandoned(
        self, stats: poolkit.PoolStats, again: Callable[[], poolkit.PoolStats]
    ) -> None:
        """The pool counts a connect against ``max_size`` and ``max_connecting`` while it is
        pending, and once abandoned until its function returns: it may not count more than the
        connect functions running, save for a moment (a connect whose thread or task has not
        started yet, or whose function just returned; ``again`` looks once more, up to ten
        times in 0.2 s). More in two samples in a row: the pool's limits shrink for good."""
        for _ in range(10):
            abandoned = getattr(stats, "abandoned", 0)
            with self.lock:
                running = self.running
            excess = stats.pending + abandoned - running
            if excess <= 0:
                break
            time.sleep(0.02)
            stats = again()
        if excess > 0 and self.excess > 0 and not self.shrunk:
            self.shrunk = True
            self.broken(
                f"at {time.monotonic() - self.t0:.1f} s (and the sample before) the pool counts "
                f"{stats.pending} pending and {abandoned} abandoned connects against max_size "
                f"and max_connecting, but only {running} connect functions are running: its "
                "limits shrink for good"
            )
        self.excess = excess

    def new(self, ctx: poolkit.ConnectContext) -> Tracked:
        cls = AsyncSoakTracked if self.front == "asyncio" else SoakTracked
        conn = cls(self, ctx)
        with self.lock:
            self.made_count += 1
            self.live[conn.cid] = conn
        return conn

    def retired(self, conn: SoakTracked) -> None:
        """``conn`` was closed (its first close counts; ``Tracked`` reports any other)."""
        with self.lock:
            if conn.closes != 1:
                return
            self.closed_count += 1
            self.live.pop(conn.cid, None)
            if conn.ctx.cancelled:
                self.late += 1
            elif not conn.used:
                self.suspects.append((time.monotonic(), conn))

    def settle(self, force: bool = False) -> None:
        """Count the suspects closed more than a second ago (all of them if ``force``)."""
        limit = time.monotonic() - 1.0
        with self.lock:
            suspects = self.suspects
            while suspects and (force or suspects[0][0] < limit):
                _, conn = suspects.popleft()
                self.late += conn.ctx.cancelled

    def took(self, conn: Tracked, who: object, interrupts: int) -> None:
        super().took(conn, who, interrupts)
        assert isinstance(conn, SoakTracked)
        conn.used = True

    def probe_started(self, conn: Tracked, strict: bool) -> None:
        """A keep-alive probe of ``conn`` began. ``strict``: it may not find ``conn`` closed
        (asyncio: a probe whose connection is closed is cancelled before it runs; a thread may
        start after the probe's timeout closed its connection)."""
        assert isinstance(conn, SoakTracked)
        with self.lock:
            self.probes += 1
            conn.used = True
            if strict and conn.closes and not self.closing:
                self.broken(f"connection {conn.cid} probed after it was closed")
            if conn.holder is not None:
                self.broken(f"connection {conn.cid} probed while held by {conn.holder!r}")
            conn.holder = PROBE

    def probe_ended(self, conn: Tracked) -> None:
        with self.lock:
            if conn.holder is PROBE:
                conn.holder = None

    def late_by(self, started: float, now: float, timeout: float) -> None:
        late = now - started - timeout
        if late > self.latest:
            self.latest = late
        if late > SLACK:
            self.broken(f"a checkout with timeout {timeout:.3f} s returned {late:.3f} s late")

    def operations(self) -> int:
        with self.lock:
            return sum(self.outcomes.values())

    def check_end(self, stats: poolkit.PoolStats) -> None:
        """After the pool closed and every worker, connect and probe ended."""
        if stats.total or stats.in_use or stats.available or stats.pending or stats.waiting:
            self.broken(f"closed pool still counts connections: {stats}")
        self.settle(force=True)
        for conn in self.live.values():
            self.broken(f"connection {conn.cid} never closed ({conn!r})")
        if self.closed_count != self.made_count:
            self.broken(f"{self.made_count} connections made, {self.closed_count} closed")
        attempts = stats.connect_attempts
        if attempts < self.connects or (self.front == "threads" and attempts != self.connects):
            # (an AsyncPool may abandon a connect before its task ran: then it never ran)
            self.broken(f"stats count {attempts} connect attempts, the connect ran {self.connects}")
        if stats.connections_created != self.made_count - self.late:
            self.broken(
                f"stats count {stats.connections_created} connections created; the connect made "
                f"{self.made_count}, {self.late} of them after the pool gave up on it"
            )
        closed = sum(stats.connections_closed.values())
        if closed != attempts:
            self.broken(f"stats count {closed} records closed for {attempts} connect attempts")


# ---------------------------------------------------------------------------------- workload


@dataclasses.dataclass(slots=True)
class Plan:
    """One operation, drawn before it starts."""

    timeout: float
    managed: bool  #: through ``connection()`` (else ``checkout()`` and a lease)
    hold: float
    end: str  #: "release", "raise" (managed), "discard" or "drop" (lease)
    cancel_at: float | None  #: asyncio: cancel it this many seconds after it starts
    pause: float  #: seconds the worker pauses afterwards


def draw(rand: random.Random, *, cancel: bool) -> Plan:
    timeout = 0.0 if rand.random() < ZERO_TIMEOUT else rand.uniform(*TIMEOUTS)
    managed = rand.random() < 0.5
    x = rand.random()
    if x < LONG_HOLD:
        hold = rand.uniform(*LONG_HOLDS)
    else:
        hold = rand.uniform(0.0, SHORT_HOLD) if x < LONG_HOLD + HOLD else 0.0
    x = rand.random()
    if managed:
        end = "raise" if x < RAISE else "release"
    else:
        end = "discard" if x < DISCARD else "drop" if x < DISCARD + DROP else "release"
    cancel_at = rand.uniform(0.0, timeout + hold) if cancel and rand.random() < CANCEL else None
    pause = rand.uniform(*PAUSES) if rand.random() < PAUSE else 0.0
    return Plan(timeout, managed, hold, end, cancel_at, pause)


#: the outcomes of an operation whose checkout succeeded (the others are named after the error)
OK_OUTCOMES = ("released", "raised in connection()", "discarded", "lease dropped")


def _leak_on_purpose(size: int) -> None:
    if size:
        _self_check_leak.append(bytes(size))


class Front:
    """What a front end's run shares between its workers, the sampler and the report."""

    #: each front end's own (``soak`` calls them): start the pool and its workers; stop them
    start: Callable[[], None]
    finish: Callable[[], None]

    def __init__(self, name: str, seed: int, seconds: float, leak: int) -> None:
        self.name = name
        self.address = f"soak-{name}"
        workers = THREAD_WORKERS if name == "threads" else TASK_WORKERS
        self.config = Config(
            seed=seed,
            seconds=seconds,
            workers=workers,
            max_size=MAX_SIZE,
            max_connecting=MAX_CONNECTING,
            timeouts=TIMEOUTS,
            max_idle_time=MAX_IDLE_TIME,
            fail_rate=CONNECT_FAIL,
            hang_rate=CONNECT_HANG,
            hang=HANG,
            discard_rate=DISCARD,
            raise_rate=RAISE,
            cancel_rate=CANCEL,
            clear_every=CLEAR_EVERY,
            listen=False,
        )
        self.book = SoakBook(self.config, name)
        r = random.Random(seed)
        self.seeds = [r.random() for _ in range(workers + 2)]
        self.probe_rand = random.Random(self.seeds[-2])
        self.stop = threading.Event()
        self.leak = leak
        self.stats: poolkit.PoolStats | None = None  #: at the end, after close()
        #: a snapshot taken for the sampler (asyncio: on the loop): tasks, stats
        self.snapshot: Callable[[], tuple[int, poolkit.PoolStats]] | None = None
        self.left: list[str] = []  #: pool threads or tasks left after close()
        self.t0 = time.monotonic()

    def rest(self, plan: Plan) -> float:
        """Seconds a worker rests after an operation: its own pause, or to the end of the lull
        it is in."""
        phase = (time.monotonic() - self.t0) % LULL_EVERY
        if phase >= LULL_EVERY - LULL:
            return max(plan.pause, LULL_EVERY - phase)
        return plan.pause

    def options(self, probe: Callable[[Any], Any]) -> poolkit.PoolOptions:
        return poolkit.PoolOptions(
            max_size=MAX_SIZE,
            min_size=MIN_SIZE,
            soft_max_size=SOFT_MAX_SIZE,
            max_connecting=MAX_CONNECTING,
            max_idle_time=MAX_IDLE_TIME,
            max_lifetime=MAX_LIFETIME,
            background_interval=BACKGROUND_INTERVAL,
            connect_timeout=CONNECT_TIMEOUT,
            max_waiting=MAX_WAITING,
            keep_alive=poolkit.KeepAlive(KEEP_ALIVE_INTERVAL, probe, timeout=KEEP_ALIVE_TIMEOUT),
        )

    def probe_delay(self) -> float:
        """A probe: raises ``ProbeFailed``, or the seconds it takes."""
        x = self.probe_rand.random()
        if x < PROBE_FAIL:
            with self.book.lock:
                self.book.probe_faults["failed"] += 1
            raise ProbeFailed("probe failed")
        if x < PROBE_FAIL + PROBE_SLOW:
            with self.book.lock:
                self.book.probe_faults["timed out"] += 1
            return KEEP_ALIVE_TIMEOUT * 1.5
        return 0.0


# ---------------------------------------------------------------------------------- threads


def connect_blocking(book: SoakBook, ctx: poolkit.ConnectContext) -> Tracked:
    """``stress.connect_blocking``, counted while it runs."""
    try:
        return stress.connect_blocking(book, ctx)
    finally:
        book.connect_ended()


class ThreadFront(Front):
    def start(self) -> None:
        book = self.book

        def probe(conn: Tracked) -> None:
            book.probe_started(conn, strict=False)
            try:
                delay = self.probe_delay()
                if delay:
                    time.sleep(delay)
            finally:
                book.probe_ended(conn)

        self.pool: poolkit.Pool[Tracked] = poolkit.Pool(
            functools.partial(connect_blocking, book),
            address=self.address,
            options=self.options(probe),
        )
        self.pool.ready()
        self.snapshot = lambda: (0, self.pool.stats())
        self.threads = [
            threading.Thread(target=self._guard, args=(self._worker, n), name=f"soak-worker-{n}")
            for n in range(self.config.workers)
        ]
        self.threads.append(
            threading.Thread(target=self._guard, args=(self._clearer, 0), name="soak-clearer")
        )
        for t in self.threads:
            t.start()

    def _guard(self, target: Callable[[int], None], n: int) -> None:
        try:
            target(n)
        except BaseException as exc:  # a bug: reported
            self.book.broken(f"{threading.current_thread().name}: unexpected {exc!r}")

    def _worker(self, n: int) -> None:
        rand = random.Random(self.seeds[n])
        me = object()
        stop = self.stop
        while not stop.is_set():
            plan = draw(rand, cancel=False)
            self._one(plan, me, rand)
            rest = self.rest(plan)
            if rest:
                stop.wait(rest)

    def _one(self, plan: Plan, me: object, rand: random.Random) -> None:
        book = self.book
        pool = self.pool
        interrupts = book.interrupts_begun
        started = time.monotonic()
        try:
            if plan.managed:
                with pool.connection(timeout=plan.timeout) as conn:
                    book.late_by(started, time.monotonic(), plan.timeout)
                    book.took(conn, me, interrupts)
                    if plan.hold:
                        time.sleep(plan.hold)
                    book.gave_back(conn)
                    if plan.end == "raise":
                        raise UserError()
                outcome = "released"
            else:
                lease = pool.checkout(timeout=plan.timeout)
                book.late_by(started, time.monotonic(), plan.timeout)
                conn = lease.connection
                book.took(conn, me, interrupts)
                if plan.hold:
                    time.sleep(plan.hold)
                book.gave_back(conn)
                if plan.end == "discard":
                    lease.discard(ConnectRefused("broken"))
                    outcome = "discarded"
                elif plan.end == "drop":
                    with book.lock:
                        book.dropped += 1
                    del lease  # garbage now: the pool must reclaim its connection
                    outcome = "lease dropped"
                else:
                    lease.release()
                    outcome = "released"
            _leak_on_purpose(self.leak)
        except UserError:
            outcome = "raised in connection()"
        except poolkit.PoolError as exc:
            book.late_by(started, time.monotonic(), plan.timeout)
            outcome = type(exc).__name__
            if exc.retryable:  # as a driver does: a moment, then again
                time.sleep(rand.uniform(0.0, 0.005))
        except ConnectRefused:
            book.late_by(started, time.monotonic(), plan.timeout)
            outcome = "connect error"
        book.note(outcome)

    def _clearer(self, _: int) -> None:
        book = self.book
        pool = self.pool
        rand = random.Random(self.seeds[-1])
        while not self.stop.wait(rand.uniform(*CLEAR_EVERY)):
            interrupt = rand.random() < 0.5
            with book.lock:
                book.interrupts_begun += interrupt
                book.clears[interrupt] += 1
            try:
                pool.clear(interrupt_in_use=interrupt)
                book.check_stats(pool.stats())
                if rand.random() < 0.3:
                    time.sleep(rand.uniform(0, 0.02))
            finally:
                pool.ready()
                with book.lock:
                    book.interrupts_ended += interrupt

    def finish(self) -> None:
        """Stop the workers, let the pool reclaim the dropped leases, close it, check."""
        book = self.book
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
            if t.is_alive():
                book.broken(f"worker thread {t.name} did not end")
        reclaimed_within(book, RECLAIMS, self.address)
        stress._wait_for(lambda: settled(book, self.pool.stats()), QUIET)
        check_settled(book, self.pool.stats())
        book.closing = True
        self.pool.close()
        stress._wait_for(lambda: not stress._pool_threads(), HANG[1] + 10)
        self.left = [t.name for t in stress._pool_threads()]
        for name in self.left:
            book.broken(f"pool thread left after close(): {name}")
        self.stats = self.pool.stats()
        book.check_end(self.stats)


# ---------------------------------------------------------------------------------- asyncio


async def connect_async(book: SoakBook, ctx: poolkit.ConnectContext) -> Tracked:
    """``stress.connect_async``, counted while it runs."""
    try:
        return await stress.connect_async(book, ctx)
    finally:
        book.connect_ended()


class AsyncFront(Front):
    def start(self) -> None:
        started = threading.Event()
        self.thread = threading.Thread(
            target=self._thread, args=(started,), name="soak-asyncio-loop"
        )
        self.thread.start()
        if not started.wait(30):
            raise RuntimeError("the asyncio loop did not start")

    def _thread(self, started: threading.Event) -> None:
        try:
            asyncio.run(self._main(started))
        except BaseException as exc:  # a bug: reported
            self.book.broken(f"asyncio loop: unexpected {exc!r}")
            started.set()

    async def _main(self, started: threading.Event) -> None:
        book = self.book
        loop = asyncio.get_running_loop()
        self.loop = loop

        async def probe(conn: Tracked) -> None:
            book.probe_started(conn, strict=True)
            try:
                delay = self.probe_delay()
                await asyncio.sleep(delay)
            finally:
                book.probe_ended(conn)

        pool: poolkit.AsyncPool[Tracked] = poolkit.AsyncPool(
            functools.partial(connect_async, book),
            address=self.address,
            options=self.options(probe),
        )
        self.pool = pool
        pool.ready()

        async def snapshot() -> tuple[int, poolkit.PoolStats]:
            return len(asyncio.all_tasks()), pool.stats()

        def ask() -> tuple[int, poolkit.PoolStats]:
            return asyncio.run_coroutine_threadsafe(snapshot(), loop).result(timeout=30)

        self.snapshot = ask
        tasks = [asyncio.ensure_future(self._worker(n)) for n in range(self.config.workers)]
        tasks.append(asyncio.ensure_future(self._clearer()))
        self.stopping = asyncio.Event()
        started.set()
        await self.stopping.wait()
        _, pending = await asyncio.wait(tasks, timeout=30)
        for task in pending:
            book.broken(f"worker {task!r} did not end")
            task.cancel()
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                book.broken(f"worker task: unexpected {task.exception()!r}")
        await reclaimed_within_async(book, RECLAIMS, self.address)
        for _ in range(round(QUIET / 0.01)):
            if settled(book, pool.stats()):
                break
            await asyncio.sleep(0.01)
        check_settled(book, pool.stats())
        book.closing = True
        await pool.close()
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        self.left = [repr(t) for t in left]
        for task in left:
            book.broken(f"task left after close(): {task!r}")
        self.stats = pool.stats()
        book.check_end(self.stats)

    async def _worker(self, n: int) -> None:
        rand = random.Random(self.seeds[n])
        me = object()
        book = self.book
        while not self.stop.is_set():
            plan = draw(rand, cancel=True)
            if plan.cancel_at is None:
                await self._one(plan, me, rand)
            else:
                # cancelled at a random point: while waiting, while holding, or just after
                task = asyncio.ensure_future(self._one(plan, me, rand))
                await asyncio.wait([task], timeout=plan.cancel_at)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    if not task.cancelled():  # pragma: no cover - the worker was cancelled
                        raise
                    book.note("cancelled")
            rest = self.rest(plan)
            if rest:
                await asyncio.sleep(rest)

    async def _one(self, plan: Plan, me: object, rand: random.Random) -> None:
        book = self.book
        pool = self.pool
        loop = self.loop
        interrupts = book.interrupts_begun
        started = loop.time()
        try:
            if plan.managed:
                async with pool.connection(timeout=plan.timeout) as conn:
                    book.late_by(started, loop.time(), plan.timeout)
                    book.took(conn, me, interrupts)
                    try:
                        await asyncio.sleep(plan.hold)
                    finally:
                        book.gave_back(conn)
                    if plan.end == "raise":
                        raise UserError()
                outcome = "released"
            else:
                lease = await pool.checkout(timeout=plan.timeout)
                book.late_by(started, loop.time(), plan.timeout)
                conn = lease.connection
                book.took(conn, me, interrupts)
                try:
                    await asyncio.sleep(plan.hold)
                except BaseException as exc:
                    book.gave_back(conn)
                    lease.discard(exc)
                    raise
                book.gave_back(conn)
                if plan.end == "discard":
                    lease.discard(ConnectRefused("broken"))
                    outcome = "discarded"
                elif plan.end == "drop":
                    with book.lock:
                        book.dropped += 1
                    del lease  # garbage now: the pool must reclaim its connection
                    outcome = "lease dropped"
                else:
                    lease.release()
                    outcome = "released"
            _leak_on_purpose(self.leak)
        except UserError:
            outcome = "raised in connection()"
        except poolkit.PoolError as exc:
            book.late_by(started, loop.time(), plan.timeout)
            outcome = type(exc).__name__
            if exc.retryable:  # as a driver does: a moment, then again
                await asyncio.sleep(rand.uniform(0.0, 0.005))
        except ConnectRefused:
            book.late_by(started, loop.time(), plan.timeout)
            outcome = "connect error"
        book.note(outcome)

    async def _clearer(self) -> None:
        book = self.book
        pool = self.pool
        rand = random.Random(self.seeds[-1])
        while not self.stop.is_set():
            try:
                async with asyncio.timeout(rand.uniform(*CLEAR_EVERY)):
                    await self.stopping.wait()
                return
            except TimeoutError:
                pass
            interrupt = rand.random() < 0.5
            with book.lock:
                book.interrupts_begun += interrupt
                book.clears[interrupt] += 1
            try:
                pool.clear(interrupt_in_use=interrupt)
                book.check_stats(pool.stats())
                if rand.random() < 0.3:
                    await asyncio.sleep(rand.uniform(0, 0.02))
            finally:
                pool.ready()
                with book.lock:
                    book.interrupts_ended += interrupt

    def finish(self) -> None:
        self.stop.set()
        stopping = getattr(self, "stopping", None)
        if stopping is not None:
            self.loop.call_soon_threadsafe(stopping.set)
        self.thread.join(timeout=HANG[1] + 60)
        if self.thread.is_alive():
            self.book.broken("the asyncio loop thread did not end")


FRONTS: dict[str, type[Front]] = {"threads": ThreadFront, "asyncio": AsyncFront}


# ---------------------------------------------------------------------------------- the log


class PoolLog(logging.Handler):
    """Counts what the pools log: reclaimed leases (the warning on ``poolkit.pool`` for a lease
    garbage-collected while out), the CMAP messages (``poolkit.connection`` at DEBUG), the other
    messages by template; and keeps the errors (a close, a timer or a listener that raised in
    the pool) as problems."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reclaimed: Counter[str] = Counter()
        self.cmap = 0
        self.messages: Counter[tuple[str, str]] = Counter()
        self.errors: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "poolkit.connection" and record.levelno < logging.WARNING:
            self.cmap += 1
            return
        args = record.args
        if (
            record.msg == "poolkit: a lease on connection %d of %s %s; %s"
            and isinstance(args, tuple)
            and "garbage-collected" in str(args[2])
        ):
            self.reclaimed[str(args[1])] += 1
        elif record.levelno >= logging.ERROR:
            if len(self.errors) < 20:
                self.errors.append(f"{record.name}: {record.getMessage()[:1000]}")
        else:
            self.messages[(record.levelname, str(record.msg))] += 1


LOG = PoolLog()
#: seconds the pool has, once the workers stopped, to reclaim every dropped lease (it reclaims
#: them at its next timer: every ``BACKGROUND_INTERVAL`` at least)
RECLAIMS = 5.0


#: seconds the pool has, once the workers stopped, to have no abandoned connect counted while no
#: connect function runs (the longest hang is ``HANG[1]``)
QUIET = HANG[1] + 5.0


def settled(book: SoakBook, stats: poolkit.PoolStats) -> bool:
    with book.lock:
        running = book.running
    return running == 0 and getattr(stats, "abandoned", 0) == 0


def check_settled(book: SoakBook, stats: poolkit.PoolStats) -> None:
    """Once the workers stopped: no abandoned connect may still count against the limits
    after every connect function returned."""
    book.check_stats(stats)
    abandoned = getattr(stats, "abandoned", 0)
    with book.lock:
        running = book.running
    if abandoned > running:
        book.broken(
            f"{QUIET:.0f} s after the workers stopped the pool still counts {abandoned} abandoned "
            f"connects against max_size and max_connecting; {running} connect functions run"
        )


def reclaimed_within(book: SoakBook, seconds: float, address: str) -> None:
    gc.collect()
    stress._wait_for(lambda: LOG.reclaimed[address] >= book.dropped, seconds)
    _check_reclaimed(book, seconds, address)


async def reclaimed_within_async(book: SoakBook, seconds: float, address: str) -> None:
    gc.collect()
    for _ in range(round(seconds / 0.01)):
        if LOG.reclaimed[address] >= book.dropped:
            break
        await asyncio.sleep(0.01)
    _check_reclaimed(book, seconds, address)


def _check_reclaimed(book: SoakBook, seconds: float, address: str) -> None:
    got = LOG.reclaimed[address]
    if got != book.dropped:
        book.broken(
            f"{book.dropped} leases dropped without release, {got} reclaimed and reported by the "
            f"pool {seconds:.0f} s after the workers stopped"
        )


# ---------------------------------------------------------------------------------- memory


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    t: float  #: seconds since the start
    ops: int  #: operations so far, both front ends
    heap: int  #: bytes traced by tracemalloc, after gc.collect()
    blocks: int  #: sys.getallocatedblocks()
    rss: int  #: resident set size, bytes (0: unknown)
    threads: int
    tasks: int  #: asyncio tasks on the soak's loop
    conns: int  #: connections of the pools (stats().total)


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def take_sample(t0: float, fronts: list[Front]) -> Sample:
    tasks = conns = 0
    for front in fronts:
        if front.snapshot is None:
            continue
        try:
            n, stats = front.snapshot()
        except Exception as exc:  # the loop did not answer: reported
            front.book.broken(f"no statistics from the {front.name} pool: {exc!r}")
            continue
        front.book.check_stats(stats)
        # (the cast: mypy cannot infer a lambda whose parameter has a default)
        again = cast(Callable[[], poolkit.PoolStats], lambda f=front: f.snapshot()[1])
        front.book.check_abandoned(stats, again)
        tasks += n
        conns += stats.total
        front.book.settle()
    ops = sum(front.book.operations() for front in fronts)
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0]
    return Sample(
        t=time.monotonic() - t0,
        ops=ops,
        heap=heap,
        blocks=sys.getallocatedblocks(),
        rss=rss_bytes(),
        threads=threading.active_count(),
        tasks=tasks,
        conns=conns,
    )


def least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """The slope of ys against xs and its standard error."""
    n = len(xs)
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 3 or sxx == 0:
        return 0.0, math.inf
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return slope, math.sqrt(residual / (n - 2) / sxx)


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    samples: int
    slope: float  #: bytes per operation
    stderr: float
    growth: float  #: bytes, the fitted growth over the window
    per_minute: float  #: bytes per minute (heap against time, for information)
    text: str


def memory_verdict(samples: list[Sample], start: float) -> Verdict:
    """Fit heap against operations over the samples from ``start`` seconds on.

    Fails if the slope exceeds ``HEAP_BOUND`` (0.25 byte per operation, 250 bytes per 1,000)
    and the growth it fits over the window exceeds ``HEAP_FLOOR`` (64 KiB). Why these:

    * A leak per checkout (a lease, a request, a list slot or dict entry kept per operation) is
      8 bytes per operation at the very least, 50-200 in practice: 30-800 times the bound.
    * Connections are made about once per 100-300 operations here (lifetimes, idle closes,
      discards, failed probes, clears): anything kept per connection (an id in a dict, a timer
      entry, a record: 100 bytes or more) comes to about 0.3-1 byte per operation, at or above
      the bound. Something kept per ``clear()`` (one per ~10^4 operations) is below what this
      fit can see; the heap-per-minute figure is printed for that.
    * Nothing in a healthy pool grows with operations: its counts are integers and its tallies
      dicts keyed by a handful of reasons. The noise is the state in flight when a sample is
      taken (leases, waiters, tasks, threads, frames): tens of KiB either way, which over a
      window of millions of operations is far below the bound (a 2-minute run fits about
      300,000 operations with a standard error of 0.05 byte per operation), and which the floor
      keeps from failing a run too short to tell (a few seconds: 10^4 operations).
    """
    window = [s for s in samples if s.t >= start]
    if len(window) < 4 or window[-1].ops <= window[0].ops:
        return Verdict(False, len(window), 0.0, math.inf, 0.0, 0.0, "too few samples to fit")
    slope, stderr = least_squares([s.ops for s in window], [s.heap for s in window])
    per_second, _ = least_squares([s.t for s in window], [s.heap for s in window])
    growth = slope * (window[-1].ops - window[0].ops)
    ok = slope <= HEAP_BOUND or growth <= HEAP_FLOOR
    rule = f"bound {HEAP_BOUND * 1000:.0f} B per 1,000 operations, floor {HEAP_FLOOR // 1024} KiB"
    if ok:
        text = "OK: the heap does not grow with the operations"
    else:
        text = "FAILED: the heap grows with the operations"
    return Verdict(
        ok,
        len(window),
        slope,
        stderr,
        growth,
        per_second * 60,
        f"{text} ({rule})",
    )


def growth_by_line(before: dict[Any, int], after: dict[Any, int], top: int) -> list[str]:
    """The source lines whose live memory grew most from ``before`` to ``after``."""
    diffs = sorted(
        ((size - before.get(tb, 0), tb) for tb, size in after.items()),
        key=lambda d: d[0],
        reverse=True,
    )
    out = []
    for diff, tb in diffs[:top]:
        if diff <= 0:
            break
        frame = tb[0]
        out.append(f"{diff / 1024:+10.1f} KiB  {frame.filename}:{frame.lineno}")
    return out


def heap_by_line() -> dict[Any, int]:
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    return {stat.traceback: stat.size for stat in snapshot.statistics("lineno")}


# ---------------------------------------------------------------------------------- the run

CMAP_LOG = logging.getLogger("poolkit.connection")


def observe(on: bool) -> None:
    """The CMAP log at DEBUG (the pools build events and log them) or not (their fast paths)."""
    CMAP_LOG.setLevel(logging.DEBUG if on else logging.WARNING)


@dataclasses.dataclass
class Result:
    seconds: float
    fronts: list[Front]
    samples: list[Sample]
    fit_from: float
    baseline_size: int  #: bytes of the per-line baseline kept over the fit window
    verdict: Verdict
    growth: list[str]
    other_threads: list[str]


def soak(fronts: list[Front], seconds: float, every: float, top: int) -> Result:
    loggers = [logging.getLogger("poolkit.pool"), CMAP_LOG]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(LOG)
        lg.propagate = False
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # threads change hands 50 times as often as by default
    before = {t.ident for t in threading.enumerate()}
    tracemalloc.start()
    samples: list[Sample] = []
    baseline: dict[Any, int] = {}
    baseline_size = 0
    growth: list[str] = []
    fit_from = seconds / 2
    try:
        t0 = time.monotonic()
        for front in fronts:
            front.start()
        samples.append(take_sample(t0, fronts))
        next_minute = 60.0
        i = 1
        while True:
            due = t0 + i * every
            if due > t0 + seconds:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            if not baseline and due - t0 >= fit_from:
                gc.collect()
                mark = tracemalloc.get_traced_memory()[0]
                baseline = heap_by_line()  # kept from here on: constant over the window
                gc.collect()
                baseline_size = tracemalloc.get_traced_memory()[0] - mark
                fit_from = time.monotonic() - t0
            samples.append(take_sample(t0, fronts))
            i += 1
            last = samples[-1]
            if last.t >= next_minute:
                next_minute += 60.0
                problems = sum(len(f.book.problems) for f in fronts)
                print(
                    f"soak: {last.t / 60:.1f} min, {last.ops:,} operations, heap "
                    f"{last.heap / 2**20:.1f} MiB, {problems} problem(s)",
                    flush=True,
                )
            if due + every * OBSERVED < t0 + seconds:
                observe(True)
                time.sleep(every * OBSERVED)
                observe(False)
        time.sleep(max(0.0, t0 + seconds - time.monotonic()))
        verdict = memory_verdict(samples, fit_from)
        if baseline and (not verdict.ok or top):
            growth = growth_by_line(baseline, heap_by_line(), top or 12)
        elapsed = time.monotonic() - t0
    finally:
        observe(False)
        for front in fronts:
            front.finish()
        tracemalloc.stop()
        sys.setswitchinterval(switch)
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(LOG)
            lg.setLevel(level)
            lg.propagate = propagate
    stress._wait_for(lambda: not [t for t in threading.enumerate() if t.ident not in before], 10)
    others = [t.name for t in threading.enumerate() if t.ident not in before]
    return Result(elapsed, fronts, samples, fit_from, baseline_size, verdict, growth, others)


# ---------------------------------------------------------------------------------- report


def report(result: Result, seed: int) -> tuple[str, bool]:
    lines: list[str] = []
    out = lines.append
    failed = not result.verdict.ok
    names = " + ".join(f.name for f in result.fronts)
    out(f"poolkit soak: {names}, seed {seed}, {result.seconds / 60:.2f} min")
    out("")
    for front in result.fronts:
        book = front.book
        stats = front.stats
        ops = sum(book.outcomes.values())
        out(f"[{front.name}] {front.address}: {front.config.workers} workers + a clearer")
        out(f"  operations: {ops:,} ({ops / max(result.seconds, 1e-9):,.0f}/s)")
        ok = {k: v for k, v in book.outcomes.items() if k in OK_OUTCOMES}
        errors = {k: v for k, v in book.outcomes.items() if k not in OK_OUTCOMES}
        out(f"    ok                          {sum(ok.values()):>12,}")
        for name in OK_OUTCOMES:
            out(f"      {name:<26}{ok.get(name, 0):>12,}")
        out(f"    errors                      {sum(errors.values()):>12,}")
        for name, n in sorted(errors.items(), key=lambda kv: -kv[1]):
            out(f"      {name:<26}{n:>12,}")
        out(
            f"  clears: {sum(book.clears.values()):,} ({book.clears[True]:,} interrupting); "
            f"keep-alive probes: {book.probes:,} (failed {book.probe_faults['failed']:,}, "
            f"timed out {book.probe_faults['timed out']:,})"
        )
        out(f"  latest checkout past its timeout: {book.latest:.3f} s (allowed {SLACK} s)")
        out("  connections              tracked objects | pool stats()")
        if stats is None:
            out("    (no statistics: the pool did not close)")
        else:
            closed = sum(stats.connections_closed.values())
            reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(stats.connections_closed.items()))
            failures = dict(sorted(stats.checkout_failures.items()))
            unrun = stats.connect_attempts - book.connects
            out(
                f"    connects started       {book.connects:>10,} | connect_attempts "
                f"{stats.connect_attempts:,} (connect_failures {stats.connect_failures:,})"
                + (f"; {unrun} abandoned before their task ran the function" if unrun else "")
            )
            out(
                f"    opened (established)   {book.made_count - book.late:>10,} | "
                f"connections_created {stats.connections_created:,}  ({book.made_count:,} made, "
                f"{book.late:,} of them after the pool gave up on the connect, closed at once)"
            )
            out(
                f"    closed                 {book.closed_count:>10,} | {closed:,} records "
                f"closed (one per connect started): {reasons}"
            )
            out(f"    checkouts served (pool): {stats.checkouts:,}; failed: {failures}")
        reclaimed = LOG.reclaimed[front.address]
        out(
            f"  leases dropped without release: {book.dropped:,}; reclaimed and reported by the "
            f"pool: {reclaimed:,}"
        )
        out(
            f"  leaks: connections never closed {len(book.live)}, leases not reclaimed "
            f"{book.dropped - reclaimed}, {'pool threads' if front.name == 'threads' else 'tasks'}"
            f" left {len(front.left)}"
        )
        if book.problems:
            failed = True
            out(f"  PROBLEMS ({len(book.problems)}):")
            for problem in book.problems:
                out(f"    {problem}")
        else:
            out("  problems: none")
        out("")
    out(f"CMAP log messages built in the observed windows: {LOG.cmap:,}")
    for (level, template), n in sorted(LOG.messages.items()):
        out(f"the pools logged {n:,} times ({level}): {template!r}")
    if LOG.errors:
        failed = True
        out("the pools logged errors:")
        for line in LOG.errors:
            out(f"  {line}")
    if result.other_threads:
        failed = True
        out(f"threads left at the end: {result.other_threads}")
    out("")
    out(
        "memory (heap: tracemalloc after gc.collect(); * = in the fit window, which includes the "
        f"per-line baseline the soak keeps from its start: {result.baseline_size / 1024:.1f} KiB)"
    )
    out("      t (s)    operations   heap (KiB)      blocks   RSS (MiB)  threads  tasks  conns")
    for s in result.samples:
        mark = "*" if s.t >= result.fit_from else " "
        out(
            f"  {mark}{s.t:8.1f} {s.ops:13,} {s.heap / 1024:12,.1f} {s.blocks:11,} "
            f"{s.rss / 2**20:11.1f} {s.threads:8} {s.tasks:6} {s.conns:6}"
        )
    v = result.verdict
    out("")
    out(
        f"heap against operations over the second half ({v.samples} samples from "
        f"{result.fit_from:.1f} s): {v.slope * 1000:+.2f} B per 1,000 operations "
        f"(standard error {v.stderr * 1000:.2f}), fitted growth {v.growth / 1024:+.1f} KiB; "
        f"against time {v.per_minute / 1024:+.1f} KiB per minute"
    )
    out(f"memory: {v.text}")
    if result.growth:
        out("largest growth by line over the fit window (tracemalloc):")
        for line in result.growth:
            out(f"  {line}")
    out("")
    out(f"soak {'FAILED' if failed else 'passed'}")
    return "\n".join(lines), not failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (fractions too)")
    parser.add_argument("--front", choices=[*FRONTS, "both"], default="both")
    parser.add_argument("--seed", type=int, help="the workload's seed (default: drawn)")
    parser.add_argument(
        "--sample-every",
        type=float,
        help="seconds between memory samples (default: 1/40 of the run, between 0.2 and 10)",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=0,
        help="list the N lines whose memory grew most over the fit "
        "window (default: 12, when the memory verdict fails)",
    )
    parser.add_argument(
        "--self-check-leak",
        type=int,
        default=0,
        metavar="BYTES",
        help="retain BYTES per "
        "successful operation: a leak on purpose, which the memory verdict must catch",
    )
    args = parser.parse_args(argv)
    if not args.minutes > 0:
        parser.error("--minutes must be > 0")
    seconds = args.minutes * 60
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    every = args.sample_every or min(10.0, max(0.2, seconds / 40))
    names = list(FRONTS) if args.front == "both" else [args.front]
    fronts = [
        FRONTS[name](name, seed * 2 + list(FRONTS).index(name), seconds, args.self_check_leak)
        for name in names
    ]
    result = soak(fronts, seconds, every, args.top)
    text, ok = report(result, seed)
    print(text, flush=True)
    if not ok:
        print(
            f"replay the workload: python tests/support/soak.py --minutes {args.minutes:g} "
            f"--front {args.front} --seed {seed}"
        )
    _self_check_leak.clear()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
