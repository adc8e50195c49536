"""What the test servers (the simulated server, the simulated load balancer, the fault proxy)
share about closing a listening asyncio server.

Rules of this module
--------------------
* Stop accepting before closing: a connection accepted while ``Server.close()`` runs makes
  asyncio 3.11 fail in ``Server._attach`` and leak its socket (a ResourceWarning, an error
  under the tests' warnings filter). So the listening sockets leave the loop first, and the
  connections accepted just before get a few loop turns to reach their handler.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["stop_accepting"]


async def stop_accepting(server: asyncio.Server) -> None:
    """Take ``server``'s listening sockets off the loop, let connections accepted just now reach
    their handlers, then close it (the caller closes the connections and waits)."""
    loop = asyncio.get_running_loop()
    for sock in server.sockets:
        with contextlib.suppress(NotImplementedError, ValueError, OSError):
            loop.remove_reader(sock.fileno())
    for _ in range(3):
        await asyncio.sleep(0)
    server.close()
