"""W8, the outage: the pools of a headline workload run through a
:class:`poolkit.testing.FaultProxy` in front of the server; after ``before`` seconds the proxy
resets every connection and refuses new ones for ``outage`` seconds, then the server is back for
``after`` seconds. A failed operation (checkout or query) is counted, and its worker pauses 10 ms.

Figures: ``failed_ops``; ``recovery_s``, from the server's return until the later of the first
operation that succeeded after it and the last one that failed; ``connects_after_return``
(connections the proxy accepted from the return to the end: a pool that opens what it needs makes
``size``); ``ops_per_s_before`` / ``ops_per_s_after`` (from the recovery to the end).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .core import AS_SHIPPED, Column, Contender, Env, Figures, Sizes, Workload
from .drive import AsyncBuild, Shape, SyncBuild, Tally, drive_async, drive_threads

pc = time.perf_counter
COLUMNS = (
    Column("recovery_s", "recovery s", 3),
    Column("failed_ops", "failed ops"),
    Column("connects_after_return", "connects after return"),
    Column("ops_per_s_before", "ops/s before"),
    Column("ops_per_s_after", "ops/s after"),
    Column("server_conns_peak", "server conns"),
)


def through(url: str, port: int) -> str:
    """``url`` (a DSN or a Redis URL) with its host and port replaced by 127.0.0.1:``port``."""
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def _target(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


@dataclasses.dataclass
class Marks:
    dropped: float = 0.0
    returned: float = 0.0
    accepted_at_return: int = 0


def _direct(proxy: Any, phases: tuple[float, float, float], marks: Marks) -> None:
    """On its own thread: wait, drop every connection and refuse, wait, listen again."""
    before, outage, _ = phases
    time.sleep(before)
    marks.dropped = pc()
    proxy.call(proxy.server.set_refusing, True)
    proxy.call(proxy.server.reset_all)
    time.sleep(outage)
    proxy.call(proxy.server.set_refusing, False)
    marks.returned = pc()
    marks.accepted_at_return = proxy.server.stats().connections_accepted


def outage_figures(tally: Tally, marks: Marks, start: float, end: float, accepted: int) -> Figures:
    timeline = sorted(tally.timeline or [])
    back = marks.returned
    first_ok = next((t for t, ok in timeline if ok and t >= back), end)
    last_error = max((t for t, ok in timeline if not ok and t >= back), default=back)
    recovered = max(first_ok, last_error)
    before = sum(1 for t, ok in timeline if ok and t < marks.dropped)
    after = sum(1 for t, ok in timeline if ok and t > recovered)
    return {
        "failed_ops": float(tally.errors),
        "recovery_s": recovered - back,
        "first_ok_s": first_ok - back,
        "last_error_s": last_error - back,
        "connects_after_return": float(accepted - marks.accepted_at_return),
        "ops_per_s_before": before / (marks.dropped - start) if marks.dropped > start else 0.0,
        "ops_per_s_after": after / (end - recovered) if end > recovered else 0.0,
    }


def outage_run(
    build: AsyncBuild | SyncBuild, shape: Shape, server: str, asynchronous: bool
) -> Callable[[Env], Figures]:
    """A contender's W8 run: its headline builder, through a fresh proxy."""

    def run(env: Env) -> Figures:
        from poolkit.testing import FaultProxy

        url = env.dsn if server == "pg" else env.redis_url
        host, port = _target(url, 5432 if server == "pg" else 6379)
        proxy = FaultProxy(host, port).start_in_thread()
        try:
            proxied = through(url, proxy.port)
            if server == "pg":
                env = dataclasses.replace(env, dsn=proxied)
            else:
                env = dataclasses.replace(env, redis_url=proxied)
            if asynchronous:
                return asyncio.run(_measure_async(build, shape, env, proxy))  # type: ignore[arg-type]
            return _measure_threads(build, shape, env, proxy)  # type: ignore[arg-type]
        finally:
            proxy.stop()

    return run


async def _measure_async(build: AsyncBuild, shape: Shape, env: Env, proxy: Any) -> Figures:
    phases = env.sizes.w8_phases
    waits: list[float] = []
    async with build(env, waits.append, shape) as one:
        await drive_async(one, shape.workers, env.sizes.warmup)
        marks = Marks()
        director = threading.Thread(target=_direct, args=(proxy, phases, marks), daemon=True)
        start = pc()
        director.start()
        tally = await drive_async(one, shape.workers, sum(phases), tolerate=True, timeline=True)
        end = pc()
        await asyncio.get_running_loop().run_in_executor(None, director.join)
        accepted = proxy.server.stats().connections_accepted
    return outage_figures(tally, marks, start, end, accepted)


