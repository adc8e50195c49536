"""The simulated server (poolkit.testing.sim): each setting does what it says, over real sockets
on 127.0.0.1, and poolkit's pools run through it. Timings are asserted with generous margins."""

from __future__ import annotations

import asyncio
import functools
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import poolkit
from poolkit.testing.sim import (
    SimConnection,
    SimGoingAwayError,
    SimRefusedError,
    SimServer,
    SimSettings,
    SimSocketConnection,
    sim_async_connect,
    sim_check,
    sim_connect,
    sim_is_broken,
)
from poolkit.testing.sim.protocol import FrameType, encode, parse_header
from poolkit.testing.sim.settings import draw_service_time

HOST = "127.0.0.1"


def run(settings: SimSettings, body: Callable[[SimServer], Awaitable[None]]) -> None:
    async def main() -> None:
        async with SimServer(settings) as server:
            await body(server)

    asyncio.run(main())


def run_on_virtual_time(
    settings: SimSettings, body: Callable[[SimServer], Awaitable[None]]
) -> None:
    """``run`` on ``poolkit.testing``'s virtual-time loop: the server's service times, windows
    and stalls (all on ``loop.time()``) are exact, whatever the machine's speed."""
    from poolkit.testing.loop import run as run_virtual

    async def main() -> None:
        async with SimServer(settings) as server:
            await body(server)

    run_virtual(main())


def going_away(conn: SimConnection) -> bool:
    return conn.going_away or conn.closed


