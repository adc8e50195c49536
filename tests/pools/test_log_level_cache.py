"""The check-out fast paths skip the CMAP log by reading the ``poolkit.connection`` logger's own
cache of its levels (``logging.Logger._cache``, a CPython detail: ``poolkit.log._LEVELS``). If
CPython changed it, every checkout would either take the slow path for ever (the cache gone) or
miss a level change (a new dict in its place). These tests fail in either case: the cache is the
logger's, the fast path finds its answer there, and a level change is seen by the next checkout
of each front end, in each form a user writes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

import poolkit
from poolkit import log

CHECKED_OUT = "Connection checked out"


class Conn:
    def close(self) -> None:
        pass


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    chosen = logging.getLogger("poolkit.connection")
    level = chosen.level
    chosen.setLevel(logging.WARNING)
    try:
        yield chosen
    finally:
        chosen.setLevel(level)


def _checked_out(caplog: pytest.LogCaptureFixture) -> int:
    count = sum(CHECKED_OUT in record.getMessage() for record in caplog.records)
    caplog.clear()
    return count


def test_the_levels_read_are_the_loggers_own_cache(logger: logging.Logger) -> None:
    assert log._LEVELS is vars(logger)["_cache"]  # (the dict itself, not a copy)
    assert not logger.isEnabledFor(logging.DEBUG)
    assert log._cached_level(logging.DEBUG) is False  # (an answer the fast paths can use)
    logger.setLevel(logging.DEBUG)
    assert log._cached_level(logging.DEBUG) is None  # (emptied by logging, not replaced)
    assert logger.isEnabledFor(logging.DEBUG)
    assert log._cached_level(logging.DEBUG) is True


def test_a_level_change_is_seen_by_the_next_threaded_checkout(
    logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    logger.setLevel(logging.WARNING)
    with poolkit.Pool(lambda ctx: Conn(), options=poolkit.PoolOptions(max_size=2)) as pool:
        for _ in range(3):
            with pool.connection():
                pass
            pool.checkout().release()
        assert _checked_out(caplog) == 0
        assert log._cached_level(logging.DEBUG) is False  # (the fast path's answer, cached)
        logger.setLevel(logging.DEBUG)
        with pool.connection():
            pass
        assert _checked_out(caplog) == 1
        pool.checkout().release()
        assert _checked_out(caplog) == 1
        logger.setLevel(logging.WARNING)
        with pool.connection():
            pass
        pool.checkout().release()
        assert _checked_out(caplog) == 0


def test_a_level_change_is_seen_by_the_next_asyncio_checkout(
    logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    logger.setLevel(logging.WARNING)

    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        return Conn()

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=2)
        async with poolkit.AsyncPool(connect, options=options) as pool:
            for _ in range(3):
                async with pool.connection():
                    pass
                (await pool.checkout()).release()
            assert _checked_out(caplog) == 0
            assert log._cached_level(logging.DEBUG) is False
            logger.setLevel(logging.DEBUG)
            async with pool.connection():
                pass
            assert _checked_out(caplog) == 1
            (await pool.checkout()).release()
            assert _checked_out(caplog) == 1
            logger.setLevel(logging.WARNING)
            async with pool.connection():
                pass
            (await pool.checkout()).release()
            assert _checked_out(caplog) == 0

    asyncio.run(main())
