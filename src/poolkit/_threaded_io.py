"""How ``Pool`` runs what the core decides: connects, keep-alive probes and closes on threads, a
timer thread for the core's earliest deadline, and the blocking waits of checkouts.

Rules of this module
--------------------
* One lock guards the core (``_base``'s rules): a method here takes it only to feed the core a
  result and take its output, and calls user code (connect, probe, close) with it released.
* Each connect and probe runs on a thread of its own. The core keeps the connects in flight
  within ``max_connecting``; a connect it abandoned (its timeout, a clear, close) keeps its
  thread until the connect function returns, and counts against the limits until then.
* A connection is never closed while a check, reset or probe runs on it in another thread (the
  hook's timeout, ``close()``, a clear): the close is put off until the hook returns, then done
  once (``_in_hooks``, ``_doomed``, under the pool's lock). Closing a driver's connection under a
  thread still using it frees its file descriptor for the next socket while the hook's thread
  still reads it: the next connect then hangs on a descriptor another thread owns.
* One timer thread per pool, started on first need, sleeps until the core's earliest deadline.
  A driven clock (``_frontend.DrivenClock``: the test clock) replaces it, and also runs the
  worker threads and the blocking waits: chosen once, when the pool is made.
"""

from __future__ import annotations

import inspect
import logging
import threading
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable
from typing import Any, TypeVar

from ._base import NO_OUTPUT, PoolBase
from ._core import Conn, PoolCore, StartCheck, StartKeepAlive, StartReset
from ._frontend import ConnectContext, DrivenClock, Lease, call_close, unwrap
from .options import PoolOptions
from .stats import PoolState

C = TypeVar("C")
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


def _call_hook(function: Callable[[Any], Any], name: str, conn: Conn) -> BaseException | None:
    """``function`` (a check, reset or probe called ``name``) on ``conn``'s connection: what it
    raised, or ``None``."""
    try:
        result = function(conn.connection)
        if result is not None:
            _not_awaitable(
                result,
                f"the {name} function returned an awaitable ({{!r}}): Pool needs plain functions",
            )
    except BaseException as exc:
        return exc
    return None


def _start_daemon(target: Callable[[], None], name: str) -> None:
    threading.Thread(target=target, name=name, daemon=True).start()


def _lock_signal() -> tuple[Callable[[], Any], Callable[[], Any]]:
    """A one-shot wake-up as ``(wait, wake)``: a lock taken at birth that ``wake`` releases."""
    lock = _allocate_lock()
    lock.acquire()
    return lock.acquire, lock.release


def _clock_signal(clock: DrivenClock) -> Callable[[], tuple[Callable[[], Any], Callable[[], Any]]]:
    """:func:`_lock_signal` of a driven clock: its waits count as blocked for its ``settle``."""

    def new_signal() -> tuple[Callable[[], Any], Callable[[], Any]]:
        signal = clock.new_signal()
        return signal.wait, signal.set

    return new_signal


