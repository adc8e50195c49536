"""What the test servers (the simulated server, the simulated load balancer, the fault proxy)
share: how they listen, run and close (:class:`LoopbackServer`, :func:`stop_accepting`).

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
import ssl
from collections.abc import Awaitable, Callable
from typing import Self

from ._thread import ServerThread

__all__ = ["LoopbackServer", "stop_accepting"]


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


class LoopbackServer:
    """What the test servers share: a listening socket on ``host`` (127.0.0.1) whose port is
    known once started, ``async with`` to run one, and :meth:`start_in_thread` to run one on a
    thread of its own (for blocking clients). Subclasses set ``host`` and ``_port`` and write
    :meth:`start` (calling :meth:`_listen`) and :meth:`close`."""

    host: str
    _port: int

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def _listen(
        self,
        handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None] | None],
        tls: ssl.SSLContext | None = None,
    ) -> asyncio.Server:
        """Listen on ``host`` and the port (0 the first time: a free one, kept after); with
        ``tls``, a TLS server's context, over TLS."""
        server = await asyncio.start_server(handler, self.host, self._port, ssl=tls)
        self._port = server.sockets[0].getsockname()[1]
        return server

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def start_in_thread(self) -> ServerThread[Self]:
        """Start on a thread of its own: the handle has ``.port`` and ``.stop()``; call the
        server's methods with ``.call()``."""
        return ServerThread(self)

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        return f"{self.host}:{self._port}"
