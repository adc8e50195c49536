"""``Pool``: the pool for threads, safe to use from any thread; the whole front end in this
module.

Read top to bottom: the check-out and check-in fast paths as the lease (``_ThreadLease``) and
``connection()``'s block (``_Block``) run them; then ``Pool``: how it feeds the core (``_step``:
under its lock), ``close``, ``checkout``, ``checkin`` and the one place a check-in hands a
connection to a waiting checkout (``_handed_off``; a slow-path hand-off wakes the waiter through
``_wake``), the slow check-in (``_release``, which runs a reset in the caller), and the I/O: the
threads that connect and probe, the checks and resets run in the caller, the closes, the timer
thread. What both pools share (the arguments, the core's output taken and dispatched, the public
steps that only feed the core) is ``_base.PoolBase``, the one base class, of which this module
redefines nothing.

Rules of this module
--------------------
* Every decision is the core's, under the pool's lock (``_lock``): a method here takes it only to
  feed the core and take its output, and calls user code (connect, check, reset, probe, close)
  with it released. The fast paths (the check-out: ``checkout`` and ``_Block.__enter__``; the
  check-in: ``_ThreadLease.release``, which ``checkin`` calls, and ``_Block.__exit__``) take it
  for one turn, and run only when nobody observes the pool. The block's two are inlined copies of
  the lease's (its exit is the most common check-in: the call saved is measurable, see
  ``docs/architecture.md``); ``tests/pools/test_handoffs.py`` holds each pair to one behaviour,
  and ``python tools/mutate_handoffs.py`` removes each step of each in turn.
* A waiting checkout blocks on a per-request signal that only the core's completion sets: the
  checkout's timeout is a deadline in the core, not a local wait.
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
* After ``os.fork()`` the child's pool gets new locks and forgets the parent's connections without
  closing them (``_reset_after_fork``).
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from types import TracebackType
from typing import Any, Generic, TypeVar, Unpack, final, overload

from ._base import DEFAULT, FOLD_WAITS, NO_OUTPUT, PoolArguments, PoolBase
from ._core import (
    Action,
    Conn,
    ConnState,
    PoolCore,
    Request,
    StartCheck,
    StartKeepAlive,
    StartReset,
)
from ._frontend import (
    ConnectContext,
    DrivenClock,
    Established,
    Lease,
    block_repr,
    call_close,
    check_timeout,
    unwrap,
    watched,
)
from ._requests import RequestBook
from .log import _cached_level
from .options import PoolOptions
from .stats import PoolState

__all__ = ["Pool"]

C = TypeVar("C")
T = TypeVar("T")
_log = logging.getLogger("poolkit.pool")
_CHECKING = ConnState.CHECKING
_S_CLOSED = ConnState.CLOSED
#: a ``connection()`` block's ``_state`` once entered (see ``_Block``)
_ENTERED: Any = object()


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


#: how long the timer thread of a pool waits at most between two looks at whether the pool is
#: still referenced (see ``_timer_loop``)
_GONE_CHECK = 5.0


def _timer_loop(ref: weakref.ReferenceType[Pool[Any]], cv: threading.Condition) -> None:
    """The timer thread of a ``Pool`` (one without a ``call_at``): it waits for the earliest
    deadline and fires it, until the pool closes.

    It holds the pool only while it looks at it and fires its timer, never while it waits: a pool
    dropped without ``close()`` is collected, as psycopg_pool's is, with the connections it held,
    and the thread ends at its next look (a ready pool's background run is due every second or
    so; at most ``_GONE_CHECK`` seconds later)."""
    while True:
        with cv:
            while True:
                pool = ref()
                if pool is None:
                    return
                if pool._core.state is PoolState.CLOSED:
                    pool._timer_thread = False
                    return
                at = pool._timer_at
                if at is None:
                    delay = _GONE_CHECK
                else:
                    delay = at - pool._time()
                    if delay <= 0:
                        break
                    delay = min(delay, _GONE_CHECK)
                del pool  # (not held while waiting)
                cv.wait(delay)
        try:
            pool._on_timer()
        except Exception:  # a bug: logged, and the timer goes on (no deadline may be lost)
            _log.exception("the timer of pool %s raised", pool.address)
        del pool


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


class _ThreadLease(Lease[Any]):
    """Pool's lease: ``release`` is the check-in fast path (see "Fast paths" in
    ``_core.handout``)."""

    __slots__ = ()

    def release(self, reset: bool = True) -> None:
        # the pool, or its ``Returned`` marker once given back: ``Returned._quick`` is false, so
        # that a lease given back takes the slow path, which raises
        pool: Pool[Any] = self._pool  # type: ignore[assignment]  # (or Returned)
        # nobody listening (no listener, DEBUG known to be off: the logger's cached answer for
        # level 10), and the core takes it back without more ado
        if pool._quick and _cached_level(10) is False:
            # <fast-check-in>
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                # (``reset=False``: its caller reset it; also where a reset hook keeps the other
                # off)
                taken = self._pool is pool and (
                    pool._fast.release_idle(self._conn)
                    if reset
                    else pool._fast.release_idle_clean(self._conn)
                )
                if taken is not False:
                    self._pool = pool._returned
            finally:
                lock.release()
            if taken is True:
                return
            if taken is not False:  # handed to a waiter: woken outside the lock
                pool._handed_off(taken)
                return
            # </fast-check-in>
        # the slow path (the Returned marker: raises "already returned")
        pool._release(self, not reset)


@final
class _Block(_ThreadLease, Generic[C]):
    """What ``Pool.connection()`` returns: it checks out on entry and gives back on exit.

    A class, not a ``contextmanager`` (which cost four times a checkout and check-in). Where
    ``checkout``'s fast path applies the block is the lease itself (one object made, not two);
    else it holds the lease ``checkout`` returned. Until entered it is a lease given back (its
    ``_pool`` the pool's ``Returned`` marker): collected unentered, it has nothing to give
    back."""

    __slots__ = ("_owner", "_state")
    _owner: Pool[C]  #: the pool
    #: until entered, the ``timeout`` given to ``connection()``; then ``_ENTERED`` (the block is
    #: the lease, or its checkout failed) or the lease ``checkout`` returned
    _state: Any

    def __enter__(self) -> C:
        pool = self._owner
        state = self._state
        # ``checkout``'s fast path inlined (a call less; a timeout given is checked by
        # ``checkout``): nobody listening and a connection available
        if state is DEFAULT and pool._quick and not pool._waiting and _cached_level(10) is False:
            self._state = _ENTERED
            # (``checkout``'s fast path, inlined: a call less)
            # <fast-check-out copy>
            core = pool._core
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                if pool._check is None:
                    conn = core.fast.lease_idle(pool._time() if pool._clocked else 0.0)
                else:  # (the check, if one is due, runs here, in the caller)
                    conn = core.lease_checking(pool._time())
                    if conn is not None and conn.state is _CHECKING:
                        pool._hook_begun(conn)
                left = conn is not None and (bool(core.actions) or core.timers.dirty)
            finally:
                lock.release()
            if left:
                pool._after_core()  # perished connections closed on the way, the timer armed
            # </fast-check-out copy>
            if conn is not None and (conn.state is not _CHECKING or pool._check_inline(conn)):
                self._conn = conn  # the block is the lease
                self._pool = pool
                if pool._lend is None:
                    return conn.connection  # type: ignore[no-any-return]  # (the core keeps Any)
                self._lent = None
                lease: Lease[C] = self
            else:
                lease = self._state = pool.checkout()
        else:
            if state is _ENTERED or isinstance(state, Lease):
                raise RuntimeError("a pool.connection() block can be entered only once")
            self._state = _ENTERED
            lease = self._state = pool.checkout(state)
        try:
            return lease.connection  # (``hooks.lend`` may raise)
        except BaseException as exc:
            pool._left(lease, exc)
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # the pool while the block is the lease out; its ``Returned`` marker (``_quick_exit``
        # false) if the block holds a lease from ``checkout`` (or was given back meanwhile)
        pool: Pool[C] = self._pool  # type: ignore[assignment]  # (or Returned)
        if error is None and pool._quick_exit and _cached_level(10) is False:
            # (``_ThreadLease.release``'s fast path, inlined: a call less)
            # <fast-check-in copy: if reset -> if True>
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                # (``reset=False``: its caller reset it; also where a reset hook keeps the other
                # off)
                taken = self._pool is pool and (
                    pool._fast.release_idle(self._conn)
                    if True
                    else pool._fast.release_idle_clean(self._conn)
                )
                if taken is not False:
                    self._pool = pool._returned
            finally:
                lock.release()
            if taken is True:
                return
            if taken is not False:  # handed to a waiter: woken outside the lock
                pool._handed_off(taken)
                return
            # </fast-check-in copy>
        state = self._state
        lease: Lease[C] = self if state is _ENTERED else state
        owner = self._owner
        if owner._end is not None:
            self._ended(lease, owner._end, error)
        elif error is None:
            lease.release()
        else:
            owner._left(lease, error)

    def _ended(
        self,
        lease: Lease[C],
        end: Callable[[C, BaseException | None], Any],
        error: BaseException | None,
    ) -> None:
        """The exit with ``hooks.end``: run in the caller before the check-in. After an error
        what it raises is logged (the block's error is the one the caller sees); on success it
        is raised, as the block's error would be."""
        pool = self._owner
        # what the block got (``lease.connection``, which raises once a lease is given back)
        connection = lease._conn.connection if pool._lend is None else lease._lent
        if error is None:
            try:
                result = end(connection, None)
            except BaseException as exc:
                pool._left(lease, exc)
                raise
            if result is True:  # it reset the connection itself: no reset at check-in
                pool._release_clean(lease)
            else:
                lease.release()
            return
        if isinstance(error, Exception):
            try:
                end(connection, error)
            except Exception:
                _log.exception("hooks.end of pool %s raised after %r", pool.address, error)
            except BaseException as exc:
                lease.discard(exc)
                raise
        pool._left(lease, error)

    def __repr__(self) -> str:
        return block_repr(self, self._state, _ENTERED, self._owner.address)


@final
class Pool(PoolBase[C]):
    """A connection pool for threads.

    ``connect`` is a function taking a :class:`~poolkit.ConnectContext` and returning the
    connection (anything with a ``close()`` method) or an :class:`~poolkit.Established`; the
    pool's type follows from it. Keyword arguments: ``address``, ``options``, ``listeners``,
    ``clock`` (see the README). A new pool is paused: call :meth:`ready` (or use ``with pool:``)
    before checking out.
    """

    _lease_class = _ThreadLease
    _watched_class = watched(_ThreadLease)

    @overload
    def __init__(
        self: Pool[C],
        connect: Callable[[ConnectContext], Established[C]],
        **kwargs: Unpack[PoolArguments],
    ) -> None: ...
    @overload
    def __init__(
        self: Pool[C], connect: Callable[[ConnectContext], C], **kwargs: Unpack[PoolArguments]
    ) -> None: ...
    def __init__(
        self, connect: Callable[[ConnectContext], Any], **kwargs: Unpack[PoolArguments]
    ) -> None:
        #: the lock of every input to the core (the fast paths take it by hand)
        self._lock = threading.Lock()
        self._setup(connect, "a function", self._refuse, **kwargs)
        self._book = RequestBook(self._lock)
        self._init_io()
        self._after_core()

    @staticmethod
    def _refuse(connect: Callable[..., Any], options: PoolOptions) -> None:
        """Refuse an async connect function, hook or probe: ``Pool`` runs plain functions."""
        if inspect.iscoroutinefunction(connect):
            raise TypeError(
                f"Pool(connect=...) must be a plain function (Pool runs on threads), got the "
                f"async function {connect!r}: use poolkit.AsyncPool for it"
            )
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

    def _step(self, step: Callable[[PoolCore, float], T]) -> tuple[T, list[Action]]:
        """``step(core, now)`` under the lock, and the core's output taken: the locked half of
        ``_feed``."""
        with self._lock:
            return step(self._input(), self._time()), self._take_locked()

    @staticmethod
    def _bind(operation: str, *, required: bool = True) -> None:
        """``Pool`` runs on any thread: it binds to nothing."""

    def close(self) -> None:
        """Close the pool: close available and pending connections, fail waiting checkouts.
        Leased connections are closed when they come back."""
        self._feed(self._close_step)

    def __enter__(self) -> Pool[C]:
        self.ready()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def checkout(self, timeout: float | None = DEFAULT) -> Lease[C]:
        """Check out a connection, waiting at most ``timeout`` seconds (default:
        ``options.wait_queue_timeout``; ``None`` waits without limit)."""
        if timeout is not DEFAULT and timeout is not None:
            timeout = check_timeout(timeout)  # bad input fails before anything changes
        # The fast path (see "Fast paths" in ``_core.handout``): nobody listening (no listener,
        # DEBUG known to be off) and a connection available, in one turn of the lock. Not tried
        # when checkouts wait already (a peek without the lock): it would fail, and cost a turn
        # of the lock on the path of every checkout under contention.
        quick = self._quick and _cached_level(10) is False
        if quick and not self._waiting:
            pool = self
            # <fast-check-out>
            core = pool._core
            lock = pool._lock
            lock.acquire()  # by hand, not ``with``: half the cost (the ``finally`` lets it go)
            try:
                if pool._check is None:
                    conn = core.fast.lease_idle(pool._time() if pool._clocked else 0.0)
                else:  # (the check, if one is due, runs here, in the caller)
                    conn = core.lease_checking(pool._time())
                    if conn is not None and conn.state is _CHECKING:
                        pool._hook_begun(conn)
                left = conn is not None and (bool(core.actions) or core.timers.dirty)
            finally:
                lock.release()
            if left:
                pool._after_core()  # perished connections closed on the way, the timer armed
            # </fast-check-out>
            if conn is not None and (conn.state is not _CHECKING or pool._check_inline(conn)):
                lease = _ThreadLease()  # (``new_lease`` inlined)
                lease._conn = conn
                lease._lent = None
                lease._pool = self
                return lease
        if self._orphans:
            self._reap()  # a lease lost to the garbage collector may free a connection
        if timeout is DEFAULT:
            timeout = self.options.wait_queue_timeout
        wait: Callable[[], Any] | None = None
        actions = NO_OUTPUT
        lock = self._lock
        lock.acquire()  # (``_feed`` inlined: the path of every checkout that waits; ``_input``
        try:  # too where the fast paths' test already proves that nobody observes the pool)
            if quick:
                core = self._core
                core.observed = False
            else:
                core = self._input()
            now = self._time()
            req = Request(now, None if timeout is None else now + timeout)
            core.fast.request(req, now)
            if req.queued:  # (its owner is set before the lock is let go: a connect may serve it)
                wait, req.owner = self._new_signal()
            if core.actions or core.events or core.timers.dirty:
                actions = self._take_locked()
        finally:
            lock.release()
        if actions is not NO_OUTPUT:
            self._carry_out(actions)
        if wait is not None:
            try:
                wait()
            except BaseException:
                self._abandon(req)
                raise
        conn = req.conn
        if conn is not None and self._quick and conn.state is not _S_CLOSED:
            lease = _ThreadLease()  # (``_served``'s usual case inlined)
            lease._conn = conn
            lease._lent = None
            lease._pool = self
            return lease
        return self._served(req)

    def checkin(self, lease: Lease[C]) -> None:
        """Give ``lease`` back (same as ``lease.release()``)."""
        if type(lease) is _ThreadLease and lease._pool is self:  # (a plain lease of this pool, out)
            lease.release()
        else:
            self._checkin(lease, "Pool.checkin()")

    def _handed_off(self, taken: Request) -> None:
        """A check-in's fast path handed the connection to the waiting ``taken``: its wait is
        noted and it is woken, outside the lock."""
        waits = self._handoff_waits
        waits.append(self._time() - taken.started)
        taken.owner()
        if len(waits) >= FOLD_WAITS:
            self._feed(self._fold_waits)

    def connection(self, timeout: float | None = DEFAULT) -> AbstractContextManager[C]:
        """``with pool.connection() as conn:`` checks out and always gives back (left by a
        ``KeyboardInterrupt``, say, the connection is discarded: it may be mid-protocol), after
        ``hooks.end`` if set."""
        block: _Block[C] = _Block()  # (no ``__init__``: see ``Lease``)
        block._owner = self
        block._state = timeout
        block._pool = self._returned  # not out yet
        return block

    # ------------------------------------------------------------------ threads, hooks, closes

    @staticmethod
    def _wake(owner: Any) -> None:
        """A waiter's owner is its wake-up (a lock's release, a request object's completion)."""
        owner()

    def _init_io(self) -> None:
        """After ``PoolBase._setup``: the threads and waits (the clock's, if it runs them)."""
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
        self._sink.flush()  # the check-in's events, taken above: told before the reset runs
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
        else:
            self._sink.flush()  # (events taken before the hook ran, if any)
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
        when = self._core.take_deadline()
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
            cv = self._timer_cv
            _start_daemon(
                partial(_timer_loop, weakref.ref(self), cv), f"poolkit-timer-{self.address}"
            )
        self._timer_cv.notify()

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

    def _reset_after_fork(self) -> None:
        """In the child after ``os.fork()``: new locks; the parent's threads and hooks run on in
        the parent, not here."""
        self._lock = threading.Lock()
        self._timer_cv = threading.Condition(self._lock)
        self._timer_thread = False
        self._init_hooks_running()
        self._book = RequestBook(self._lock)
        self._forget_after_fork()
