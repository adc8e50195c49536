"""``PoolOptions.idle_order``: which available connection a checkout takes, on each of the core's
ways to take one (the fast ``lease_idle``, a request, the caller's check ``lease_checking``, and
the full check a clocked pool makes), and through both front ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from poolkit import AsyncPool, Hooks, Pool, PoolOptions
from poolkit._core import Conn, PoolCore, Request, RequestState, StartConnect


def _core(order: str, *, n: int = 3, **options: Any) -> tuple[PoolCore, list[Conn]]:
    """A ready core with ``n`` connections, leased then given back in order at times 1, 2, 3..."""
    core = PoolCore(
        PoolOptions(
            max_size=n,
            min_size=n,
            max_connecting=n,
            idle_order=order,  # type: ignore[arg-type]  # (the str a user's config gives)
            background_interval=float("inf"),
            connect_timeout=None,
            **options,
        ),
        "db:5432",
    )
    core.ready(0.0)
    made = [a.conn for a in core.take()[0] if isinstance(a, StartConnect)]
    assert len(made) == n
    for conn in made:
        core.connected(conn, 0.0, f"c{conn.id}")
    core.take()
    out = []
    for _ in made:
        req = Request(started=0.0, deadline=None)
        core.fast.request(req, 0.0)
        assert req.state is RequestState.SERVED and req.conn is not None
        out.append(req.conn)
    for t, conn in enumerate(out, 1):
        core.release(conn, float(t))
    core.take()
    return core, out


def _ids(conns: list[Conn | None]) -> list[int]:
    return [c.id for c in conns if c is not None]


@pytest.mark.parametrize(("order", "expected"), [("lifo", [2, 1, 0]), ("fifo", [0, 1, 2])])
def test_the_fast_path_takes_by_the_order(order: str, expected: list[int]) -> None:
    core, given = _core(order)
    taken = [core.fast.lease_idle(4.0) for _ in given]
    assert _ids(taken) == _ids([given[i] for i in expected])


@pytest.mark.parametrize("order", ["lifo", "fifo"])
def test_either_order_leases_on_the_fast_path(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # an unclocked pool's fast path leases without the full check, in either order (FIFO is
    # SQLAlchemy's QueuePool's and psycopg_pool's order: their drop-ins run on it)
    core, given = _core(order)

    def full_check(self: Any, now: float) -> Conn | None:
        raise AssertionError(f"lease_idle took the full check with idle_order={order!r}")

    monkeypatch.setattr(type(core.fast), "_take", full_check)
    assert len(_ids([core.fast.lease_idle(4.0) for _ in given])) == len(given)


@pytest.mark.parametrize(("order", "expected"), [("lifo", [2, 1, 0]), ("fifo", [0, 1, 2])])
def test_a_request_takes_by_the_order(order: str, expected: list[int]) -> None:
    core, given = _core(order)
    taken = []
    for _ in given:
        req = Request(started=4.0, deadline=None)
        core.fast.request(req, 4.0)
        taken.append(req.conn)
    assert _ids(taken) == _ids([given[i] for i in expected])


@pytest.mark.parametrize(("order", "expected"), [("lifo", [2, 1, 0]), ("fifo", [0, 1, 2])])
def test_a_clocked_pool_puts_back_and_takes_by_the_order(order: str, expected: list[int]) -> None:
    # max_idle_time makes the pool clocked: ``lease_idle``'s quick gate never matches, so it puts
    # the connection it popped back where it was and the full check takes one
    core, given = _core(order, max_idle_time=100.0)
    taken = [core.fast.lease_idle(4.0) for _ in given]
    assert _ids(taken) == _ids([given[i] for i in expected])


def _never(connection: Any) -> None:  # pragma: no cover - the core only asks for checks
    raise AssertionError("never called")


@pytest.mark.parametrize(("order", "expected"), [("lifo", [2, 1, 0]), ("fifo", [0, 1, 2])])
def test_a_check_in_the_caller_takes_by_the_order(order: str, expected: list[int]) -> None:
    core, given = _core(order, hooks=Hooks(check=_never, check_after=1000.0))
    taken = [core.lease_checking(4.0) for _ in given]
    assert _ids(taken) == _ids([given[i] for i in expected])


def test_the_order_is_validated() -> None:
    with pytest.raises(ValueError, match=r'PoolOptions\.idle_order must be "lifo" or "fifo"'):
        PoolOptions(idle_order="random")  # type: ignore[arg-type]


class _Session:
    def close(self) -> None:
        pass


def test_a_fifo_pool_uses_its_connections_in_turn_threads() -> None:
    made: list[_Session] = []

    def connect(ctx: Any) -> _Session:
        made.append(_Session())
        return made[-1]

    with Pool(connect, options=PoolOptions(max_size=3, min_size=3, idle_order="fifo")) as pool:
        seen = []
        with pool.connection(), pool.connection(), pool.connection():
            pass  # (three made, given back in turn)
        for _ in range(6):
            with pool.connection() as conn:
                seen.append(made.index(conn))
    assert sorted(seen[:3]) == [0, 1, 2] and seen[3:] == seen[:3]


def test_a_fifo_pool_uses_its_connections_in_turn_asyncio() -> None:
    made: list[_Session] = []

    async def connect(ctx: Any) -> _Session:
        made.append(_Session())
        return made[-1]

    async def main() -> list[int]:
        options = PoolOptions(max_size=3, min_size=3, idle_order="fifo")
        async with AsyncPool(connect, options=options) as pool:
            seen = []
            async with pool.connection(), pool.connection(), pool.connection():
                pass  # (three made, given back in turn)
            for _ in range(6):
                async with pool.connection() as conn:
                    seen.append(made.index(conn))
            return seen

    seen = asyncio.run(main())
    assert sorted(seen[:3]) == [0, 1, 2] and seen[3:] == seen[:3]
