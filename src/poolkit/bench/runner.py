"""The parent process of ``poolkit bench``: starts the embedded server (if the target is
``sim://``), checks the target once, then for each run (one, or one per sweep value) spawns the
worker processes, adds up their reports, shows them, and collects the results.

Rules of this module
--------------------
* SIGINT sets a flag (:class:`Interrupt`), it never raises in the middle of a pipe read: the
  runner then asks every worker to stop, waits for their final reports (their pools closed) and
  returns what was measured, marked ``interrupted``. A second SIGINT gives up waiting.
* A worker that fails ends the run: the others are stopped and the failure is raised as
  :class:`BenchError` (one line).
* Nothing here prints: what is shown goes through the ``Sink``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any, Protocol, cast

from ..asyncio import AsyncPool
from ..threaded import Pool
from .config import RunConfig, Sweep
from .measure import Gauges, Tally, WorkerReport
from .observe import Observer, observer_for
from .report import BenchResult, PointResult, recommend
from .sim_process import SimProcess
from .targets import APPLICATION_NAME, Workload, hint, workload
from .timeline import Timeline
from .worker import TICK, pool_options, worker_main

__all__ = ["BenchError", "Interrupt", "Live", "QuietSink", "Sink", "run_bench"]


class BenchError(Exception):
    """The run cannot go on (unreachable target, bad credentials, a worker failed): the message
    is one line naming the problem."""


@dataclasses.dataclass(frozen=True, slots=True)
class Live:
    """What the display shows, each tick."""

    label: str
    config: RunConfig
    elapsed: float
    warming: bool
    measured: float
    tally: Tally
    gauges: Gauges
    throughput_now: float
    server_connections: int | None
    progress: float


class Sink(Protocol):
    def start_point(self, label: str, config: RunConfig) -> None: ...

    def update(self, live: Live) -> None: ...

    def end_point(self, label: str, point: PointResult) -> None: ...

    def close(self) -> None: ...


class QuietSink:
    """Shows nothing (``--json``)."""

    def start_point(self, label: str, config: RunConfig) -> None:
        pass

    def update(self, live: Live) -> None:
        pass

    def end_point(self, label: str, point: PointResult) -> None:
        pass

    def close(self) -> None:
        pass


class Interrupt:
    """SIGINT as a flag while a run is under way (see the module rules)."""

    def __init__(self) -> None:
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0

    @contextmanager
    def installed(self) -> Iterator[Interrupt]:
        def on_sigint(signum: int, frame: FrameType | None) -> None:
            self.count += 1
            if self.count > 2:
                raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def probe(config: RunConfig, target: Workload) -> None:
    """One connection and one operation through a pool of one, as the run will make them: a
    wrong address, password or option fails here, before any process is started."""
    options = dataclasses.replace(
        pool_options(config, target),
        max_size=1,
        min_size=0,
        wait_queue_timeout=config.connect_timeout + config.op_timeout,
    )
    try:
        if config.threads:
            pool = Pool(target.sync_connect(), address=target.address, options=options)
            with pool, pool.connection() as conn:
                target.sync_op(conn)
        else:

            async def once() -> None:
                connect = target.trio_connect() if config.trio else target.async_connect()
                async with (
                    AsyncPool(connect, address=target.address, options=options) as pool,
                    pool.connection() as conn,
                ):
                    await target.async_op(conn)

            if config.trio:
                import trio

                trio.run(once)
            else:
                asyncio.run(once())
    except Exception as exc:
        advice = hint(config, [type(exc).__name__])
        raise BenchError(
            f"cannot use {config.target.shown}: {_one_line(exc)}"
            + (f" ({advice})" if advice else "")
        ) from None


def run_bench(
    base: RunConfig, sweep: Sweep | None, sink: Sink, interrupt: Interrupt
) -> BenchResult:
    context = multiprocessing.get_context("spawn")
    sim: SimProcess | None = None
    observer: Observer | None = None
    points: list[PointResult] = []
    try:
        base = dataclasses.replace(base, app_name=f"{APPLICATION_NAME}-{os.getpid()}")
        if base.target.sim is not None:
            sim = SimProcess(base.target.sim, context)
            base = dataclasses.replace(
                base, target=dataclasses.replace(base.target, host="127.0.0.1", port=sim.port)
            )
        try:
            target = workload(base)
        except ImportError as exc:
            raise BenchError(_one_line(exc)) from None
        probe(base, target)
        observer = observer_for(base, sim)
        if observer is not None:
            observer.start()
        runs = (
            [(f"{sweep.param}={v}", base.with_value(sweep.param, v)) for v in sweep.values]
            if sweep is not None
            else [("run", base)]
        )
        for label, config in runs:
            if interrupt:
                break
            if config.min_size > config.max_size:
                config = dataclasses.replace(config, min_size=config.max_size)
            sink.start_point(label, config)
            origin = None if sim is None else sim.started_at
            point = _run_point(label, config, context, observer, sink, interrupt, origin)
            points.append(point)
            sink.end_point(label, point)
    finally:
        if observer is not None:
            observer.stop()
        if sim is not None:
            sim.stop()
    mode = "threads" if base.threads else "trio" if base.trio else "asyncio"
    driver = None
    if base.target.kind == "postgresql":
        driver = base.driver or ("psycopg" if base.threads else "asyncpg")
    return BenchResult(
        base,
        mode,
        driver,
        sweep,
        points,
        bool(interrupt),
        recommend(sweep.param, points, bool(interrupt)) if sweep is not None else None,
    )


def _run_point(
    label: str,
    config: RunConfig,
    context: Any,
    observer: Observer | None,
    sink: Sink,
    interrupt: Interrupt,
    origin: float | None = None,
) -> PointResult:
    """One run; ``origin``: the ``perf_counter`` its timeline counts from (the embedded
    server's start), else the moment the workers are told to go."""
    channels: list[Connection] = []
    processes = []
    for index in range(config.processes):
        parent, child = context.Pipe()
        process = context.Process(
            target=worker_main,
            args=(config, index, child),
            name=f"poolkit-bench-{index}",
            daemon=True,
        )
        process.start()
        child.close()
        channels.append(parent)
        processes.append(process)
    reports: dict[int, WorkerReport] = {}
    finals: set[int] = set()
    failure: str | None = None
    stopping = False
    ready: set[int] = set()
    started = time.perf_counter()
    recent: collections.deque[tuple[float, int]] = collections.deque()
    client_peak = 0
    server_now: int | None = None
    timeline: Timeline | None = None
    if observer is not None:
        observer.take_peak()
    try:
        live_channels = {ch: i for i, ch in enumerate(channels)}
        while live_channels:
            if (interrupt or failure) and not stopping:
                stopping = True
                for ch in live_channels:
                    _send(ch, "stop")
            if interrupt.count > 1:
                break
            for ready_one in wait(list(live_channels), TICK):
                ch = cast(Connection, ready_one)
                index = live_channels[ch]
                try:
                    kind, body = ch.recv()
                except (EOFError, OSError):
                    del live_channels[ch]
                    if index not in finals and failure is None:
                        failure = f"worker {index} ended without a report"
                    continue
                if kind == "ready":
                    ready.add(index)
                    if len(ready) == len(channels):
                        started = time.perf_counter()
                        timeline = Timeline(started if origin is None else origin, config.adaptive)
                        for other in channels:
                            _send(other, "stop" if stopping else "go")
                elif kind == "report":
                    reports[index] = body
                    if body.final:
                        finals.add(index)
                elif kind == "error":
                    failure = failure or body
            if reports:
                tally, gauges = _merge(reports)
                client_peak = max(client_peak, gauges.total)
                now = time.perf_counter()
                rate = _rate(recent, now, tally.ops)
                server_now = observer.latest if observer is not None else None
                warming = any(r.warming for r in reports.values())
                measured = max(r.measured for r in reports.values())
                if timeline is not None:
                    limits = tuple(reports[i].gauges.limit for i in sorted(reports))
                    timeline.sample(now, warming, tally, gauges, server_now, measured, limits)
                sink.update(
                    Live(
                        label,
                        config,
                        now - started,
                        warming,
                        measured,
                        tally,
                        gauges,
                        rate,
                        server_now,
                        _progress(config, now - started, tally),
                    )
                )
            if len(finals) == len(channels):
                break
    finally:
        for process in processes:
            process.join(config.op_timeout + 5.0)
            if process.is_alive():
                process.kill()
                process.join()
        for ch in channels:
            ch.close()
    if failure is not None and not interrupt:
        raise BenchError(failure)
    tally, gauges = _merge(reports)
    measured = max((r.measured for r in reports.values()), default=0.0)
    server_peak = observer.take_peak() if observer is not None else None
    server_left = observer.settled() if observer is not None else None
    return PointResult(
        max_size=config.max_size,
        min_size=config.min_size,
        max_connecting=config.max_connecting,
        concurrency=config.concurrency,
        processes=config.processes,
        seconds=measured,
        tally=tally,
        client_connections_peak=max(
            client_peak, max((r.gauges.peak_total for r in reports.values()), default=0)
        ),
        pool_peak=max((r.gauges.peak_total for r in reports.values()), default=0),
        server_connections_peak=server_peak,
        connections_created=gauges.created,
        left_open=sum(r.left_open for r in reports.values()),
        server_left_open=server_left,
        interrupted=bool(interrupt) or len(finals) < len(channels),
        adaptive=config.adaptive,
        timeline=() if timeline is None else tuple(timeline.points),
    )


def _rate(recent: collections.deque[tuple[float, int]], now: float, ops: int) -> float:
    """Operations per second over about the last second (``recent``: earlier samples)."""
    recent.append((now, ops))
    while len(recent) > 2 and now - recent[1][0] >= 1.0:
        recent.popleft()
    then, before = recent[0]
    return (ops - before) / (now - then) if now - then >= 0.1 else 0.0


def _send(channel: Connection, message: str) -> None:
    try:
        channel.send(message)
    except OSError:
        pass


def _merge(reports: dict[int, WorkerReport]) -> tuple[Tally, Gauges]:
    tally = Tally()
    gauges = Gauges()
    for report in reports.values():
        tally.merge(report.tally)
        gauges = gauges + report.gauges
    return tally, gauges


def _progress(config: RunConfig, elapsed: float, tally: Tally) -> float:
    if config.ops is not None:
        return min(1.0, (tally.ops + sum(tally.errors.values())) / config.ops)
    total = config.warmup + (config.duration or 0.0)
    return min(1.0, elapsed / total) if total > 0 else 1.0
