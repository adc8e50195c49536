"""Randomized stress runs of each front end against a misbehaving connect function.

A run drives one pool (``Pool`` on threads, ``AsyncPool`` on asyncio or under trio) from many
workers for a bounded time, seeded: connects that are slow, fail, or hang and then fail;
checkouts with random timeouts, cancelled (asyncio, trio) or interrupted; connections released,
discarded, or given back by an exception inside ``connection()``; ``clear()`` with and without
``interrupt_in_use`` from another worker; and ``close()`` racing all of it at the end. Every
connection object the connect function made is tracked, and the run reports each rule broken:

* every connection made was closed exactly once by the end (the pool is closed then), and the
  connect function never ran twice for one ``ctx.connection_id``;
* no checkout returned a connection already closed (outside an ``interrupt_in_use`` clear that
  raced it), and no connection had two holders at once;
* ``stats()`` stay consistent while it runs, and are all zero at the end;
* no worker waited past its timeout plus a slack; no task or thread of the pool is left.

``python tests/support/stress.py --front threads --seeds 50 --seconds 5`` runs longer; a failing
seed is printed so that ``--seed N`` replays it. The test suite runs a few seconds per seed and
front end (``tests/pools/test_stress.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import math
import random
import sys
import threading
import time
from collections import Counter
from typing import Any

import trio

import poolkit

#: how late a checkout may return past its timeout before it counts as a broken deadline (the
#: machine is shared and small: threads may not run for a while)
SLACK = 0.5


class ConnectRefused(OSError):
    """The connect function's injected failure."""


class UserError(Exception):
    """Raised inside ``connection()`` by a worker."""


@dataclasses.dataclass
class Config:
    """One run's drawn settings."""

    seed: int
    seconds: float
    workers: int
    max_size: int
    max_connecting: int
    timeouts: tuple[float, float]
    max_idle_time: float | None
    fail_rate: float
    hang_rate: float
    hang: tuple[float, float]
    discard_rate: float
    raise_rate: float
    cancel_rate: float
    clear_every: tuple[float, float]
    listen: bool

    @classmethod
    def draw(cls, seed: int, seconds: float) -> Config:
        r = random.Random(seed)
        low = r.uniform(0.05, 0.15)
        return cls(
            seed=seed,
            seconds=seconds,
            workers=r.randint(4, 12),
            max_size=r.randint(2, 8),
            max_connecting=r.randint(1, 3),
            timeouts=(low, low + r.uniform(0.0, 0.15)),
            max_idle_time=r.choice([None, 0.05]),
            fail_rate=0.1,
            hang_rate=r.choice([0.0, 0.02, 0.05]),
            hang=(min(1.0, seconds / 3), min(2.0, seconds / 2)),
            discard_rate=0.15,
            raise_rate=0.1,
            cancel_rate=0.1,
            clear_every=(0.05, 0.3),
            listen=r.random() < 0.3,
        )

    def options(self) -> poolkit.PoolOptions:
        return poolkit.PoolOptions(
            max_size=self.max_size,
            max_connecting=self.max_connecting,
            max_idle_time=self.max_idle_time,
            background_interval=0.05,
            connect_timeout=0.5,
        )


class Tracked:
    """A connection that records how it is used and closed."""

    def __init__(self, book: Book, cid: int) -> None:
        self.book = book
        self.cid = cid
        self.closes = 0
        self.holder: object = None

    def close(self) -> None:
        with self.book.lock:
            self.closes += 1
            if self.closes > 1:
                self.book.broken(f"connection {self.cid} closed {self.closes} times")

    def __repr__(self) -> str:
        return f"<Tracked {self.cid} closes={self.closes}>"


