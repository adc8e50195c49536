"""What code built on poolkit's pools uses: the backends, the MongoDB layer, a driver of your own.

The pools themselves are :class:`poolkit.AsyncPool` and :class:`poolkit.Pool`; this module is the
rest of the seam between them and the layers above, so that no layer above reaches into the
pools' private modules (``docs/architecture.md``; the contracts in ``pyproject.toml`` enforce it).
What ``poolkit`` exports (:class:`~poolkit.ConnectContext`, :class:`~poolkit.Established`,
:class:`~poolkit.Lease`...) is imported from ``poolkit``, not from here:

* :data:`DEFAULT`, the "not given" sentinel of ``checkout(timeout=...)`` and the like, for a
  wrapper that passes its caller's argument through;
* :func:`check_timeout`, the validation the pools give a per-call timeout, and what a builder
  or a connect function gives its own arguments: :func:`check_seconds` (a duration, ``None``
  for no limit) and :func:`check_port`;
* :data:`AnyPool`, either front end;
* :func:`with_default_hooks`, a builder's options with its default hooks unless given others;
* :func:`check_socket`, the ``check`` hook of a plain or TLS socket;
* :func:`pip_install`, the install command to name in the error of an optional part missing;
* :class:`PoolStarter`, what every async one-call builder returns (``create_async_pool``, and
  the asyncpg backend's ``create_pool``): ``await`` it for the ready pool, or ``async with``
  it for a pool closed at the end of the block;
* :func:`start` / :func:`async_start`, a builder's start: the pool made ready and one
  connection made through it, so that a wrong address fails the builder's call (the pool
  closed, no warning that it goes on trying);
* :func:`require_asyncio`, the error a connect function or builder whose driver runs on asyncio
  only raises at the call under another async library (trio);
* :func:`trio_running`, for a connect function whose driver runs on both: which I/O to use.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import socket
import ssl
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeAlias, TypeVar

from ._base import DEFAULT
from ._frontend import check_timeout
from ._install import pip_install
from .asyncio import AsyncPool, _trio_running
from .options import Hooks, PoolOptions
from .threaded import Pool

__all__ = [
    "DEFAULT",
    "AnyPool",
    "PoolStarter",
    "async_start",
    "check_port",
    "check_seconds",
    "check_socket",
    "check_timeout",
    "pip_install",
    "require_asyncio",
    "start",
    "trio_running",
    "with_default_hooks",
]

C = TypeVar("C")

#: either front end over connections of type ``C``: ``AnyPool[C]``
AnyPool: TypeAlias = AsyncPool[C] | Pool[C]


def with_default_hooks(options: PoolOptions | None, default: Hooks, builder: str) -> PoolOptions:
    """``options`` (default ones if ``None``) with ``default`` as hooks unless they have their
    own; ``builder`` names the call in the error of ``options`` that are not a PoolOptions."""
    if options is None:
        options = PoolOptions()
    elif not isinstance(options, PoolOptions):
        raise TypeError(f"{builder}(options=...) must be a PoolOptions, got {options!r}")
    return options if options.hooks is not None else dataclasses.replace(options, hooks=default)


def check_seconds(value: Any, what: str) -> float | None:
    """A duration argument of a builder or connect function (``what``: its name, as
    ``"tcp.create_pool(connect_timeout=...)"``): ``None`` (no limit), or seconds as
    :func:`check_timeout` takes them (a float or a timedelta, >= 0, finite), returned as a float;
    else a ``ValueError`` naming it, at the call rather than at the first connect."""
    return None if value is None else check_timeout(value, what)


def check_port(port: Any, what: str, *, text: bool = False) -> int:
    """A port argument (``what``: its name, as ``"tcp.create_pool(port=...)"``): an int from 1
    to 65535 (not a bool; with ``text``, also those digits as a str, as redis-py and libpq take
    them), returned as an int; else a ``ValueError`` naming it. (A socket address takes a port
    modulo 65536: 70000 would connect to 4464.)"""
    value = port
    if text and isinstance(port, str) and port.isascii() and port.isdigit():
        value = int(port)
    if type(value) is not int or not 0 < value < 65536:
        raise ValueError(f"{what}: an int from 1 to 65535, not {port!r}")
    return value


def start(pool: Pool[Any]) -> None:
    """A one-call builder's start, the same in every backend and in ``poolkit.mongodb``: make
    ``pool`` ready and one connection through it, so that a server that cannot be reached (a
    wrong address, database or password) fails the builder's call; then the pool is closed and
    the connect's error raised, with no warning before it that the pool goes on trying."""
    with _starting(pool):
        pool.ready()
        try:
            lease = pool.checkout()
        except BaseException:
            pool.close()
            raise
        lease.release()