async def wait_for(predicate: Callable[[], bool], timeout: float = 1.5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_binds_localhost_only_and_checks_settings() -> None:
    for host in ("0.0.0.0", "localhost", "::1", "10.0.0.1"):
        with pytest.raises(ValueError, match=r"127\.0\.0\.1 only"):
            SimServer(host=host)
    for bad in (
        {"service_time": -1.0},
        {"service_time": ("normal", 1.0)},
        {"service_time": ("uniform", 2.0, 1.0)},
        {"max_connections": 0},
        {"concurrency": 0},
        {"max_streams": 0},
        {"drop_request_fraction": 1.5},
        {"stall_windows": ((0.0,),)},
    ):
        with pytest.raises(ValueError, match="SimSettings"):
            SimSettings(**bad)


@pytest.mark.timing
def test_echo_and_handshake_latency() -> None:
    async def body(server: SimServer) -> None:
        assert server.address == f"{HOST}:{server.port}"
        start = time.monotonic()
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        took = time.monotonic() - start
        assert 0.19 <= took < 1.5
        assert conn.max_streams == 1
        assert await conn.request(b"hello") == b"hello"
        assert await conn.request(b"") == b""
        await conn.aclose()
        with pytest.raises(TimeoutError):
            await SimConnection.connect(HOST, server.port, timeout=0.05)

    run(SimSettings(handshake_latency=0.2), body)


@pytest.mark.timing
def test_fixed_service_time() -> None:
    async def body(server: SimServer) -> None:
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        for _ in range(3):
            start = time.monotonic()
            assert await conn.request(b"x") == b"x"
            assert 0.095 <= time.monotonic() - start < 1.0
        await conn.aclose()
        assert server.stats().requests_served == 3

    run(SimSettings(service_time=0.1), body)


@pytest.mark.parametrize(
    ("spec", "mean", "low"),
    [(("exp", 0.01), 0.01, 0.0), (("uniform", 0.01, 0.02), 0.015, 0.0095)],
)
def test_service_time_distribution(spec: tuple[str, float], mean: float, low: float) -> None:
    """On virtual time (the times the server draws, not how soon a loaded machine runs it)."""

    async def body(server: SimServer) -> None:
        conns = [await SimConnection.connect(HOST, server.port, timeout=5) for _ in range(8)]
        times: list[float] = []
        loop = asyncio.get_running_loop()

        async def work(conn: SimConnection) -> None:
            for _ in range(25):
                start = loop.time()
                await conn.request(b"x")
                times.append(loop.time() - start)

        await asyncio.gather(*(work(c) for c in conns))
        assert len(times) == 200
        assert min(times) >= low
        measured = sum(times) / len(times)
        assert 0.75 * mean < measured < 1.5 * mean + 0.005, measured
        for conn in conns:
            await conn.aclose()

    run_on_virtual_time(SimSettings(service_time=spec, seed=7), body)


def test_distributions_are_seeded() -> None:
    import random

    for spec in (("exp", 0.01), ("uniform", 0.0, 1.0)):
        a = [draw_service_time(spec, random.Random(3)) for _ in range(5)]
        b = [draw_service_time(spec, random.Random(3)) for _ in range(5)]
        assert a == b


def test_max_connections_refuses_the_extra_connection() -> None:
    async def body(server: SimServer) -> None:
        first = await SimConnection.connect(HOST, server.port, timeout=5)
        second = await SimConnection.connect(HOST, server.port, timeout=5)
        with pytest.raises(SimRefusedError, match=r"too many connections \(max_connections=2\)"):
            await SimConnection.connect(HOST, server.port, timeout=5)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.to_thread(SimSocketConnection.connect, HOST, server.port, 5)
        stats = server.stats()
        assert (stats.connections_open, stats.connections_peak, stats.connections_refused) == (
            2,
            2,
            2,
        )
        await first.aclose()
        await wait_for(lambda: server.stats().connections_open == 1)
        third = await SimConnection.connect(HOST, server.port, timeout=5)
        assert await third.request(b"ok") == b"ok"
        await second.aclose()
        await third.aclose()

    run(SimSettings(max_connections=2), body)


@pytest.mark.timing
def test_concurrency_limit_queues_requests_fifo() -> None:
    n = 4

    async def body(server: SimServer) -> None:
        conns = [await SimConnection.connect(HOST, server.port, timeout=5) for _ in range(2 * n)]
        done: list[int] = []

        async def one(i: int) -> None:
            await asyncio.sleep(0.002 * i)  # (arrive in order)
            assert await conns[i].request(b"%d" % i) == b"%d" % i
            done.append(i)

        start = time.monotonic()
        work = asyncio.gather(*(one(i) for i in range(2 * n)))
        await wait_for(lambda: server.stats().in_service + server.stats().queued == 2 * n)
        stats = server.stats()
        assert (stats.in_service, stats.queued) == (n, n)
        await work
        took = time.monotonic() - start
        assert 0.095 <= took < 0.6, took  # two rounds of 50 ms, not one
        assert server.stats().peak_in_service == n
        assert sorted(done[:n]) == list(range(n))  # the first to come were served first
        for conn in conns:
            await conn.aclose()

    run(SimSettings(service_time=0.05, concurrency=n), body)


def test_drop_request_fraction() -> None:
    async def body(server: SimServer) -> None:
        dropped = 0
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        for i in range(200):
            try:
                assert await conn.request(b"%d" % i, timeout=5) == b"%d" % i
            except ConnectionError:
                dropped += 1
                await conn.aclose()
                conn = await SimConnection.connect(HOST, server.port, timeout=5)
        await conn.aclose()
        assert 30 <= dropped <= 90, dropped
        stats = server.stats()
        assert stats.requests_dropped == dropped
        assert stats.requests_served == 200 - dropped

    run(SimSettings(drop_request_fraction=0.3, seed=1), body)


def test_drop_connection_fraction() -> None:
    async def body(server: SimServer) -> None:
        dropped = 0
        for _ in range(60):
            conn = await SimConnection.connect(HOST, server.port, timeout=5)  # (always succeeds)
            try:
                for _ in range(2):
                    await conn.request(b"x", timeout=5)
            except ConnectionResetError:
                dropped += 1
            await conn.aclose()
        assert 15 <= dropped <= 45, dropped
        assert server.stats().connections_dropped == dropped

    run(SimSettings(drop_connection_fraction=0.5, seed=2), body)


@pytest.mark.timing
def test_stall_window_and_stall_at_run_time() -> None:
    async def body(server: SimServer) -> None:
        start = time.monotonic()
        conn = await SimConnection.connect(HOST, server.port, timeout=5)  # (greeting waits)
        assert time.monotonic() - start >= 0.25
        start = time.monotonic()
        assert await conn.request(b"a") == b"a"
        assert time.monotonic() - start < 0.2
        server.stall(0.3)
        with pytest.raises(TimeoutError):
            await conn.request(b"b", timeout=0.1)
        start = time.monotonic()
        assert await conn.request(b"c", timeout=5) == b"c"  # (answered when the stall ends)
        assert 0.1 <= time.monotonic() - start < 1.0
        await conn.aclose()

    run(SimSettings(stall_windows=((0.0, 0.3),)), body)


def test_refuse_window_and_refuse_at_run_time() -> None:
    """On virtual time: each connect is made inside (or after) its window, however loaded the
    machine."""

    async def body(server: SimServer) -> None:
        with pytest.raises(SimRefusedError, match="not accepting new connections"):
            await SimConnection.connect(HOST, server.port, timeout=5)
        await asyncio.sleep(0.3)
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        server.refuse_new(0.2)
        with pytest.raises(SimRefusedError, match="not accepting new connections"):
            await SimConnection.connect(HOST, server.port, timeout=5)
        assert await conn.request(b"still served") == b"still served"
        await asyncio.sleep(0.25)
        again = await SimConnection.connect(HOST, server.port, timeout=5)
        assert server.stats().connections_refused == 2
        await conn.aclose()
        await again.aclose()

    run_on_virtual_time(SimSettings(refuse_windows=((0.0, 0.2),)), body)


def test_goaway_reaches_the_client_which_finishes_in_flight_requests() -> None:
    async def body(server: SimServer) -> None:
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        seen: list[str] = []
        conn.on_goaway = lambda _c, reason: seen.append(reason)
        pending = asyncio.ensure_future(conn.request(b"in flight"))
        await wait_for(lambda: server.stats().in_service == 1)
        server.goaway("maintenance")
        await wait_for(lambda: conn.going_away)
        assert seen == ["maintenance"] and conn.goaway_reason == "maintenance"
        with pytest.raises(SimGoingAwayError):
            await conn.request(b"new")
        assert await pending == b"in flight"
        await wait_for(lambda: conn.closed)  # the server closed it after the last answer
        assert server.stats().goaways_sent == 1
        await conn.aclose()

    run(SimSettings(service_time=0.1), body)


def test_goaway_after_requests_closes_the_connection_in_an_async_pool() -> None:
    async def body(server: SimServer) -> None:
        options = poolkit.PoolOptions(max_size=1)
        async with poolkit.AsyncPool(sim_async_connect(HOST, server.port), options=options) as pool:
            ids = []
            for i in range(6):
                async with pool.connection() as conn:
                    assert await conn.request(b"%d" % i) == b"%d" % i
                    ids.append(id(conn))
                if i % 3 == 2:  # (its 3rd request: the GOAWAY arrives, however long it takes)
                    await wait_for(functools.partial(going_away, conn), timeout=10)
            assert len(set(ids)) == 2  # a new connection after the 3rd request
            assert server.stats().goaways_sent >= 1
            assert pool.stats().connections_created == 2
        await wait_for(lambda: server.stats().connections_open == 0)

    run(SimSettings(goaway_after_requests=3), body)


@pytest.mark.timing
def test_multiplexing_and_a_stream_limit_change() -> None:
    async def body(server: SimServer) -> None:
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        assert conn.max_streams == 4
        start = time.monotonic()
        answers = await asyncio.gather(*(conn.request(b"%d" % i) for i in range(4)))
        assert answers == [b"%d" % i for i in range(4)]
        assert time.monotonic() - start < 0.35  # four at once on one connection, not 0.4 s
        assert server.stats().peak_in_service == 4
        limits: list[int] = []
        conn.on_settings = lambda _c, n: limits.append(n)
        server.set_max_streams(2)
        await wait_for(lambda: conn.max_streams == 2)
        assert limits == [2]
        start = time.monotonic()
        work = asyncio.gather(*(conn.request(b"%d" % i) for i in range(4)))
        await wait_for(lambda: conn.in_flight == 2)
        await asyncio.sleep(0.02)
        assert conn.in_flight == 2  # (the client keeps to the new limit)
        assert await work == [b"%d" % i for i in range(4)]
        assert 0.19 <= time.monotonic() - start < 0.8  # two rounds
        assert server.stats().streams_refused == 0
        await conn.aclose()

    run(SimSettings(service_time=0.1, max_streams=4), body)


def test_async_pool_runs_200_requests_multiplexed() -> None:
    async def body(server: SimServer) -> None:
        options = poolkit.PoolOptions(max_size=4, wait_queue_timeout=10)
        async with poolkit.AsyncPool(sim_async_connect(HOST, server.port), options=options) as pool:

            async def work(n: int) -> list[bytes]:
                out = []
                for i in range(10):
                    async with pool.connection() as conn:
                        out.append(await conn.request(b"%d:%d" % (n, i)))
                return out

            results = await asyncio.gather(*(work(n) for n in range(20)))
            assert results == [[b"%d:%d" % (n, i) for i in range(10)] for n in range(20)]
            assert server.stats().requests_served == 200
            assert pool.stats().connections_created <= 4
            server.set_max_streams(1)  # (SETTINGS reaches the pool: set_max_streams)
            await asyncio.sleep(0.05)
            async with pool.connection() as conn:
                assert await conn.request(b"after") == b"after"

    run(SimSettings(service_time=0.001, max_streams=8), body)


def test_threaded_pool_runs_200_requests_on_a_server_thread() -> None:
    with SimServer(SimSettings(service_time=0.001, concurrency=4)).start_in_thread() as handle:
        options = poolkit.PoolOptions(max_size=4, wait_queue_timeout=10)
        with poolkit.Pool(sim_connect(HOST, handle.port), options=options) as pool:
            results: dict[int, list[bytes]] = {}

            def work(n: int) -> None:
                out = []
                for i in range(25):
                    with pool.connection() as conn:
                        out.append(conn.request(b"%d:%d" % (n, i), timeout=5))
                results[n] = out

            threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            assert results == {n: [b"%d:%d" % (n, i) for i in range(25)] for n in range(8)}
        stats = handle.call(handle.server.stats)
        assert stats.requests_served == 200 and stats.peak_in_service <= 4
        handle.call(handle.server.goaway)
    assert handle.server.stats().connections_open == 0


def test_the_server_refuses_streams_over_its_limit() -> None:
    async def body(server: SimServer) -> None:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        frames = []

        async def frame() -> tuple[FrameType, int, bytes]:
            kind, stream_id, length = parse_header(await reader.readexactly(9))
            return kind, stream_id, await reader.readexactly(length)

        assert await frame() == (FrameType.HELLO, 0, b"\0\0\0\1")
        writer.write(encode(FrameType.REQUEST, 1, b"a") + encode(FrameType.REQUEST, 2, b"b"))
        frames = [await frame(), await frame()]
        assert (FrameType.STREAM_REFUSED, 2, b"over the stream limit of 1") in frames
        assert (FrameType.RESPONSE, 1, b"a") in frames
        assert server.stats().streams_refused == 1
        writer.write(encode(FrameType.RESPONSE, 3, b"not a request"))  # (out of turn: closed)
        assert await reader.read() == b""
        writer.close()

    run(SimSettings(service_time=0.05), body)


def test_blocking_client_reads_goaway_and_settings_while_idle() -> None:
    with SimServer(SimSettings(max_streams=2)).start_in_thread() as handle:
        conn = SimSocketConnection.connect(HOST, handle.port, timeout=5)
        assert conn.max_streams == 2 and conn.request(b"x", timeout=5) == b"x"
        handle.call(handle.server.set_max_streams, 3)
        handle.call(handle.server.goaway, "bye")
        deadline = time.monotonic() + 2
        while not conn.going_away and time.monotonic() < deadline:
            conn.poll()
            time.sleep(0.01)
        assert (conn.max_streams, conn.goaway_reason) == (3, "bye")
        with pytest.raises(SimGoingAwayError):
            conn.request(b"y")
        with pytest.raises(SimGoingAwayError):
            sim_check(conn)
        conn.close()


def test_threaded_pool_replaces_connections_that_go_away() -> None:
    settings = SimSettings(goaway_after_requests=3)
    with SimServer(settings).start_in_thread() as handle:
        hooks = poolkit.Hooks(check=sim_check, is_broken=sim_is_broken)
        options = poolkit.PoolOptions(max_size=1, hooks=hooks)
        with poolkit.Pool(sim_connect(HOST, handle.port), options=options) as pool:
            for i in range(9):
                with pool.connection() as conn:
                    assert conn.request(b"%d" % i, timeout=5) == b"%d" % i
                # (the GOAWAY sent, on 127.0.0.1 it is there to read: however long it takes)
                sent = (i + 1) // 3
                deadline = time.monotonic() + 10
                while handle.call(handle.server.stats).goaways_sent < sent:
                    assert time.monotonic() < deadline, "no GOAWAY"
                    time.sleep(0.005)
            assert pool.stats().connections_created == 3
        assert handle.call(handle.server.stats).goaways_sent == 3


def test_readme_example_runs() -> None:
    text = (Path(__file__).parents[2] / "README.md").read_text()
    start = text.index("\n## Testing your code with poolkit")
    section = text[start : text.index("\n## ", start + 1)]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    out = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert "requests_served=100" in out.stdout


def test_stream_limit_reaches_an_async_pool() -> None:
    async def body(server: SimServer) -> None:
        options = poolkit.PoolOptions(max_size=1)
        async with poolkit.AsyncPool(sim_async_connect(HOST, server.port), options=options) as pool:
            leases = [await pool.checkout(timeout=5) for _ in range(4)]  # one connection, 4 leases
            assert len({lease.connection_id for lease in leases}) == 1
            assert pool.stats().stream_capacity == 4
            answers = await asyncio.gather(*(lease.connection.request(b"m") for lease in leases))
            assert answers == [b"m"] * 4
            server.set_max_streams(2)  # (SETTINGS: the pool's set_max_streams)
            await wait_for(lambda: pool.stats().stream_capacity == 2)
            for lease in leases:
                await pool.checkin(lease)
            two = [await pool.checkout(timeout=5) for _ in range(2)]
            with pytest.raises(poolkit.WaitQueueTimeoutError):
                await pool.checkout(timeout=0.05)
            for lease in two:
                await pool.checkin(lease)
            server.goaway("drain")  # (GOAWAY: the pool's connection_will_close)
            await wait_for(lambda: pool.stats().total == 0)
            async with pool.connection() as conn:
                assert await conn.request(b"new") == b"new"
            assert pool.stats().connections_created == 2

    run(SimSettings(max_streams=4), body)


# ---------------------------------------------------------------------------------------------
# run-time changes (issue 28, point 3): cores, service time and failures change as a run goes on


def test_the_cores_change_without_disturbing_what_is_booked() -> None:
    from poolkit.testing.sim.server import _Cores

    cores = _Cores(4)
    ends = [cores.book(0.0, service) for service in (1.0, 2.0, 3.0, 4.0)]
    assert ends == [1.0, 2.0, 3.0, 4.0]
    cores.set_limit(2)  # the next request starts when only one of the four is left in service
    assert cores.book(0.0, 1.0) == 4.0  # (starts at 3.0, when the third ends)
    cores.set_limit(4)  # more cores: the next ones start at once while one is free
    assert cores.book(0.0, 1.0) == 1.0
    assert cores.book(0.0, 1.0) == 1.0


def test_a_schedule_changes_cores_and_service_time_at_its_times() -> None:
    """On virtual time (``poolkit.testing.loop``): 4 requests at once on 1 core take 1 s each,
    one after another; from t=10 the server has 2 cores and from t=20 takes 0.5 s a request."""
    from poolkit.testing.loop import run as run_virtual
    from poolkit.testing.sim import SimChange

    settings = SimSettings(
        service_time=1.0,
        concurrency=1,
        schedule=(SimChange(at=10.0, concurrency=2), SimChange(at=20.0, service_time=0.5)),
    )

    async def burst(server: SimServer, conns: list[SimConnection], at: float) -> list[float]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(at - loop.time())
        start = loop.time()
        ends: list[float] = []

        async def one(conn: SimConnection) -> None:
            await conn.request(b"x")
            ends.append(round(loop.time() - start, 3))

        await asyncio.gather(*(one(conn) for conn in conns))
        return sorted(ends)

    async def main() -> None:
        async with SimServer(settings) as server:
            conns = [await SimConnection.connect(HOST, server.port, timeout=5) for _ in range(4)]
            assert await burst(server, conns, 1.0) == [1.0, 2.0, 3.0, 4.0]
            assert server.concurrency == 1
            assert await burst(server, conns, 11.0) == [1.0, 1.0, 2.0, 2.0]
            assert server.concurrency == 2
            assert await burst(server, conns, 21.0) == [0.5, 0.5, 1.0, 1.0]
            for conn in conns:
                await conn.aclose()

    run_virtual(main())


def test_a_change_at_once_and_bad_changes() -> None:
    from poolkit.testing.sim import SimChange

    bad: dict[str, Any]
    for bad, says in (
        ({"at": -1.0}, "schedule"),
        ({"concurrency": 0}, "concurrency"),
        ({"service_time": ("normal", 1.0)}, "service_time"),
        ({"drop_request_fraction": 2.0}, "drop_request_fraction"),
    ):
        with pytest.raises(ValueError, match=says):
            SimChange(**bad)
    with pytest.raises(ValueError, match="SimChange items"):
        SimSettings(schedule=({"at": 1},))  # type: ignore[arg-type]  # (not a SimChange)

    async def body(server: SimServer) -> None:
        conn = await SimConnection.connect(HOST, server.port, timeout=5)
        assert await conn.request(b"a") == b"a"
        server.change(SimChange(drop_request_fraction=1.0))  # every request from now: reset
        with pytest.raises((ConnectionError, EOFError, OSError)):
            await conn.request(b"b")
        server.change(SimChange(drop_request_fraction=0.0, concurrency=3))
        again = await SimConnection.connect(HOST, server.port, timeout=5)
        assert await again.request(b"c") == b"c" and server.concurrency == 3
        await again.aclose()

    run(SimSettings(), body)