class Book:
    """What a run saw: the connections made and the rules broken."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.made: list[Tracked] = []
        self.connect_calls: Counter[int] = Counter()
        self.problems: list[str] = []
        self.outcomes: Counter[str] = Counter()
        #: interrupting clears begun and ended: a connection closed under its holder is fine
        #: while one ran
        self.interrupts_begun = 0
        self.interrupts_ended = 0

    def broken(self, problem: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(problem)

    def note(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1

    def connect_called(self, ctx: poolkit.ConnectContext) -> None:
        with self.lock:
            self.connect_calls[ctx.connection_id] += 1
            if self.connect_calls[ctx.connection_id] > 1:
                self.broken(f"connect called twice for connection id {ctx.connection_id}")

    def new(self, ctx: poolkit.ConnectContext) -> Tracked:
        with self.lock:
            conn = Tracked(self, ctx.connection_id)
            self.made.append(conn)
            return conn

    def took(self, conn: Tracked, who: object, interrupts: int) -> None:
        """A worker's checkout returned ``conn``; ``interrupts`` was ``interrupts_begun`` when the
        checkout started."""
        with self.lock:
            if conn.closes and self.interrupts_ended == interrupts == self.interrupts_begun:
                self.broken(f"connection {conn.cid} handed out after it was closed")
            if conn.holder is not None:
                self.broken(f"connection {conn.cid} handed to two holders")
            conn.holder = who

    def gave_back(self, conn: Tracked) -> None:
        with self.lock:
            conn.holder = None

    def check_stats(self, stats: poolkit.PoolStats) -> None:
        parts = stats.available + stats.pending + stats.in_use + stats.backing_off
        if stats.total != parts or stats.total > self.config.max_size:
            self.broken(f"inconsistent stats: {stats}")
        if stats.kept + stats.demand + stats.overflow != stats.total:
            self.broken(f"roles do not add up: {stats}")

    def check_end(self, stats: poolkit.PoolStats) -> None:
        """After the pool closed and every worker and connect ended."""
        if stats.total or stats.in_use or stats.available or stats.pending or stats.waiting:
            self.broken(f"closed pool still counts connections: {stats}")
        for conn in self.made:
            if conn.closes != 1:
                self.broken(f"connection {conn.cid} closed {conn.closes} times at the end")
            if conn.holder is not None:
                self.broken(f"connection {conn.cid} still held at the end")

    def report(self) -> str:
        c = self.config
        return (
            f"seed {c.seed}: {sum(self.outcomes.values())} operations "
            f"({dict(sorted(self.outcomes.items()))}), {len(self.made)} connections made"
        )


# ---------------------------------------------------------------------------------- connects
# (module functions, shared with tests/support/soak.py: a pool takes ``functools.partial(f, book)``)


def connect_blocking(book: Book, ctx: poolkit.ConnectContext) -> Tracked:
    """The threaded pool's connect function, misbehaving as ``book.config`` says: a hang (until
    the pool gives up on it, or its time is over) that then fails, else a short delay and a
    failure or ``book.new(ctx)``. Drawn per connection id, from the seed."""
    config = book.config
    book.connect_called(ctx)
    rand = random.Random(hash((config.seed, ctx.connection_id)))
    if rand.random() < config.hang_rate:
        end = time.monotonic() + rand.uniform(*config.hang)
        while time.monotonic() < end and not ctx.cancelled:
            time.sleep(0.01)
        raise ConnectRefused("hung, then failed")
    time.sleep(rand.uniform(0.0, 0.02))
    if rand.random() < config.fail_rate:
        raise ConnectRefused("refused")
    return book.new(ctx)


async def connect_async(book: Book, ctx: poolkit.ConnectContext) -> Tracked:
    """``connect_blocking`` for ``AsyncPool`` (a hang ends when the pool cancels it)."""
    config = book.config
    book.connect_called(ctx)
    rand = random.Random(hash((config.seed, ctx.connection_id)))
    if rand.random() < config.hang_rate:
        await asyncio.sleep(rand.uniform(*config.hang))
        raise ConnectRefused("hung, then failed")
    await asyncio.sleep(rand.uniform(0.0, 0.02))
    if rand.random() < config.fail_rate:
        raise ConnectRefused("refused")
    return book.new(ctx)


# ---------------------------------------------------------------------------------- threads


def _pool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("poolkit-")]


def run_threads(config: Config) -> Book:
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)  # threads change hands far more often: more races
    chaos = _chaos(random.Random(config.seed))
    threading.setprofile(chaos)
    sys.setprofile(chaos)
    try:
        return _run_threads(config)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        sys.setswitchinterval(switch)


#: the GIL's switch interval during a threaded run (CPython's default is 5 ms)
SWITCH_INTERVAL = 1e-5
#: how often a thread yields right after it releases a lock (see ``_chaos``)
YIELD_AFTER_RELEASE = 0.3


def _chaos(rand: random.Random) -> Any:
    """A profile hook that makes a thread give up the interpreter, at random, just after it
    releases a lock: the moment a front end has decided (under its lock) and not yet acted. It
    widens every such window, so that a race there shows in seconds rather than in weeks."""
    sleep = time.sleep
    draw = rand.random

    def hook(frame: Any, event: str, arg: Any) -> None:
        if (
            event == "c_return"
            and getattr(arg, "__name__", "") in ("release", "__exit__")
            and draw() < YIELD_AFTER_RELEASE
        ):
            sleep(0)

    return hook


def _run_threads(config: Config) -> Book:
    book = Book(config)
    r = random.Random(config.seed)
    seeds = [r.random() for _ in range(config.workers + 2)]

    listeners = [lambda event: None] if config.listen else []
    pool: poolkit.Pool[Tracked] = poolkit.Pool(
        functools.partial(connect_blocking, book),
        address="stress",
        options=config.options(),
        listeners=listeners,
    )
    pool.ready()
    stop = time.monotonic() + config.seconds
    closing = threading.Event()

    def worker(n: int) -> None:
        rand = random.Random(seeds[n])
        me = object()
        while time.monotonic() < stop and not closing.is_set():
            timeout = rand.uniform(*config.timeouts)
            interrupts = book.interrupts_begun
            started = time.monotonic()
            try:
                if rand.random() < 0.5:
                    with pool.connection(timeout=timeout) as conn:
                        _check_wait(book, started, timeout)
                        book.took(conn, me, interrupts)
                        _hold(rand)
                        book.gave_back(conn)
                        if rand.random() < config.raise_rate:
                            raise UserError()
                else:
                    lease = pool.checkout(timeout=timeout)
                    _check_wait(book, started, timeout)
                    book.took(lease.connection, me, interrupts)
                    _hold(rand)
                    book.gave_back(lease.connection)
                    if rand.random() < config.discard_rate:
                        lease.discard(ConnectRefused("broken"))
                    else:
                        lease.release()
                book.note("ok")
            except UserError:
                book.note("user error")
            except poolkit.PoolError as exc:
                _check_wait(book, started, timeout)
                book.note(type(exc).__name__)
                if exc.retryable:  # as a driver does: a moment, then again
                    time.sleep(rand.uniform(0.0, 0.005))
            except ConnectRefused:
                _check_wait(book, started, timeout)
                book.note("connect error")
            except BaseException as exc:  # pragma: no cover - a bug: reported
                book.broken(f"worker {n}: unexpected {exc!r}")
                return

    def clearer() -> None:
        rand = random.Random(seeds[-1])
        while time.monotonic() < stop and not closing.is_set():
            time.sleep(rand.uniform(*config.clear_every))
            interrupt = rand.random() < 0.5
            with book.lock:
                book.interrupts_begun += interrupt
            try:
                pool.clear(interrupt_in_use=interrupt)
                book.check_stats(pool.stats())
                if rand.random() < 0.3:
                    time.sleep(rand.uniform(0, 0.02))
                pool.ready()
            except poolkit.PoolClosedError:
                pass
            finally:
                with book.lock:
                    book.interrupts_ended += interrupt

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(config.workers)]
    threads.append(threading.Thread(target=clearer))
    for t in threads:
        t.start()
    # close() races the workers' last checkouts
    time.sleep(max(0.0, stop - time.monotonic() - r.uniform(0.0, 0.2)))
    book.check_stats(pool.stats())
    pool.close()
    closing.set()
    for t in threads:
        t.join(timeout=config.seconds + 10)
        if t.is_alive():
            book.broken(f"worker thread {t.name} did not end")
    _wait_for(lambda: not _pool_threads(), config.hang[1] + 5)
    if _pool_threads():
        book.broken(f"pool threads left: {[t.name for t in _pool_threads()]}")
    book.check_end(pool.stats())
    return book


def _hold_time(rand: random.Random) -> float:
    """How long a worker holds a connection: often not at all (most contention), else briefly."""
    return 0.0 if rand.random() < 0.5 else rand.uniform(0.0, 0.003)


def _hold(rand: random.Random) -> None:
    seconds = _hold_time(rand)
    if seconds:
        time.sleep(seconds)


def _check_wait(book: Book, started: float, timeout: float) -> None:
    waited = time.monotonic() - started
    if waited > timeout + SLACK:
        book.broken(f"a checkout with timeout {timeout:.3f} s returned after {waited:.3f} s")


def _wait_for(done: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        time.sleep(0.01)


# ---------------------------------------------------------------------------------- asyncio


def run_asyncio(config: Config) -> Book:
    return asyncio.run(_run_asyncio(config))


async def _run_asyncio(config: Config) -> Book:
    book = Book(config)
    r = random.Random(config.seed)
    seeds = [r.random() for _ in range(config.workers + 2)]
    loop = asyncio.get_running_loop()

    listeners = [lambda event: None] if config.listen else []
    pool: poolkit.AsyncPool[Tracked] = poolkit.AsyncPool(
        functools.partial(connect_async, book),
        address="stress",
        options=config.options(),
        listeners=listeners,
    )
    pool.ready()
    stop = loop.time() + config.seconds

    async def one(rand: random.Random, me: object, timeout: float) -> None:
        interrupts = book.interrupts_begun
        started = loop.time()
        try:
            if rand.random() < 0.5:
                async with pool.connection(timeout=timeout) as conn:
                    _check_wait_async(book, loop, started, timeout)
                    book.took(conn, me, interrupts)
                    try:
                        await asyncio.sleep(_hold_time(rand))
                    finally:
                        book.gave_back(conn)
                    if rand.random() < config.raise_rate:
                        raise UserError()
            else:
                lease = await pool.checkout(timeout=timeout)
                _check_wait_async(book, loop, started, timeout)
                book.took(lease.connection, me, interrupts)
                try:
                    await asyncio.sleep(_hold_time(rand))
                except BaseException as exc:
                    book.gave_back(lease.connection)
                    lease.discard(exc)
                    raise
                book.gave_back(lease.connection)
                if rand.random() < config.discard_rate:
                    lease.discard(ConnectRefused("broken"))
                else:
                    lease.release()
            book.note("ok")
        except UserError:
            book.note("user error")
        except poolkit.PoolError as exc:
            _check_wait_async(book, loop, started, timeout)
            book.note(type(exc).__name__)
            if exc.retryable:  # as a driver does: a moment, then again
                await asyncio.sleep(rand.uniform(0.0, 0.005))
        except ConnectRefused:
            _check_wait_async(book, loop, started, timeout)
            book.note("connect error")

    async def worker(n: int) -> None:
        rand = random.Random(seeds[n])
        me = object()
        while loop.time() < stop:
            timeout = rand.uniform(*config.timeouts)
            task = asyncio.ensure_future(one(rand, me, timeout))
            if rand.random() < config.cancel_rate:
                # cancelled at a random point: while waiting, while holding, or just after
                await asyncio.sleep(rand.uniform(0, timeout))
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():  # pragma: no cover - the worker itself was cancelled
                    raise
                book.note("cancelled")
            except BaseException as exc:  # pragma: no cover - a bug: reported
                book.broken(f"worker {n}: unexpected {exc!r}")
                return

    async def clearer() -> None:
        rand = random.Random(seeds[-1])
        while loop.time() < stop:
            await asyncio.sleep(rand.uniform(*config.clear_every))
            interrupt = rand.random() < 0.5
            book.interrupts_begun += interrupt
            try:
                pool.clear(interrupt_in_use=interrupt)
                book.check_stats(pool.stats())
                if rand.random() < 0.3:
                    await asyncio.sleep(rand.uniform(0, 0.02))
                pool.ready()
            except poolkit.PoolClosedError:
                pass
            finally:
                book.interrupts_ended += interrupt

    tasks = [asyncio.ensure_future(worker(n)) for n in range(config.workers)]
    tasks.append(asyncio.ensure_future(clearer()))
    await asyncio.sleep(max(0.0, stop - loop.time() - r.uniform(0.0, 0.2)))
    book.check_stats(pool.stats())
    closer = asyncio.ensure_future(pool.close())
    if r.random() < 0.3:  # the caller of close() stops waiting: the close goes on regardless
        await asyncio.sleep(0)
        closer.cancel()
    _, pending = await asyncio.wait(tasks, timeout=config.seconds + 10)
    for task in pending:
        book.broken(f"worker {task!r} did not end")
        task.cancel()
    try:
        await closer
    except asyncio.CancelledError:
        await pool.close()  # waits for the close work begun by the first call
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if left:
        book.broken(f"tasks left after close: {left}")
    book.check_end(pool.stats())
    return book


def _check_wait_async(
    book: Book, loop: asyncio.AbstractEventLoop, started: float, timeout: float
) -> None:
    waited = loop.time() - started
    if waited > timeout + SLACK:
        book.broken(f"a checkout with timeout {timeout:.3f} s returned after {waited:.3f} s")


# ---------------------------------------------------------------------------------- trio


async def connect_trio(book: Book, ctx: poolkit.ConnectContext) -> Tracked:
    """``connect_async`` under trio (a hang ends when the pool cancels it)."""
    config = book.config
    book.connect_called(ctx)
    rand = random.Random(hash((config.seed, ctx.connection_id)))
    if rand.random() < config.hang_rate:
        await trio.sleep(rand.uniform(*config.hang))
        raise ConnectRefused("hung, then failed")
    await trio.sleep(rand.uniform(0.0, 0.02))
    if rand.random() < config.fail_rate:
        raise ConnectRefused("refused")
    return book.new(ctx)


def run_trio(config: Config) -> Book:
    return trio.run(_run_trio, config)


async def _run_trio(config: Config) -> Book:
    """``_run_asyncio`` under trio: checkouts cut by cancel scopes at random points (waiting,
    holding, or just after), ``close()`` racing the end, and the rule that no task of the pool
    outlives its block."""
    book = Book(config)
    r = random.Random(config.seed)
    seeds = [r.random() for _ in range(config.workers + 2)]
    now = trio.current_time

    listeners = [lambda event: None] if config.listen else []
    pool: poolkit.AsyncPool[Tracked] = poolkit.AsyncPool(
        functools.partial(connect_trio, book),
        address="stress",
        options=config.options(),
        listeners=listeners,
    )
    stop = now() + config.seconds

    async def one(rand: random.Random, me: object, timeout: float) -> None:
        interrupts = book.interrupts_begun
        started = now()
        try:
            if rand.random() < 0.5:
                async with pool.connection(timeout=timeout) as conn:
                    _check_wait_trio(book, started, timeout)
                    book.took(conn, me, interrupts)
                    try:
                        await trio.sleep(_hold_time(rand))
                    finally:
                        book.gave_back(conn)
                    if rand.random() < config.raise_rate:
                        raise UserError()
            else:
                lease = await pool.checkout(timeout=timeout)
                _check_wait_trio(book, started, timeout)
                book.took(lease.connection, me, interrupts)
                try:
                    await trio.sleep(_hold_time(rand))
                except BaseException as exc:
                    book.gave_back(lease.connection)
                    lease.discard(exc)
                    raise
                book.gave_back(lease.connection)
                if rand.random() < config.discard_rate:
                    lease.discard(ConnectRefused("broken"))
                else:
                    lease.release()
            book.note("ok")
        except UserError:
            book.note("user error")
        except poolkit.PoolError as exc:
            _check_wait_trio(book, started, timeout)
            book.note(type(exc).__name__)
            if exc.retryable:  # as a driver does: a moment, then again
                await trio.sleep(rand.uniform(0.0, 0.005))
        except ConnectRefused:
            _check_wait_trio(book, started, timeout)
            book.note("connect error")

    async def worker(n: int) -> None:
        rand = random.Random(seeds[n])
        me = object()
        while now() < stop:
            timeout = rand.uniform(*config.timeouts)
            cut = rand.uniform(0, timeout) if rand.random() < config.cancel_rate else math.inf
            with trio.move_on_after(cut) as scope:
                try:
                    await one(rand, me, timeout)
                except Exception as exc:  # pragma: no cover - a bug: reported
                    book.broken(f"worker {n}: unexpected {exc!r}")
                    return
            if scope.cancelled_caught:
                book.note("cancelled")

    async def clearer() -> None:
        rand = random.Random(seeds[-1])
        while now() < stop:
            await trio.sleep(rand.uniform(*config.clear_every))
            interrupt = rand.random() < 0.5
            book.interrupts_begun += interrupt
            try:
                pool.clear(interrupt_in_use=interrupt)
                book.check_stats(pool.stats())
                if rand.random() < 0.3:
                    await trio.sleep(rand.uniform(0, 0.02))
                pool.ready()
            except poolkit.PoolClosedError:
                pass
            finally:
                book.interrupts_ended += interrupt

    async with pool:
        with trio.move_on_after(config.seconds + 10) as bound:
            async with trio.open_nursery() as nursery:
                for n in range(config.workers):
                    nursery.start_soon(worker, n)
                nursery.start_soon(clearer)
                await trio.sleep(max(0.0, stop - now() - r.uniform(0.0, 0.2)))
                book.check_stats(pool.stats())
                with trio.CancelScope() as closing:
                    if r.random() < 0.3:  # the caller of close() is cancelled: it closes all
                        closing.cancel()
                    await pool.close()
        if bound.cancelled_caught:
            book.broken("the workers did not end")
        await pool.close()  # (waits for the closes of leases given back since)
    trio_io = pool._trio
    if trio_io is None or trio_io._tasks:
        book.broken(f"tasks of the pool left after its block: {trio_io and trio_io._tasks}")
    if trio.lowlevel.current_task().child_nurseries:
        book.broken("a nursery left open after the pool's block")
    book.check_end(pool.stats())
    return book


def _check_wait_trio(book: Book, started: float, timeout: float) -> None:
    waited = trio.current_time() - started
    if waited > timeout + SLACK:
        book.broken(f"a checkout with timeout {timeout:.3f} s returned after {waited:.3f} s")


RUNNERS = {"threads": run_threads, "asyncio": run_asyncio, "trio": run_trio}


def run(front: str, seed: int, seconds: float) -> Book:
    book = RUNNERS[front](Config.draw(seed, seconds))
    gc.collect()
    return book


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--front", choices=[*RUNNERS, "all"], default="all")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (from --first)")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per seed")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    fronts = list(RUNNERS) if args.front == "all" else [args.front]
    failed = 0
    for front in fronts:
        for seed in seeds:
            book = run(front, seed, args.seconds)
            status = "FAILED" if book.problems else "ok"
            print(f"{front} {book.report()}: {status}", flush=True)
            for problem in book.problems:
                print(f"    {problem}")
            if book.problems:
                failed += 1
                print(f"    replay: python tests/support/stress.py --front {front} --seed {seed}")
    print(f"{failed} failing run(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
