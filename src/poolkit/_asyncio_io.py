"""What the asyncio pool does beside deciding: it runs connects and keep-alive probes as tasks of
its own, closes connections, and keeps one loop timer for the core's earliest deadline. These
are methods of :class:`~poolkit.AsyncPool` (bound there by name), kept in a module of their own.

Rules of this module
--------------------
* The core is fed a result and its output carried out (``_after_core``) in one step of the
  loop; user code (connect, probe, close) runs in the pool's tasks, never inside a core input.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._core import Conn
from ._frontend import ConnectContext, call_close, unwrap
from .errors import ConnectCancelledError

if TYPE_CHECKING:
    from .asyncio import AsyncPool

_log = logging.getLogger("poolkit.pool")


def _close_quietly(connection: Any) -> None:
    """Close what a misused connect function returned, so that nothing leaks."""
    try:
        result = call_close(connection)
        if inspect.iscoroutine(result):
            result.close()
    except Exception:
        _log.exception("closing %r raised", connection)


async def _await_close(result: Awaitable[Any], conn_id: int, address: str) -> None:
    try:
        await result
    except Exception:
        _log.exception("closing connection %d of %s raised", conn_id, address)


def _spawn(
    self: AsyncPool[Any],
    loop: asyncio.AbstractEventLoop,
    work: Any,
    name: str,
    if_cancelled: Callable[[], None] | None = None,
) -> Any:
    """A task of the pool's own (kept until done, so that ``close`` and the loop see it).
    Raises if it cannot be made (the pool's loop is closed, or this is not its loop), and then
    ``work`` is closed, never left un-awaited.

    ``if_cancelled`` is called if the task ends cancelled: the pool's coroutines catch their
    cancellation and report it, so this happens when the task was cancelled before its first
    step (a clear or a loop shutdown in the same iteration) and ``work`` never ran to say so."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    try:
        if running is not loop:
            raise RuntimeError(
                f"AsyncPool ({self.address}) runs on the event loop it first ran on, and it is "
                "not running here (make one pool per event loop)"
            )
        task = loop.create_task(work, name=name)
    except BaseException:
        work.close()
        raise
    self._tasks.add(task)
    task.add_done_callback(self._tasks.discard)
    if if_cancelled is not None:
        task.add_done_callback(lambda done: if_cancelled() if done.cancelled() else None)
    return task


def _start_connect(self: AsyncPool[Any], conn: Conn) -> None:
    loop = self._loop
    if loop is None:  # pragma: no cover - the core only connects once ready, which binds
        raise RuntimeError("AsyncPool has no event loop to connect on")
    ctx = ConnectContext(conn.id, self._connect_address, self, conn.generation)
    conn.handle = ctx

    def never_ran() -> None:
        self._connect_ended(conn, _cancelled(self, conn))

    ctx._task = _spawn(
        self, loop, self._run_connect(conn, ctx), f"poolkit-connect-{conn.id}", never_ran
    )


async def _run_connect(self: AsyncPool[Any], conn: Conn, ctx: ConnectContext) -> None:
    core = self._core
    try:
        pending = self._connect(ctx)
        if not inspect.isawaitable(pending):
            _close_quietly(pending)
            raise TypeError(
                f"AsyncPool's connect function returned {pending!r}, not an awaitable: it "
                "must be an async function (for a plain one use poolkit.Pool)"
            )
        result = await pending
    except asyncio.CancelledError:
        # Abandoned by the pool (then the core already closed the record) or cancelled from
        # outside (loop shutdown): either way the connect failed, and a waiter is told so
        # with a pool error, not with a cancellation of its own.
        self._connect_ended(conn, _cancelled(self, conn))
        return
    except GeneratorExit:  # closed unfinished (its loop is gone): nothing to tell the pool
        raise
    except BaseException as exc:
        self._connect_ended(conn, exc)
        if not isinstance(exc, Exception):
            raise
        return
    connection, max_streams, service_id = unwrap(result)
    core.observed = self._sink.observed()
    core.connected(conn, self._time(), connection, service_id, max_streams)
    self._after_core()


def _cancelled(self: AsyncPool[Any], conn: Conn) -> ConnectCancelledError:
    return ConnectCancelledError(address=self.address, connection_id=conn.id)


def _connect_ended(self: AsyncPool[Any], conn: Conn, error: BaseException) -> None:
    """``conn``'s connect ended without a connection (a report the core takes more than once
    without harm: a connect it has closed and not abandoned is ignored)."""
    core = self._core
    core.observed = self._sink.observed()
    core.connect_failed(conn, self._time(), error)
    self._after_core()


def _start_keep_alive(self: AsyncPool[Any], conn: Conn) -> None:
    loop = self._loop
    assert loop is not None  # probes follow connects, which bind the loop

    # the connect context is done with: the handle is now the probe, which a close cancels

    def never_ran() -> None:
        if conn.handle is task:
            conn.handle = None
        self._probe_ended(conn, asyncio.CancelledError())

    task = conn.handle = _spawn(
        self, loop, self._run_keep_alive(conn), f"poolkit-keep-alive-{conn.id}", never_ran
    )


async def _run_keep_alive(self: AsyncPool[Any], conn: Conn) -> None:
    keep_alive = self.options.keep_alive
    assert keep_alive is not None
    error: BaseException | None = None
    try:
        result = keep_alive.probe(conn.connection)
        if inspect.isawaitable(result):
            await result
    except GeneratorExit:  # closed unfinished (its loop is gone): nothing to tell the pool
        raise
    except BaseException as exc:  # CancelledError too: the pool closed the connection, or
        error = exc  # (the connection still open) someone else cancelled the task
    if conn.handle is asyncio.current_task():
        conn.handle = None  # over: a close from here on has nothing to cancel
    self._probe_ended(conn, error)
    if error is not None and not isinstance(error, Exception | asyncio.CancelledError):
        raise error


def _probe_ended(self: AsyncPool[Any], conn: Conn, error: BaseException | None) -> None:
    """``conn``'s probe ended (a report the core ignores for a probe already ended)."""
    core = self._core
    core.observed = self._sink.observed()
    core.keep_alive_done(conn, self._time(), error)
    self._after_core()


def _close_connection(
    self: AsyncPool[Any], conn: Conn, connection: Any, pending: bool
) -> None:
    handle = conn.handle
    if isinstance(handle, asyncio.Future) and not handle.done():
        handle.cancel()  # a keep-alive probe in flight
    if pending:
        ctx: ConnectContext | None = conn.handle
        if ctx is not None:
            ctx._cancelled = True
            if ctx._task is not None and not ctx._task.done():
                ctx._task.cancel()
        return
    try:
        result = call_close(connection, prefer_aclose=True)
    except Exception:
        _log.exception("closing connection %d of %s raised", conn.id, self.address)
        return
    if inspect.isawaitable(result):
        loop = self._loop or asyncio.get_running_loop()
        work = _await_close(result, conn.id, self.address)

        def never_ran() -> None:  # (cancelled before it awaited the close: not left un-awaited)
            if inspect.iscoroutine(result):
                result.close()  # (no-op if it ran)

        try:
            _spawn(self, loop, work, f"poolkit-close-{conn.id}", never_ran)
        except RuntimeError:
            if inspect.iscoroutine(result):
                result.close()
            _log.exception("connection %d of %s could not be closed", conn.id, self.address)


def _rearm(self: AsyncPool[Any]) -> None:
    when = self._core.next_deadline()
    if when == self._timer_at:
        return
    self._cancel_timer()
    if when is None:
        return
    if self._call_at is not None:
        self._timer = self._call_at(when, self._on_timer)
    else:
        loop = self._loop
        if loop is None:  # armed once the pool is bound to a loop
            self._core.timers.dirty = True
            return
        if self._clock is None:
            self._timer = loop.call_at(when, self._on_timer)
        else:
            self._timer = loop.call_later(max(0.0, when - self._time()), self._on_timer)
    self._timer_at = when


def _cancel_timer(self: AsyncPool[Any]) -> None:
    if self._timer is not None:
        self._timer.cancel()
    self._timer = None
    self._timer_at = None


def _on_timer(self: AsyncPool[Any]) -> None:
    armed = self._timer_at
    self._timer = None
    self._timer_at = None
    now = self._time()
    if armed is not None and now < armed:
        now = armed
    core = self._core
    if self._orphans:
        self._reap()
    core.observed = self._sink.observed()
    core.fire_timers(now)
    core.timers.dirty = True
    self._after_core()
