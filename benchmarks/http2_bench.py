"""HTTP/2 through httpx: httpx's own pool (``AsyncClient(http2=True)``) and poolkit's transport
(``AsyncClient(transport=http2.AsyncTransport(...))``), side by side in one run, against hypercorn
in a process of its own (h2c, prior knowledge for both clients).

    python benchmarks/http2_bench.py [--requests 500] [--rounds 5] [--max-connections 2]

Each round sends ``--requests`` concurrent GETs through each client (alternating which goes
first) and notes the throughput, each request's latency (p50, p99, max) and the connections the
server saw. Then the stream-limit case (httpcore's issue #248): a server allowing 2 streams per
connection, two responses held, a third request; what each client does with it. Printed: the
medians over the rounds, and the ratio poolkit / httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from poolkit.backends import http2

# ---------------------------------------------------------------------------------- the server


class App:
    """``/echo/...``: its path; ``/hold``: held until ``/release``; ``/connections``: the
    connections seen since the last ``/forget``."""

    def __init__(self) -> None:
        self.clients: set[Any] = set()
        self.release = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/forget":
            self.clients.clear()
            self.release = asyncio.Event()
        elif path == "/release":
            self.release.set()
        elif path != "/connections":
            self.clients.add(tuple(scope["client"]))
        if path == "/hold":
            await self.release.wait()
        body = str(len(self.clients)).encode() if path == "/connections" else path.encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def serve(port: int, streams: int) -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.h2_max_concurrent_streams = streams
    # (hypercorn says GOAWAY after 1000 requests on a connection by default, and then fails the
    # streams in flight with a PROTOCOL_ERROR when frames follow: not what is measured here)
    config.keep_alive_max_requests = 1 << 30
    config.accesslog = config.errorlog = None
    asyncio.run(hypercorn_serve(App(), config))  # type: ignore[arg-type]  # (hypercorn's ASGI)


@contextlib.asynccontextmanager
async def server(streams: int) -> AsyncIterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", str(port), "--streams", str(streams),
        env=dict(os.environ),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(500):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            break
        yield url
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)


# ---------------------------------------------------------------------------------- the clients


def own(url: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections)
    return httpx.AsyncClient(http1=False, http2=True, limits=limits, base_url=url)


def poolkit_client(url: str, connections: int) -> httpx.AsyncClient:
    transport = http2.AsyncTransport(max_size=connections, keep_alive=None)
    return httpx.AsyncClient(transport=transport, base_url=url)


CLIENTS = {"httpx": own, "poolkit": poolkit_client}


async def burst(client: httpx.AsyncClient, requests: int) -> dict[str, float]:
    await client.get("/forget")  # (its connection counts too, as the burst's first)
    latencies: list[float] = []

    async def one(i: int) -> None:
        began = time.perf_counter()
        response = await client.get(f"/echo/{i}")
        assert response.content == f"/echo/{i}".encode()
        latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    elapsed = time.perf_counter() - began
    seen = int((await client.get("/connections")).text)
    latencies.sort()
    return {
        "req_per_s": requests / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
        "max_ms": latencies[-1] * 1e3,
        "connections": seen,
    }


async def third_request(make: Any, url: str) -> str:
    async with make(url, 2) as client:
        await client.get("/forget")
        held = [asyncio.create_task(client.get("/hold")) for _ in range(2)]
        await asyncio.sleep(0.3)
        try:
            answer = await asyncio.wait_for(client.get("/echo/third"), 3)
            outcome = f"served ({answer.status_code})"
        except TimeoutError:
            outcome = "stalled: no answer in 3 s"
        except Exception as exc:
            outcome = f"failed: {type(exc).__name__}"
        async with httpx.AsyncClient(http1=False, http2=True, base_url=url) as other:
            await other.get("/release")
        await asyncio.gather(*held, return_exceptions=True)
        return outcome


async def main(args: argparse.Namespace) -> None:
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in CLIENTS}
    async with server(100) as url:
        for make in CLIENTS.values():  # (a warm-up burst each)
            async with make(url, args.max_connections) as client:
                await burst(client, args.requests)
        for round_ in range(args.rounds):
            order = list(CLIENTS.items())
            if round_ % 2:
                order.reverse()
            for name, make in order:
                async with make(url, args.max_connections) as client:
                    figures[name].append(await burst(client, args.requests))
    print(
        f"{args.requests} concurrent GETs, max {args.max_connections} connections, "
        f"{args.rounds} rounds (medians), hypercorn h2c on 127.0.0.1:"
    )
    keys = ["req_per_s", "p50_ms", "p99_ms", "max_ms", "connections"]
    print(f"{'client':<10}" + "".join(f"{k:>13}" for k in keys))
    medians = {
        name: {k: statistics.median(r[k] for r in runs) for k in keys}
        for name, runs in figures.items()
    }
    for name, row in medians.items():
        print(f"{name:<10}" + "".join(f"{row[k]:>13.1f}" for k in keys))
    ratio = medians["poolkit"]["req_per_s"] / medians["httpx"]["req_per_s"]
    print(f"throughput poolkit / httpx: {ratio:.2f}")
    async with server(2) as url:
        print("stream limit 2, two responses held, a third request (httpcore #248):")
        for name, make in CLIENTS.items():
            print(f"  {name}: {await third_request(make, url)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-connections", type=int, default=2)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--streams", type=int, default=100, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.serve:
        serve(arguments.serve, arguments.streams)
    else:
        asyncio.run(main(arguments))
