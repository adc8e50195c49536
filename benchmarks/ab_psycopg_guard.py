"""The psycopg backend's guard on a connection kept past its block (``Hooks.lend``), A/B in one
``peers.py`` run: H2 (asyncio) and H3 (threads) with poolkit as shipped (guard on), poolkit with
``lend=None`` (guard off), psycopg_pool as shipped and the floor, the rounds interleaved by
peers.py's runner. The "x reference" column of the two poolkit rows says what the guard costs.

    python benchmarks/ab_psycopg_guard.py --rounds 7      (peers.py's options)
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # (run as a script from anywhere)
import peers
from peerbench import pg_rows
from peerbench.core import AS_SHIPPED, Contender, Env, Workload
from peerbench.drive import (
    AsyncBuild,
    AsyncOne,
    Record,
    Shape,
    SyncBuild,
    SyncOne,
    async_contention,
    thread_contention,
)
from poolkit.backends import psycopg as pk

OFF = "guard off (lend=None)"


@contextmanager
def _no_lend() -> Iterator[None]:
    """Pools made inside have no ``lend`` hook (the builders read the module's ``lend``)."""
    saved = pk.lend
    setattr(pk, "lend", None)  # noqa: B010  # (a function's name bound to None for a while)
    try:
        yield
    finally:
        setattr(pk, "lend", saved)  # noqa: B010


def _off_threads(build: SyncBuild) -> SyncBuild:
    @contextmanager
    def built(env: Env, record: Record, shape: Shape) -> Iterator[SyncOne]:
        with _no_lend():
            made = build(env, record, shape)
            one = made.__enter__()
        try:
            yield one
        finally:
            made.__exit__(None, None, None)

    return built


def _off_async(build: AsyncBuild) -> AsyncBuild:
    @asynccontextmanager
    async def built(env: Env, record: Record, shape: Shape) -> AsyncIterator[AsyncOne]:
        with _no_lend():
            made = build(env, record, shape)
            one = await made.__aenter__()
        try:
            yield one
        finally:
            await made.__aexit__(None, None, None)

    return built


def _trimmed(workload: Workload, off: Contender) -> Workload:
    """poolkit as shipped, then ``off``, psycopg_pool as shipped and the floor."""
    kept = [
        c
        for c in workload.contenders
        if (
            (c.role in ("poolkit", "peer") and c.variant == AS_SHIPPED)
            and (c.role == "poolkit" or c.name.startswith("psycopg_pool"))
        )
        or c.role == "floor"
    ]
    return dataclasses.replace(workload, contenders=(kept[0], off, *kept[1:]))


def workloads(sizes: object) -> list[Workload]:
    h2, h3 = pg_rows.psycopg_async_workload(), pg_rows.psycopg_threads_workload()
    s2, s3 = Shape(50, 10), Shape(16, 8)
    name2, name3 = h2.contenders[0].name, h3.contenders[0].name
    off2 = Contender(
        name2,
        "poolkit",
        OFF,
        async_contention(_off_async(pg_rows.poolkit_psycopg_async(True)), s2),
        ("psycopg",),
        note="as shipped, Hooks.lend=None",
    )
    off3 = Contender(
        name3,
        "poolkit",
        OFF,
        thread_contention(_off_threads(pg_rows.poolkit_psycopg(True)), s3),
        ("psycopg",),
        note="as shipped, Hooks.lend=None",
    )
    return [_trimmed(h2, off2), _trimmed(h3, off3)]


if __name__ == "__main__":
    peers.workloads = workloads  # (peers.main runs these)
    sys.exit(peers.main(sys.argv[1:]))
