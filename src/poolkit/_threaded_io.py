"""What the threaded pool does outside its lock: it carries out the core's actions (connects,
closes, keep-alive probes, wake-ups) on threads of its own, and runs its timer thread. These are
methods of :class:`~poolkit.Pool` (bound there by name), kept in a module of their own.

Rules of this module
--------------------
* Decide under the lock, act outside it: a function here takes the pool's lock only to feed the
  core a result and take its output, and does every call into user code (connect, probe,
  close, listeners, wake-ups) with the lock released.
"""

from __future__ import annotations

import inspect
import logging
import operator
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._core import Action, Conn
from ._frontend import ConnectContext, call_close, carry_out, report_unstarted, unwrap
from .stats import PoolState

if TYPE_CHECKING:
    from .threaded import Pool

_log = logging.getLogger("poolkit.pool")
#: the longest single wait of the timer thread: any deadline further away is waited for in steps
_MAX_WAIT = min(threading.TIMEOUT_MAX, 86400.0)


def _not_awaitable(result: Any, message: str) -> Any:
    """``result`` of a user function that must be plain; an awaitable (an async function given
    to ``Pool``) is closed, so that it is not "never awaited", and refused with ``message``."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        raise TypeError(message.format(result))
    return result


def _start_daemon(target: Callable[[], None], name: str) -> None:
    threading.Thread(target=target, name=name, daemon=True).start()


def _take_locked(self: Pool[Any]) -> list[Action]:
    """Under the lock: take the core's output, queue its events, re-arm the timer."""
    core = self._core
    actions, events = core.take()
    if events:
        self._sink.push(events)
    if core.timers.dirty:
        self._rearm_locked()
    return actions


def _carry_out(self: Pool[Any], actions: list[Action]) -> None:
    """Outside the lock: do what the core asked (a waiter's wake-up is its owner, called),
    then deliver the events."""
    while actions:
        unstarted = carry_out(self, actions, operator.call)
        if not unstarted:
            break
        # a connect or probe whose thread could not start: the core learns it failed
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            report_unstarted(core, unstarted, self._time())
            actions = self._take_locked()
    self._sink.flush()


def _start_connect(self: Pool[Any], conn: Conn) -> None:
    ctx = ConnectContext(conn.id, self._connect_address, self, conn.generation)
    conn.handle = ctx
    self._start_thread(lambda: self._run_connect(conn, ctx), f"poolkit-connect-{conn.id}")


def _run_connect(self: Pool[Any], conn: Conn, ctx: ConnectContext) -> None:
    try:
        result = _not_awaitable(
            self._connect(ctx),
            "Pool's connect function returned an awaitable ({!r}), not a connection: an async "
            "connect needs poolkit.AsyncPool",
        )
    except BaseException as exc:
        with self._lock:
            core = self._core
            core.observed = self._sink.observed()
            core.connect_failed(conn, self._time(), exc)
            actions = self._take_locked()
        self._carry_out(actions)
        if not isinstance(exc, Exception):
            raise
        return
    connection, max_streams, service_id = unwrap(result)
    with self._lock:
        core = self._core
        core.observed = self._sink.observed()
        core.connected(conn, self._time(), connection, service_id, max_streams)
        actions = self._take_locked()
    self._carry_out(actions)


def _start_keep_alive(self: Pool[Any], conn: Conn) -> None:
    self._start_thread(lambda: self._run_keep_alive(conn), f"poolkit-keep-alive-{conn.id}")


def _run_keep_alive(self: Pool[Any], conn: Conn) -> None:
    keep_alive = self.options.keep_alive
    assert keep_alive is not None
    error: BaseException | None = None
    try:
        _not_awaitable(
            keep_alive.probe(conn.connection),
            "KeepAlive.probe returned an awaitable ({!r}): Pool needs a plain function",
        )
    except BaseException as exc:
        error = exc
    with self._lock:
        core = self._core
        core.observed = self._sink.observed()
        core.keep_alive_done(conn, self._time(), error)
        actions = self._take_locked()
    self._carry_out(actions)
    if error is not None and not isinstance(error, Exception):
        raise error


def _close_connection(self: Pool[Any], conn: Conn, connection: Any, pending: bool) -> None:
    if pending:
        ctx: ConnectContext | None = conn.handle
        if ctx is not None:
            ctx._cancelled = True
        return
    try:
        call_close(connection)
    except Exception:
        _log.exception("closing connection %d of %s raised", conn.id, self.address)


def _rearm_locked(self: Pool[Any]) -> None:
    when = self._core.next_deadline()
    if when == self._timer_at:
        return
    self._timer_at = when
    if self._call_at is not None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        self._timer_handle = None if when is None else self._call_at(when, self._on_timer)
        return
    if when is None:
        return
    if not self._timer_thread:
        self._timer_thread = True
        _start_daemon(self._timer_loop, f"poolkit-timer-{self.address}")
    self._timer_cv.notify()


def _timer_loop(self: Pool[Any]) -> None:
    cv = self._timer_cv
    while True:
        with cv:
            while True:
                if self._core.state is PoolState.CLOSED:
                    self._timer_thread = False
                    return
                at = self._timer_at
                if at is None:
                    cv.wait()
                    continue
                delay = at - self._time()
                if delay <= 0:
                    break
                cv.wait(min(delay, _MAX_WAIT))  # (a deadline past what the platform can wait)
        try:
            self._on_timer()
        except Exception:  # a bug: logged, and the timer goes on (no deadline may be lost)
            _log.exception("the timer of pool %s raised", self.address)


def _on_timer(self: Pool[Any]) -> None:
    with self._lock:
        armed = self._timer_at
        self._timer_at = None
        self._timer_handle = None
        now = self._time()
        if armed is not None and now < armed:
            now = armed
        core = self._core
        core.observed = self._sink.observed()
        orphans = self._orphans
        while orphans:  # watched leases garbage-collected while out
            core.lease_collected(orphans.popleft(), now)
        core.fire_timers(now)
        core.timers.dirty = True
        actions = self._take_locked()
    self._carry_out(actions)
