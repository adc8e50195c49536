"""Count the Python bytecodes a GET through ``poolkit.backends.http2`` executes on asyncio: 200
concurrent GETs on one connection of a pool (``pool.connection()``, ``conn.request``,
``response.aread``) against the tests' small h2 server (``tests/support/h2_server.py``), in the
same loop. Counted, not timed: the shared machine's noise does not move it. What it is for: the
asyncio path of the HTTP/2 connection kept as fast when it learned trio (the whole run per GET,
the event loop's Python code included, and the part spent in the connection's own code).

    python benchmarks/http2_bytecodes.py [--requests 200]

Run it with ``PYTHONPATH=<another checkout>/src`` to count another version of poolkit.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "support"))
from bytecodes import Counts, tracer
from h2_server import H2Server
from poolkit.backends import http2

#: the functions counted as the connection's own
OWN = ("H2Connection", "Response", "_Stream")


async def run(requests: int, counts: Counts) -> None:
    async with (
        H2Server() as server,
        http2.create_async_pool(server.url, max_size=1, keep_alive=None) as pool,
    ):

        async def get(i: int) -> None:
            async with pool.connection() as conn:
                response = await conn.request("GET", f"/echo/{i}")
                await response.aread()

        for i in range(20):  # (warm: the connection made, h2's tables filled)
            await get(i)
        sys.settrace(tracer(counts))
        try:
            await asyncio.gather(*(get(i) for i in range(requests)))
        finally:
            sys.settrace(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    counts: Counts = collections.Counter()
    asyncio.run(run(args.requests, counts))
    own = sum(v for k, v in counts.items() if k.startswith(OWN))
    print(
        f"{sum(counts.values()) / args.requests:,.1f} bytecodes per GET "
        f"({own / args.requests:,.1f} in the connection's own code)"
    )


if __name__ == "__main__":
    main()