def _measure_threads(build: SyncBuild, shape: Shape, env: Env, proxy: Any) -> Figures:
    phases = env.sizes.w8_phases
    waits: list[float] = []
    with build(env, waits.append, shape) as one:
        drive_threads(one, shape.workers, env.sizes.warmup)
        marks = Marks()
        director = threading.Thread(target=_direct, args=(proxy, phases, marks), daemon=True)
        start = pc()
        director.start()
        tally = drive_threads(one, shape.workers, sum(phases), tolerate=True, timeline=True)
        end = pc()
        director.join()
        accepted = proxy.server.stats().connections_accepted
    return outage_figures(tally, marks, start, end, accepted)


Entry = tuple[str, Any, AsyncBuild | SyncBuild, tuple[str, ...]]  # name, role, builder, needs


def _workload(key: str, title: str, server: str, reference: str, shape: Shape,
              asynchronous: bool, entries: list[Entry], sizes: Sizes) -> Workload:  # fmt: skip
    before, outage, after = sizes.w8_phases
    return Workload(
        key=key,
        group="W8",
        title=f"outage: {title}",
        metric="recovery_s",
        higher=False,
        reference=f"{reference} ({AS_SHIPPED})",
        server="pg" if server == "pg" else "redis",
        columns=COLUMNS,
        note=f"Through FaultProxy: {before:g} s, then every connection reset and new ones "
        f"refused for {outage:g} s, then {after:g} s with the server back.",
        contenders=tuple(
            Contender(name, role, AS_SHIPPED, outage_run(build, shape, server, asynchronous), needs)
            for name, role, build, needs in entries
        ),
    )


def w8_workloads(sizes: Sizes) -> list[Workload]:
    """W8 on the headline workloads: poolkit, the driver's pool, SQLAlchemy's, as shipped."""
    from . import pg_rows as pg
    from . import redis_rows as rd

    ap, sa = ("asyncpg",), ("sqlalchemy", "greenlet")
    ps, pp = ("psycopg",), ("psycopg", "psycopg_pool")
    return [
        _workload("W8-asyncpg", "50 tasks, pool 10, SELECT 1, asyncpg", "pg",
                  "asyncpg.create_pool", Shape(50, 10), True, [
                      ("poolkit.backends.asyncpg", "poolkit", pg.poolkit_asyncpg, ap),
                      ("asyncpg.create_pool", "peer", pg.asyncpg_pool, ap),
                      ("SQLAlchemy AsyncAdaptedQueuePool", "peer",
                       pg.sqlalchemy_async("asyncpg", False), ap + sa),
                  ], sizes),
        _workload("W8-psycopg-async", "50 tasks, pool 10, SELECT 1, psycopg async", "pg",
                  "psycopg_pool.AsyncConnectionPool", Shape(50, 10), True, [
                      ("poolkit.backends.psycopg.create_async_pool", "poolkit",
                       pg.poolkit_psycopg_async(True), ps),
                      ("psycopg_pool.AsyncConnectionPool", "peer",
                       pg.psycopg_pool_async(False), pp),
                  ], sizes),
        _workload("W8-psycopg", "16 threads, pool 8, SELECT 1, psycopg", "pg",
                  "psycopg_pool.ConnectionPool", Shape(16, 8), False, [
                      ("poolkit.backends.psycopg.create_pool", "poolkit",
                       pg.poolkit_psycopg(True), ps),
                      ("psycopg_pool.ConnectionPool", "peer", pg.psycopg_pool_threads(False), pp),
                      ("SQLAlchemy QueuePool", "peer", pg.sqlalchemy_threads(False), ps + sa[:1]),
                  ], sizes),
        _workload("W8-redis", "32 threads, 8 connections, GET, redis-py", "redis",
                  rd.REDIS_PY, Shape(32, 8), False, [
                      (rd.DROP_IN, "poolkit", rd.shared_client("poolkit"), ("redis",)),
                      ("poolkit.backends.redis.create_pool", "poolkit", rd.poolkit_clients,
                       ("redis",)),
                      (rd.REDIS_PY, "peer", rd.shared_client("redis-py"), ("redis",)),
                  ], sizes),
    ]  # fmt: skip
