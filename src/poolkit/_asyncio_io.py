"""How ``AsyncPool`` runs what the core decides: connects, keep-alive probes, checks and resets
as tasks of its own (a plain check or reset at once), and closes. (Its tie to one event loop and
its loop timer are in ``asyncio``.)

Rules of this module
--------------------
* Connects run in tasks the pool owns, never in a checkout's task: cancelling a checkout never
  cancels or leaks a connect. Every task the pool spawns is kept until done (``close`` waits for
  them), and one that never ran is reported as its coroutine would have been.
* User code (connect, configure, probe, check, reset, close) runs outside every core input: in
  the pool's tasks, or, a plain check or reset, in the step that carries out the core's actions.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._base import NO_OUTPUT, PoolBase
from ._core import Conn, PoolCore, StartCheck, StartKeepAlive, StartReset
from ._frontend import ConnectContext, Lease, call_close, unwrap
from .errors import ConnectCancelledError

C = TypeVar("C")
T = TypeVar("T")
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


class TaskIO(PoolBase[C]):
    """``AsyncPool`` less its public checkout and close: the loop, tasks and timer."""

    _CONNECT_KIND = "an async function"

    def _init_io(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: the end of closing, once ``close()`` began it (shielded from its callers)
        self._closing: asyncio.Task[None] | None = None

    def _feed(self, step: Callable[[PoolCore, float], T]) -> T:
        """``PoolBase._feed`` without the lock (one thread: there is none to take)."""
        result = step(self._input(), self._time())
        actions = self._take_locked()
        if actions is not NO_OUTPUT:
            self._carry_out(actions)
        return result

    @staticmethod
    def _wake(owner: Any) -> None:
        """Tell a completed request's owner: a checkout's future (a cancelled waiter's task
        resumes with CancelledError and gives back what it was handed), or a request object's
        completion."""
        if isinstance(owner, asyncio.Future):
            if not owner.done():
                owner.set_result(None)
        else:
            owner()

    def _spawn(
        self, work: Any, name: str, if_cancelled: Callable[[], None] | None = None
    ) -> asyncio.Task[Any]:
        """A task of the pool's own (kept until done, so that ``close`` and the loop see it).
        Raises if it cannot be made (the pool's loop is closed, or this is not its loop), and
        then ``work`` is closed, never left un-awaited.

        ``if_cancelled`` is called if the task ends cancelled: the pool's coroutines catch their
        cancellation and report it, so this happens when the task was cancelled before its first
        step (a clear or a loop shutdown in the same iteration) and ``work`` never ran to say so.
        """
        try:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if self._loop is None or running is not self._loop:
                raise RuntimeError(
                    f"AsyncPool ({self.address}) runs on the event loop it first ran on, and it "
                    "is not running here (make one pool per event loop)"
                )
            task = self._loop.create_task(work, name=name)
        except BaseException:
            work.close()
            raise
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if if_cancelled is not None:
            task.add_done_callback(lambda done: if_cancelled() if done.cancelled() else None)
        return task

    # ------------------------------------------------------------------ connects and probes

    def _start_connect(self, conn: Conn) -> None:
        ctx = ConnectContext(conn.id, self._connect_address, self, conn.generation)
        conn.handle = ctx

        def never_ran() -> None:
            self._connect_ended(conn, self._cancelled(conn))

        work = self._run_connect(conn, ctx)
        ctx._task = self._spawn(work, f"poolkit-connect-{conn.id}", never_ran)

    async def _run_connect(self, conn: Conn, ctx: ConnectContext) -> None:
        try:
            pending = self._connect(ctx)
            if not inspect.isawaitable(pending):
                _close_quietly(pending)
                raise TypeError(
                    f"AsyncPool's connect function returned {pending!r}, not an awaitable: it "
                    "must be an async function (for a plain one use poolkit.Pool)"
                )
            result = await pending
            if self._configure is not None:
                await self._configured(result)
        except asyncio.CancelledError:
            # Abandoned by the pool (then the core already closed the record) or cancelled from
            # outside (loop shutdown): either way the connect failed, and a waiter is told so
            # with a pool error, not with a cancellation of its own.
            self._connect_ended(conn, self._cancelled(conn))
            return
        except GeneratorExit:  # closed unfinished (its loop is gone): nothing to tell the pool
            raise
        except BaseException as exc:
            self._connect_over(conn, None, exc)
            return
        self._connect_over(conn, result)

    async def _configured(self, result: Any) -> None:
        """``hooks.configure`` on a new connection; if it fails (or is cancelled), the connection
        is closed before the error goes on: the connect failed."""
        connection = unwrap(result)[0]
        try:
            assert self._configure is not None
            done = self._configure(connection)
            if inspect.isawaitable(done):
                await done
        except BaseException:
            try:
                closing = call_close(connection, prefer_aclose=True)
                if inspect.isawaitable(closing):
                    await closing
            except Exception:
                _log.exception("closing connection of %s after configure failed", self.address)
            raise

    def _cancelled(self, conn: Conn) -> ConnectCancelledError:
        return ConnectCancelledError(address=self.address, connection_id=conn.id)

    def _release(self, lease: Lease[Any], clean: bool = False) -> None:
        """A check-in that the lease's fast path did not take. When it starts the connection's
        reset (every check-in of a pool with ``hooks.reset``, unless ``clean``) and the reset
        answers at once (a plain result: the backends' resets do for a clean connection), the
        reset's end is reported in the same step: no second pass through the action list."""
        reset = self._reset
        if reset is None or clean:
            super()._release(lease, clean)
            return
        core = self._input()
        conn = lease._conn
        self._check_in(core, lease, self._time(), clean)
        actions = self._take_locked()
        if len(actions) != 1 or type(actions[0]) is not StartReset:
            if actions is not NO_OUTPUT:
                self._carry_out(actions)
            return
        action = actions[0]
        try:
            result = reset(conn.connection)
        except BaseException as exc:
            error = exc  # (``exc`` is unbound after the block: the step keeps its own name)
            self._feed(lambda core, now: core.reset_done(conn, now, error))
            if not isinstance(error, Exception):
                raise
            return
        if result is None or not inspect.isawaitable(result):
            core.reset_done(conn, self._time())
            actions = self._take_locked()
            if actions is not NO_OUTPUT:
                self._carry_out(actions)
            return
        self._await_apart(action, result, "reset")  # (raises if no task can be made)

    def _run_hook(
        self, action: StartCheck | StartReset | StartKeepAlive
    ) -> tuple[BaseException | None] | None:
        """A check, reset or keep-alive probe: the function is called here; a plain result (a
        plain function, as a check that only asks ``is_closed()``) ends it at once, an awaitable
        is awaited in a task of the pool's own, which a close of the connection cancels."""
        conn = action.conn
        function, name = self._hook_of(action)
        try:
            result = function(conn.connection)
        except Exception as exc:
            return (exc,)
        if not inspect.isawaitable(result):
            return (None,)
        self._await_apart(action, result, name)
        return None

    def _await_apart(
        self, action: StartCheck | StartReset | StartKeepAlive, result: Awaitable[Any], name: str
    ) -> None:
        """Await ``result`` (what ``action``'s hook returned) in a task of the pool's own, which
        a close of the connection cancels; it reports its end itself (``_hook_ended``)."""
        conn = action.conn

        def never_ran() -> None:  # (cancelled before it awaited the hook: not left un-awaited)
            if inspect.iscoroutine(result):
                result.close()
            if conn.handle is task:
                conn.handle = None
            self._hook_ended(action, asyncio.CancelledError())

        try:
            work = self._await_hook(action, result)
            task = conn.handle = self._spawn(work, f"poolkit-{name}-{conn.id}", never_ran)
        except BaseException:
            if inspect.iscoroutine(result):
                result.close()
            raise

    async def _await_hook(
        self, action: StartCheck | StartReset | StartKeepAlive, result: Awaitable[Any]
    ) -> None:
        conn = action.conn
        error: BaseException | None = None
        try:
            await result
        except GeneratorExit:  # closed unfinished (its loop is gone): nothing to tell the pool
            raise
        except BaseException as exc:  # CancelledError too: the pool closed the connection, or
            error = exc  # (the connection still open) someone else cancelled the task
        if conn.handle is asyncio.current_task():
            conn.handle = None  # over: a close from here on has nothing to cancel
        self._hook_ended(action, error)
        if error is not None and not isinstance(error, Exception | asyncio.CancelledError):
            raise error

    # ------------------------------------------------------------------ closes

    def _close_connection(self, conn: Conn, connection: Any, pending: bool) -> None:
        handle = conn.handle
        if isinstance(handle, asyncio.Future) and not handle.done():
            handle.cancel()  # a keep-alive probe, check or reset in flight
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
            work = _await_close(result, conn.id, self.address)

            def never_ran() -> None:  # (cancelled before it awaited the close: not left un-awaited)
                if inspect.iscoroutine(result):
                    result.close()  # (no-op if it ran)

            try:
                self._spawn(work, f"poolkit-close-{conn.id}", never_ran)
            except RuntimeError:
                if inspect.iscoroutine(result):
                    result.close()
                _log.exception("connection %d of %s could not be closed", conn.id, self.address)

    # ------------------------------------------------------------------ leases lost, fork

    def _reap_soon(self) -> None:
        """``_reap`` from wherever a lease was collected (a closed pool has no next step to do
        it): soon on the pool's loop (the collection may have happened inside a core call), or
        at once if that loop is gone."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._reap)
        else:
            self._reap()

    def _reset_io_after_fork(self) -> None:
        self._init_io()
        if self._clock is None:
            self._time = time.monotonic
