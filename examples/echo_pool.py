"""poolkit end to end: an in-process TCP echo server, and both pools in front of it.

    python examples/echo_pool.py [--tasks 200] [--requests 20000] [--max-size 10]

Starts a line-echo server on 127.0.0.1 (a free port), then:
1. an AsyncPool whose connections are asyncio streams: ``--tasks`` tasks share ``--max-size``
   connections and do ``--requests`` request/response round trips in all;
2. a threaded Pool whose connections are plain sockets, driven by 16 threads.
It prints throughput, the pool's statistics and the CMAP events counted by type.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import socket
import threading
import time

import poolkit


async def echo_server() -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


class StreamConnection:
    """A pooled asyncio connection: one request/response at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, payload: bytes) -> bytes:
        self.writer.write(payload + b"\n")
        await self.writer.drain()
        return (await self.reader.readline()).rstrip(b"\n")

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass


class SocketConnection:
    """A pooled blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")

    def request(self, payload: bytes) -> bytes:
        self.sock.sendall(payload + b"\n")
        return self.file.readline().rstrip(b"\n")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


async def run_async(host: str, port: int, tasks: int, requests: int, max_size: int) -> None:
    counts: collections.Counter[str] = collections.Counter()

    async def connect(ctx: poolkit.ConnectContext) -> StreamConnection:
        return StreamConnection(*await asyncio.open_connection(host, port))

    options = poolkit.PoolOptions(max_size=max_size, min_size=2, wait_queue_timeout=10)
    pool = poolkit.AsyncPool(
        connect,
        address=f"{host}:{port}",
        options=options,
        listeners=[lambda e: counts.update([e.cmap_name])],
    )
    budget = iter(range(requests))

    async def worker() -> None:
        for i in budget:
            async with pool.connection() as conn:
                payload = b"request %d" % i
                assert await conn.request(payload) == payload

    async with pool:
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(tasks)))
        elapsed = time.perf_counter() - started
        print(
            f"AsyncPool: {requests} round trips by {tasks} tasks in {elapsed:.2f} s "
            f"({requests / elapsed:,.0f}/s)"
        )
        print(f"  {pool.stats()}")
    print(f"  events: {dict(sorted(counts.items()))}")


def run_threads(host: str, port: int, threads: int, requests: int, max_size: int) -> None:
    def connect(ctx: poolkit.ConnectContext) -> SocketConnection:
        return SocketConnection(socket.create_connection((host, port), timeout=10))

    options = poolkit.PoolOptions(max_size=max_size, wait_queue_timeout=10)
    lock = threading.Lock()
    budget = iter(range(requests))

    def next_request() -> int | None:
        with lock:
            return next(budget, None)

    def worker() -> None:
        while (i := next_request()) is not None:
            with pool.connection() as conn:
                payload = b"request %d" % i
                assert conn.request(payload) == payload

    with poolkit.Pool(connect, address=f"{host}:{port}", options=options) as pool:
        started = time.perf_counter()
        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - started
        print(
            f"Pool (threads): {requests} round trips by {threads} threads in {elapsed:.2f} s "
            f"({requests / elapsed:,.0f}/s)"
        )
        print(f"  {pool.stats()}")


async def main(args: argparse.Namespace) -> None:
    server = await echo_server()
    host, port = server.sockets[0].getsockname()[:2]
    print(f"echo server on {host}:{port}")
    async with server:
        await run_async(host, port, args.tasks, args.requests, args.max_size)
        await asyncio.to_thread(run_threads, host, port, 16, args.requests, args.max_size)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--max-size", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