async def async_start(pool: AsyncPool[Any]) -> None:
    """:func:`start` for :class:`~poolkit.AsyncPool` (what a :class:`PoolStarter` awaits).
    Under ``async with builder(...) as pool:`` the pool's own block is entered first (under
    trio, the nursery its tasks run in), and the starter's exit ends it."""
    starter = _ENTERING.get()
    block: AbstractAsyncContextManager[Any] | None = None
    with _starting(pool):
        if starter is not None:
            block = pool.running(ready=False)
            await block.__aenter__()
        try:
            pool.ready()
            lease = await pool.checkout()
        except BaseException:
            if block is not None:
                await block.__aexit__(None, None, None)
            else:
                await pool.close()
            raise
        lease.release()
    if starter is not None:
        starter._block = block


def require_asyncio(call: str, library: str) -> None:
    """Raise ``RuntimeError`` naming ``call`` if the async library running is not asyncio
    (trio, or anyio on trio): ``library`` (a driver written for asyncio's event loop) cannot
    run there. Under asyncio, or with no async library running, it does nothing."""
    if _trio_running():
        raise RuntimeError(
            f"{call}: {library} runs on asyncio only, and this is trio; poolkit.AsyncPool runs "
            "on trio (and anyio's trio backend), with a connect function whose I/O is trio's "
            "(poolkit.backends.tcp's works on both)"
        )


def trio_running() -> bool:
    """Whether the async library running in this thread is trio (or anyio on trio), as
    ``AsyncPool`` chooses its I/O: asked without importing trio (false when it is not imported,
    or not running)."""
    return _trio_running()


@contextlib.contextmanager
def _starting(pool: AnyPool[Any]) -> Iterator[None]:
    """Around a builder's first checkout (its pool made ready and one connection checked out, so
    that a wrong address, database or password fails the builder's call and the pool is closed):
    the warning that connects are failing with no checkout told ("... the pool goes on
    trying") and the note of their recovery are held until the block ends, then logged if it
    ends well (the pool does go on) and dropped if it raises (the builder's error says it all;
    the warning would say the opposite). Listeners get those events as usual."""
    sink = pool._sink
    sink.hold()
    try:
        yield
    except BaseException:
        sink.unhold(say=False)
        raise
    sink.unhold(say=True)


def check_socket(sock: socket.socket) -> None:
    """The ``check`` hook for sockets: raises ``ConnectionError`` if the peer closed the
    connection or sent bytes nobody asked for (the protocol is out of step); reads nothing from
    a healthy connection."""
    if sock.fileno() == -1:
        raise ConnectionError("the socket is closed")
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        # (no peek through TLS: a read that finds no application data)
        tls = isinstance(sock, ssl.SSLSocket)
        data = sock.recv(1) if tls else sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, ssl.SSLWantReadError):
        return  # nothing to read: alive
    finally:
        if sock.fileno() != -1:
            sock.settimeout(timeout)
    if not data:
        raise ConnectionError("the peer closed the connection")
    raise ConnectionError("unexpected data waiting on an idle connection")


#: the :class:`PoolStarter` being entered (``async with builder(...)``) in this context
_ENTERING: contextvars.ContextVar[PoolStarter[Any] | None] = contextvars.ContextVar(
    "poolkit_starter", default=None
)


class PoolStarter(Generic[C]):
    """What an async one-call builder returns: ``await`` it for the ready pool, or use it as
    ``async with builder(...) as pool:`` for a pool closed at the end of the block (under trio
    only the latter: the pool's tasks run in a nursery its block opens)."""

    __slots__ = ("_block", "_pool", "_start")

    def __init__(self, start: Callable[[], Awaitable[AsyncPool[C]]]) -> None:
        self._start = start
        self._pool: AsyncPool[C] | None = None
        #: the pool's own block, entered by ``async_start`` under ``async with``
        self._block: AbstractAsyncContextManager[Any] | None = None

    def __await__(self) -> Generator[Any, None, AsyncPool[C]]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncPool[C]:
        token = _ENTERING.set(self)
        try:
            self._pool = await self._start()
        finally:
            _ENTERING.reset(token)
        return self._pool

    async def __aexit__(self, *exc_info: object) -> None:
        if self._block is not None:
            await self._block.__aexit__(None, None, None)  # (the pool's exit reads none)
        elif self._pool is not None:
            await self._pool.close()
