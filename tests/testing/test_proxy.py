"""FaultProxy (poolkit.testing.proxy): each fault is seen by a client through it, over real
sockets on 127.0.0.1 in front of a SimServer. Timings are asserted with generous margins."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

import poolkit
from poolkit.testing.proxy import FaultProxy
from poolkit.testing.sim import (
    SimConnection,
    SimServer,
    SimSettings,
    SimSocketConnection,
    sim_connect,
    sim_is_broken,
)
from poolkit.testing.sim.protocol import FrameType, encode

HOST = "127.0.0.1"


def run(
    body: Callable[[SimServer, FaultProxy], Awaitable[None]], settings: SimSettings | None = None
) -> None:
    async def main() -> None:
        async with SimServer(settings) as server, FaultProxy(HOST, server.port) as proxy:
            await body(server, proxy)

    asyncio.run(main())


async def wait_for(predicate: Callable[[], bool], timeout: float = 1.5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_listens_on_localhost_only() -> None:
    for host in ("0.0.0.0", "localhost", "::"):
        with pytest.raises(ValueError, match=r"127\.0\.0\.1 only"):
            FaultProxy(HOST, 1, host=host)


def test_forwards_and_counts_bytes() -> None:
    async def body(server: SimServer, proxy: FaultProxy) -> None:
        assert proxy.address == f"{HOST}:{proxy.port}" and proxy.port != server.port
        conn = await SimConnection.connect(HOST, proxy.port, timeout=5)
        assert await conn.request(b"abc") == b"abc"
        await conn.aclose()
        await wait_for(lambda: proxy.stats().connections_open == 0)
        stats = proxy.stats()
        assert (stats.connections_accepted, stats.bytes_up, stats.bytes_down) == (1, 12, 13 + 12)

    run(body)


@pytest.mark.timing
def test_latency_per_direction() -> None:
    async def body(server: SimServer, proxy: FaultProxy) -> None:
        conn = await SimConnection.connect(HOST, proxy.port, timeout=5)
        start = time.monotonic()
        await conn.request(b"x")
        fast = time.monotonic() - start
        proxy.set_latency(up=0.1)
        start = time.monotonic()
        await conn.request(b"x")
        assert 0.095 <= time.monotonic() - start < 0.6
        proxy.set_latency(up=0.1, down=0.15)
        start = time.monotonic()
        await conn.request(b"x")
        assert 0.245 <= time.monotonic() - start < 0.8
        start = time.monotonic()
        second = await SimConnection.connect(HOST, proxy.port, timeout=5)  # (HELLO comes down)
        assert 0.145 <= time.monotonic() - start < 0.8
        assert fast < 0.09
        await conn.aclose()
        await second.aclose()

    run(body)


def test_blackhole_makes_clients_time_out() -> None:
    async def body(server: SimServer, proxy: FaultProxy) -> None:
        conn = await SimConnection.connect(HOST, proxy.port, timeout=5)
        proxy.blackhole = True
        with pytest.raises(TimeoutError):
            await conn.request(b"x", timeout=0.2)
        with pytest.raises(TimeoutError):
            await SimConnection.connect(HOST, proxy.port, timeout=0.2)
        assert server.stats().requests_served == 0
        proxy.blackhole = False
        fresh = await SimConnection.connect(HOST, proxy.port, timeout=5)
        assert await fresh.request(b"back") == b"back"
        await conn.aclose()
        await fresh.aclose()

    run(body)


def test_reset_gives_connection_reset_errors() -> None:
    async def body(server: SimServer, proxy: FaultProxy) -> None:
        conn = await SimConnection.connect(HOST, proxy.port, timeout=5)
        pending = asyncio.ensure_future(conn.request(b"x", timeout=5))
        await wait_for(lambda: server.stats().in_service == 1)
        assert proxy.reset_all() == 1
        with pytest.raises(ConnectionResetError):
            await pending
        await conn.aclose()

        loop = asyncio.get_running_loop()

        async def reset_all() -> int:
            return proxy.reset_all()

        def blocking() -> None:  # (a blocking client sees the RST too)
            sock = SimSocketConnection.connect(HOST, proxy.port, timeout=5)
            try:
                assert asyncio.run_coroutine_threadsafe(reset_all(), loop).result(5) == 1
                with pytest.raises(ConnectionResetError):
                    sock.request(b"y", timeout=5)
            finally:
                sock.close()

        await asyncio.to_thread(blocking)
        assert proxy.stats().connections_reset == 2

    run(body, SimSettings(service_time=0.3))


def test_close_after_bytes() -> None:
    async def body(server: SimServer, proxy: FaultProxy) -> None:
        proxy.close_after_bytes = 13 + 12 + 5  # HELLO, the request, 5 bytes of the response
        conn = await SimConnection.connect(HOST, proxy.port, timeout=5)
        with pytest.raises(ConnectionError, match="closed the connection"):
            await conn.request(b"abc", timeout=5)
        await conn.aclose()
        await wait_for(lambda: proxy.stats().connections_open == 0)
        stats = proxy.stats()
        assert stats.bytes_up + stats.bytes_down == 30

        proxy.close_after_bytes = 13 + 11 + 3  # HELLO, a request, 3 bytes of the response
        with socket.create_connection((HOST, proxy.port), timeout=5) as sock:  # (raw bytes)
            hello = await asyncio.to_thread(sock.recv, 100)
            assert hello == encode(FrameType.HELLO, 0, b"\0\0\0\1")
            await asyncio.to_thread(sock.sendall, encode(FrameType.REQUEST, 1, b"hi"))
            data = b""
            while chunk := await asyncio.to_thread(sock.recv, 100):
                data += chunk
            assert data == encode(FrameType.RESPONSE, 1, b"hi")[:3]  # then the end (FIN)

    run(body)


def test_refuse_new_connections_then_listen_again() -> None:
    async def body(server: SimServer, proxy: FaultProxy) -> None:
        conn = await SimConnection.connect(HOST, proxy.port, timeout=5)
        await proxy.set_refusing(True)
        with pytest.raises(ConnectionRefusedError):
            await SimConnection.connect(HOST, proxy.port, timeout=5)
        assert await conn.request(b"open ones live on") == b"open ones live on"
        await proxy.set_refusing(False)
        again = await SimConnection.connect(HOST, proxy.port, timeout=5)
        assert await again.request(b"x") == b"x"
        await conn.aclose()
        await again.aclose()

    run(body)


def test_threaded_pool_through_a_proxy_on_a_thread_recovers_from_a_reset() -> None:
    with (
        SimServer().start_in_thread() as sim,
        FaultProxy(HOST, sim.port).start_in_thread() as proxy,
    ):
        hooks = poolkit.Hooks(is_broken=sim_is_broken)
        options = poolkit.PoolOptions(max_size=2, hooks=hooks)
        with poolkit.Pool(sim_connect(HOST, proxy.port), options=options) as pool:
            with pool.connection() as conn:
                assert conn.request(b"a", timeout=5) == b"a"
            assert proxy.call(proxy.server.reset_all) == 1
            errors = []
            for _ in range(2):
                try:
                    with pool.connection() as conn:
                        assert conn.request(b"b", timeout=5) == b"b"
                except ConnectionError as exc:
                    errors.append(exc)
            assert len(errors) <= 1  # the reset connection fails once at most, then a new one
            with pool.connection() as conn:
                assert conn.request(b"c", timeout=5) == b"c"
            assert pool.stats().connections_created >= 2


def test_an_unreachable_target_resets_the_client() -> None:
    with socket.socket() as probe:  # (a port nobody listens on)
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]

    async def main() -> None:
        async with FaultProxy(HOST, port) as proxy:
            with pytest.raises(ConnectionError):
                await SimConnection.connect(HOST, proxy.port, timeout=5)
            assert proxy.stats().connections_accepted == 1

    asyncio.run(main())


def test_a_server_thread_reports_a_failed_start() -> None:
    with SimServer().start_in_thread() as handle:
        with pytest.raises(OSError, match="in use"):
            SimServer(port=handle.port).start_in_thread()  # (the port is taken)
        handle.stop()
        handle.stop()  # (twice is fine)