class ThreadIO(PoolBase[C]):
    """``Pool`` less its public checkout and close: threads, the timer, the blocking waits."""

    _CONNECT_KIND = "a function"

    @staticmethod
    def _wake(owner: Any) -> None:
        """A waiter's owner is its wake-up (a lock's release, a request object's completion)."""
        owner()

    _lock: threading.Lock

    def _init_io(self) -> None:
        """After ``PoolBase.__init__``: the threads and waits (the clock's, if it runs them)."""
        clock = self._clock
        self._start_thread: Callable[[Callable[[], None], str], Any] = _start_daemon
        #: a checkout's wait and its wake-up, made when it must wait
        self._new_signal: Callable[[], tuple[Callable[[], Any], Callable[[], Any]]] = _lock_signal
        if isinstance(clock, DrivenClock):
            self._start_thread = clock.start_thread
            self._new_signal = _clock_signal(clock)
        self._timer_cv = threading.Condition(self._lock)
        self._timer_thread = False
        self._init_hooks_running()

    def _init_hooks_running(self) -> None:
        # (kept under the pool's lock, in the turns of it that a hook run takes anyway)
        #: connection id -> checks, resets and probes running on it now
        self._in_hooks: dict[int, int] = {}
        #: connection id -> the connection to close when its last hook returns
        self._doomed: dict[int, Any] = {}

    def _check_connect(self, connect: Callable[..., Any]) -> None:
        if inspect.iscoroutinefunction(connect):
            raise TypeError(
                f"Pool(connect=...) must be a plain function (Pool runs on threads), got the "
                f"async function {connect!r}: use poolkit.AsyncPool for it"
            )

    def _check_options(self, options: PoolOptions) -> None:
        functions = {} if options.hooks is None else options.hooks.functions()
        if options.keep_alive is not None:
            functions["keep_alive.probe"] = options.keep_alive.probe
        for name, function in functions.items():
            if inspect.iscoroutinefunction(function):
                what = name if "." in name else f"hooks.{name}"
                raise TypeError(
                    f"PoolOptions.{what} must be a plain function for Pool, got the async "
                    f"function {function!r}"
                )

    # ------------------------------------------------------------------ connects and probes

    def _start_connect(self, conn: Conn) -> None:
        ctx = ConnectContext(conn.id, self._connect_address, self, conn.generation)
        conn.handle = ctx
        self._start_thread(lambda: self._run_connect(conn, ctx), f"poolkit-connect-{conn.id}")

    def _run_connect(self, conn: Conn, ctx: ConnectContext) -> None:
        try:
            result = _not_awaitable(
                self._connect(ctx),
                "Pool's connect function returned an awaitable ({!r}), not a connection: an "
                "async connect needs poolkit.AsyncPool",
            )
            if self._configure is not None:
                self._configured(result)
        except BaseException as exc:
            self._connect_over(conn, None, exc)
            return
        self._connect_over(conn, result)

    def _configured(self, result: Any) -> None:
        """``hooks.configure`` on a new connection; if it fails, the connection is closed before
        the error goes on: the connect failed."""
        connection = unwrap(result)[0]
        try:
            assert self._configure is not None
            _not_awaitable(
                self._configure(connection),
                "Hooks.configure returned an awaitable ({!r}): Pool needs a plain function",
            )
        except BaseException:
            try:
                call_close(connection)
            except Exception:
                _log.exception("closing connection of %s after configure failed", self.address)
            raise

    def _run_hook(
        self, action: StartCheck | StartReset | StartKeepAlive
    ) -> tuple[BaseException | None] | None:
        """A keep-alive probe on a thread of its own (the timer's thread must not wait for it); a
        check or reset inline, in the thread carrying out the action (the checkout's, the
        check-in's), as psycopg_pool does: no thread per run."""
        if type(action) is StartKeepAlive:
            name = f"poolkit-keep-alive-{action.conn.id}"
            self._start_thread(lambda: self._run_probe(action), name)
            return None
        return self._run_inline(action)

    def _run_inline(
        self, action: StartCheck | StartReset | StartKeepAlive
    ) -> tuple[BaseException | None]:
        function, name = self._hook_of(action)
        return self._run_on(function, name, action.conn)

    def _run_on(
        self, function: Callable[[Any], Any], name: str, conn: Conn
    ) -> tuple[BaseException | None]:
        """``function`` (a check, reset or probe called ``name``) on ``conn``, in this thread:
        ``(error,)``, ``error`` ``None`` if it returned. Meanwhile ``conn`` is not closed under
        it (``_hook_begun``, ``_hook_over``)."""
        with self._lock:
            self._hook_begun(conn)
        error = _call_hook(function, name, conn)
        with self._lock:
            connection = self._hook_over(conn)
        if connection is not None:
            self._close_now(conn, connection)
        return (error,)

    def _hook_begun(self, conn: Conn) -> None:
        """Under the lock: a check, reset or probe starts on ``conn`` (it is not closed until
        the hook returns)."""
        self._in_hooks[conn.id] = self._in_hooks.get(conn.id, 0) + 1

    def _hook_over(self, conn: Conn) -> Any:
        """Under the lock: a hook on ``conn`` returned. If the pool closed the connection
        meanwhile and no other hook uses it, it is returned: the caller closes it (after
        letting go of the lock)."""
        in_hooks = self._in_hooks
        running = in_hooks[conn.id] - 1
        if running:
            in_hooks[conn.id] = running
            return None
        del in_hooks[conn.id]
        return self._doomed.pop(conn.id, None)

    def _check_inline(self, conn: Conn) -> bool:
        """The check that the core's ``lease_checking`` started on ``conn`` for this caller
        (``_hook_begun`` in the same turn of the lock), run here, and its result reported:
        whether ``conn`` is now leased to the caller (else the checkout goes on through the
        queue). A ``KeyboardInterrupt`` in the check is raised once reported."""
        check = self._check
        assert check is not None
        error = _call_hook(check, "check", conn)
        with self._lock:
            doomed = self._hook_over(conn)
            passed = self._input().checked(conn, self._time(), error)
            actions = self._take_locked()
        self._after_hook(conn, doomed, actions, error)
        return passed

    def _release(self, lease: Lease[Any], clean: bool = False) -> None:
        """A check-in that the lease's fast path did not take. When it starts the connection's
        reset (as it does on every check-in of a pool with ``hooks.reset``, unless ``clean``),
        the reset runs here at once, in the caller (as psycopg_pool's does), and its result is
        reported: two turns of the lock, and nothing else between them."""
        conn = lease._conn
        with self._lock:
            self._check_in(self._input(), lease, self._time(), clean)
            actions = self._take_locked()
            inline = len(actions) == 1 and type(actions[0]) is StartReset
            if inline:
                self._hook_begun(conn)
        if not inline:
            if actions is not NO_OUTPUT:
                self._carry_out(actions)
            return
        reset = self._reset
        assert reset is not None
        error = _call_hook(reset, "reset", conn)
        with self._lock:
            doomed = self._hook_over(conn)
            self._input().reset_done(conn, self._time(), error)
            actions = self._take_locked()
        self._after_hook(conn, doomed, actions, error)

    def _after_hook(
        self, conn: Conn, doomed: Any, actions: list[Any], error: BaseException | None
    ) -> None:
        """After a check or reset run in the caller was reported: close the connection if the
        pool closed it meanwhile (``doomed``), carry out the output, raise a
        ``KeyboardInterrupt`` the hook raised."""
        if doomed is not None:
            self._close_now(conn, doomed)
        if actions is not NO_OUTPUT:
            self._carry_out(actions)
        if error is not None and not isinstance(error, Exception):
            raise error

    def _run_probe(self, action: StartKeepAlive) -> None:
        (error,) = self._run_inline(action)
        self._hook_ended(action, error)
        if error is not None and not isinstance(error, Exception):
            raise error

    def _close_connection(self, conn: Conn, connection: Any, pending: bool) -> None:
        if pending:
            ctx: ConnectContext | None = conn.handle
            if ctx is not None:
                ctx._cancelled = True  # the connect function may poll it; its thread runs on
            return
        with self._lock:
            if conn.id in self._in_hooks:  # (a hook's thread still uses it: closed on return)
                self._doomed[conn.id] = connection
                return
        self._close_now(conn, connection)

    def _close_now(self, conn: Conn, connection: Any) -> None:
        try:
            call_close(connection)
        except Exception:
            _log.exception("closing connection %d of %s raised", conn.id, self.address)

    # ------------------------------------------------------------------ the timer

    def _rearm_locked(self) -> None:
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

    def _timer_loop(self) -> None:
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

    def _close_step(self, core: PoolCore, now: float) -> None:
        """``close``'s input: the core closes; the timer thread wakes to end."""
        core.close(now)
        self._timer_cv.notify_all()

    # ------------------------------------------------------------------ leases lost, fork

    def _reap_soon(self) -> None:
        """``_reap`` from wherever a lease was collected (a closed pool has no next step to do
        it): at once if the lock is free, else on a thread of its own (the collection may have
        happened inside this thread's locked section)."""
        if self._lock.acquire(blocking=False):
            self._lock.release()
            self._reap()
        else:
            self._start_thread(self._reap, "poolkit-reap")

    def _reset_io_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._timer_cv = threading.Condition(self._lock)
        self._timer_thread = False
        self._init_hooks_running()  # (the parent's hooks run on in the parent, not here)
