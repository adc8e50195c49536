"""HTTP/2 for :class:`poolkit.AsyncPool`: one connection serves as many leases as the server's
``SETTINGS_MAX_CONCURRENT_STREAMS``, each lease one stream (``pip install 'poolkit[http2]'``:
the ``h2`` library, over asyncio streams, or trio's under trio: the library running decides).

    pool = await http2.create_async_pool("https://example.org", max_size=2)
    async with pool.connection() as conn:          # one stream of a shared connection
        response = await conn.request("GET", "/")
        body = await response.aread()

``https://`` speaks TLS with ALPN ``h2`` (the server must choose it); ``http://`` speaks HTTP/2
with prior knowledge (h2c), as ``curl --http2-prior-knowledge`` does.

Under httpx, :class:`AsyncTransport` gives each origin a pool:
``httpx.AsyncClient(transport=http2.AsyncTransport(max_size=2))``.

The package, a module a job: ``_errors`` (what a failed request says of whether it may be sent
again), ``_connection`` (the HTTP/2 client of one connection: :class:`H2Connection`, its
reader, its streams, its liveness; the rules of the protocol side are in its header),
``_trio`` (its I/O under trio, and the transport's nursery there), ``_pool``
(the connect function, hooks and builder of a :class:`poolkit.AsyncPool` of them) and
``_transport`` (the httpx transport on those pools).
"""

from __future__ import annotations

from .._extras import require

require("h2", "http2", "http2")  # no h2: an ImportError naming poolkit[http2]
require("httpx", "http2", "http2")  # (its transport; the same extra)

from ._connection import MAX_STREAMS_CAP, H2Connection, Response  # noqa: E402
from ._errors import (  # noqa: E402
    ConnectionLostError,
    HTTP2Error,
    InvalidRequestError,
    RequestNotSentError,
    StreamRefusedError,
    StreamResetError,
)
from ._pool import (  # noqa: E402
    EXPECTED_STREAMS,
    async_connect,
    async_hooks,
    async_ping,
    create_async_pool,
    is_broken,
)
from ._transport import AsyncTransport  # noqa: E402

__all__ = [
    "EXPECTED_STREAMS",
    "MAX_STREAMS_CAP",
    "AsyncTransport",
    "ConnectionLostError",
    "H2Connection",
    "HTTP2Error",
    "InvalidRequestError",
    "RequestNotSentError",
    "Response",
    "StreamRefusedError",
    "StreamResetError",
    "async_connect",
    "async_hooks",
    "create_async_pool",
    "is_broken",
    "async_ping",
]
