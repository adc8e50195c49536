"""``AsyncPool``: the pool on an asyncio event loop, the whole front end in this module.

Read top to bottom: the check-out and check-in fast paths as the lease (``_AsyncLease``) and
``connection()``'s block (``_Block``) run them; then ``AsyncPool``: how it feeds the core
(``_step``: no lock, one thread), its loop and timer, ``close``, ``checkout``, ``checkin`` and the
one place a check-in hands a connection to a waiting checkout (``_handed_off``; a slow-path
hand-off wakes the waiter through ``_wake``), the slow check-in (``_release``), and the I/O: the
tasks that connect, run hooks and close. What both pools share (the arguments, the core's output
taken and dispatched, the public steps that only feed the core) is ``_base.PoolBase``, the one
base class, of which this module redefines nothing.

Rules of this module
--------------------
* Every decision is the core's. The fast paths (the check-out: ``checkout`` and
  ``_Block.__aenter__``; the check-in: ``_AsyncLease.release``, which ``checkin`` calls, and
  ``_Block._exit``) run only when nobody observes the pool. The block's two are inlined copies
  of the lease's (its exit is the most common check-in: the call saved is measurable, see
  ``docs/architecture.md``); ``tests/pools/test_handoffs.py`` holds each pair to one behaviour,
  and ``python tools/mutate_handoffs.py`` removes each step of each in turn.
* One timer stands for the core's earliest deadline: ``loop.call_at`` on the pool's loop
  (``call_later`` with a clock of the user's, whose time is not the loop's), or the test clock's
  own ``call_at``.
* The pool binds to the running loop on first use that needs one (``ready``, a checkout that
  waits) and refuses any other loop afterwards, like asyncio's own primitives.
* An adaptive pool on asyncio's own clock tells the core its loop's lag (issue 40) every
  ``LAG_EVERY`` seconds: how long a callback made ready waits to run, the delay every
  operation's answer also waits (a timer's lateness would add the selector's rounding, up to a
  millisecond). The watch holds the pool weakly and ends with ``close``.
* A waiting checkout waits on a plain future. When its task is cancelled it tells the core as
  soon as it resumes; if the core handed it a connection in the meantime (the same loop
  iteration), it gives that connection straight back, so nothing is lost.
* Connects run in tasks the pool owns, never in a checkout's task: cancelling a checkout never
  cancels or leaks a connect. Every task the pool spawns is kept until done (``close`` waits for
  them), and one that never ran is reported as its coroutine would have been.
* User code (connect, configure, probe, check, reset, close) runs outside every core input: in
  the pool's tasks, or, a plain check or reset, in the step that carries out the core's actions.
* Under trio (issue 41) the pool binds to the trio run instead of a loop, once, and its I/O is
  ``poolkit._trio.TrioIO``'s from then on: ``_bind_loop``, ``_spawn``, the timer
  (``_rearm_locked``), ``close`` and ``__aenter__``/``__aexit__`` ask it, where they bind or
  where asyncio's loop would be; the fast paths never look at it (a trio waiter is called, as a
  request object's completion is: ``_wake``), and the waiting checkout catches the bound
  library's cancellation (``_cancel_errors``). Nothing here imports trio.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import threading
import time
import types
import weakref
from collections.abc import Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Unpack, cast, final, overload

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
    Established,
    Lease,
    ThreadLoad,
    block_repr,
    call_close,
    check_timeout,
    tell_client,
    unwrap,
    watched,
)
from ._requests import RequestBook
from .errors import ConnectCancelledError
from .log import _cached_level
from .options import PoolOptions

if TYPE_CHECKING:
    from ._trio import TrioIO

_Future = asyncio.Future
#: seconds between two measures of an adaptive pool's loop lag (``AsyncPool._watch_lag``)
LAG_EVERY = 0.01

#: the running loop of this thread, or None (asyncio's C function: no exception to catch)
_running_loop = asyncio._get_running_loop
_S_CLOSED = ConnState.CLOSED


def _trio_running() -> bool:
    """Whether trio runs in this thread (read without importing trio: not imported, not
    running)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


__all__ = ["AsyncPool"]

C = TypeVar("C")
T = TypeVar("T")
_log = logging.getLogger("poolkit.pool")
#: a ``connection()`` block's ``_state`` once entered (see ``_Block``)
_ENTERED: Any = object()


@types.coroutine
def _nothing() -> Generator[Any, None, None]:
    return
    yield


#: what ``connection()``'s exit returns when it has nothing left to wait for: a generator-based
#: coroutine run to its end, which ``await`` then finishes at once with ``None`` every time (as
#: ``yield from`` an exhausted generator does); unlike a coroutine it is made once, and unlike a
#: done future it belongs to no loop. Awaiting it costs a third of a coroutine.
_DONE: Awaitable[None] = _nothing()
next(cast(Generator[Any, None, None], _DONE), None)  # (run to its end: it yields nothing)


def _close_quietly(connection: Any) -> None:
    """Close what a misused connect function returned, so that nothing leaks."""
    try:
        result = call_close(connection)
        if inspect.iscoroutine(result):
            result.close()
    except Exception:
        _log.exception("closing %r raised", connection)


async def _await_close(
    result: Awaitable[Any], conn_id: int, address: str, lives: list[Any] | None = None
) -> None:
    try:
        await result
    except Exception:
        _log.exception("closing connection %d of %s raised", conn_id, address)
    finally:
        if lives is not None:  # (the connection's own tasks: over once it is closed)
            _cancel_all(lives)


def _cancel_all(tasks: list[Any]) -> None:
    """Cancel each task (asyncio's, or the trio I/O's) of a connection's life."""
    for task in list(tasks):
        if not task.done():
            task.cancel()


class _AsyncLease(Lease[Any]):
    """AsyncPool's lease: ``release`` is the check-in fast path (see "Fast paths" in
    ``_core.handout``)."""

    __slots__ = ()

    def release(self, reset: bool = True) -> None:
        # the pool, or its ``Returned`` marker once given back: ``Returned._quick`` is false, so
        # that a lease given back takes the slow path, which raises
        pool: AsyncPool[Any] = self._pool  # type: ignore[assignment]  # (or Returned)
        # nobody listening (no listener, DEBUG known to be off: the logger's cached answer for
        # level 10), and the core takes it back without more ado
        if pool._quick and _cached_level(10) is False:
            # <fast-check-in>
            # (``reset=False``: its caller reset it; also where a reset hook keeps the other off)
            taken = (
                pool._fast.release_idle(self._conn)
                if reset
                else pool._fast.release_idle_clean(self._conn)
            )
            if taken is not False:
                self._pool = pool._returned
                if taken is not True:  # handed to a waiter: wake it
                    pool._handed_off(taken)
                return
            # </fast-check-in>
        # the slow path (the Returned marker: raises "already returned")
        pool._release(self, not reset)


@final
class _Block(_AsyncLease, Generic[C]):
    """What ``AsyncPool.connection()`` returns: it checks out on entry and gives back on exit.

    A class, not an ``asynccontextmanager`` (which cost five times a checkout and check-in).
    Where ``checkout``'s fast path applies the block is the lease itself (one object made, not
    two); else it holds the lease ``checkout`` returned. Until entered it is a lease given back
    (its ``_pool`` the pool's ``Returned`` marker): collected unentered, it has nothing to give
    back. ``__aexit__`` is a plain method that returns ``_DONE`` where nothing is left to wait
    for (the exit with ``hooks.end`` is a coroutine): a coroutine less."""

    __slots__ = ("_owner", "_state")
    _owner: AsyncPool[C]  #: the pool
    #: until entered, the ``timeout`` given to ``connection()``; then ``_ENTERED`` (the block is
    #: the lease, or its checkout failed) or the lease ``checkout`` returned
    _state: Any

    async def __aenter__(self) -> C:
        pool = self._owner
        state = self._state
        # ``checkout``'s fast path inlined (a coroutine less; a timeout given is checked by
        # ``checkout``): nobody listening and a connection available
        if state is DEFAULT and pool._quick and not pool._waiting and _cached_level(10) is False:
            self._state = _ENTERED
            # (``checkout``'s fast path, inlined: a coroutine less)
            # <fast-check-out copy>
            core = pool._core
            conn = core.fast.lease_idle(pool._time() if pool._clocked else 0.0)
            if core.actions:
                pool._after_core()  # perished connections closed on the way
            # </fast-check-out copy>
            if conn is not None:
                self._conn = conn  # the block is the lease
                self._pool = pool
                if pool._lend is None:
                    return conn.connection  # type: ignore[no-any-return]  # (the core keeps Any)
                self._lent = None
                lease: Lease[C] = self
            else:
                lease = self._state = await pool.checkout()
        else:
            if state is _ENTERED or isinstance(state, Lease):
                raise RuntimeError("a pool.connection() block can be entered only once")
            self._state = _ENTERED
            lease = self._state = await pool.checkout(state)
        try:
            return lease.connection  # (``hooks.lend`` may raise)
        except BaseException as exc:
            pool._left(lease, exc)
            raise

    def _exit(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> Awaitable[None]:
        """``__aexit__``: a plain method that returns what to await (see the class)."""
        # the pool while the block is the lease out; its ``Returned`` marker (``_quick_exit``
        # false) if the block holds a lease from ``checkout`` (or was given back meanwhile)
        pool: AsyncPool[C] = self._pool  # type: ignore[assignment]  # (or Returned)
        if error is None and pool._quick_exit and _cached_level(10) is False:
            # (``_AsyncLease.release``'s fast path, inlined: a call less)
            # <fast-check-in copy: return -> return _DONE; if reset -> if True>
            # (``reset=False``: its caller reset it; also where a reset hook keeps the other off)
            taken = (
                pool._fast.release_idle(self._conn)
                if True
                else pool._fast.release_idle_clean(self._conn)
            )
            if taken is not False:
                self._pool = pool._returned
                if taken is not True:  # handed to a waiter: wake it
                    pool._handed_off(taken)
                return _DONE
            # </fast-check-in copy>
        state = self._state
        lease: Lease[C] = self if state is _ENTERED else state
        owner = self._owner
        if owner._end is not None:
            return self._ended(lease, owner._end, error)
        if error is None:
            lease.release()
        else:
            owner._left(lease, error)
        return _DONE

    if TYPE_CHECKING:  # (the protocol of ``AbstractAsyncContextManager``: a coroutine)

        async def __aexit__(
            self,
            kind: type[BaseException] | None,
            error: BaseException | None,
            traceback: TracebackType | None,
        ) -> None: ...

    else:
        __aexit__ = _exit

    async def _ended(
        self,
        lease: Lease[C],
        end: Callable[[C, BaseException | None], Any],
        error: BaseException | None,
    ) -> None:
        """The exit with ``hooks.end``: awaited in the caller before the check-in. After an
        error what it raises is logged (the block's error is the one the caller sees); on success
        it is raised, as the block's error would be. Not run when a cancellation (or another
        ``BaseException``) left the block."""
        pool = self._owner
        # what the block got (``lease.connection``, which raises once a lease is given back)
        connection = lease._conn.connection if pool._lend is None else lease._lent
        if error is None:
            try:
                result = end(connection, None)
                if inspect.isawaitable(result):
                    result = await result
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
                result = end(connection, error)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                _log.exception("hooks.end of pool %s raised after %r", pool.address, error)
            except BaseException as exc:
                lease.discard(exc)
                raise
        pool._left(lease, error)

    def __repr__(self) -> str:
        return block_repr(self, self._state, _ENTERED, self._owner.address)


@final
class _Running(Generic[C]):
    """What ``AsyncPool.running()`` returns (see there)."""

    __slots__ = ("_pool", "_ready")

    def __init__(self, pool: AsyncPool[C], ready: bool) -> None:
        self._pool = pool
        self._ready = ready

    async def __aenter__(self) -> AsyncPool[C]:
        await self._pool._open(self._ready)
        return self._pool

    async def __aexit__(self, *exc_info: object) -> None:
        await self._pool.__aexit__(*exc_info)


@final
class AsyncPool(PoolBase[C]):
    """A connection pool for asyncio.

    ``connect`` is an async function taking a :class:`~poolkit.ConnectContext` and returning the
    connection (anything with ``close()`` or ``aclose()``, sync or async), or an
    :class:`~poolkit.Established`; the pool's type follows from it. Keyword arguments:
    ``address``, ``options``, ``listeners``, ``clock`` (see the README). A new pool is paused:
    call :meth:`ready` (or use ``async with pool:``) before checking out.
    """

    _lease_class = _AsyncLease
    _watched_class = watched(_AsyncLease)
    #: the event loop the pool is bound to (``_bind_loop``), once it is
    _loop: asyncio.AbstractEventLoop | None
    #: the pool's own tasks (connects, hooks awaited apart, closes), kept until done
    _tasks: set[asyncio.Task[Any]]
    #: the end of closing, once ``close()`` began it (shielded from its callers)
    _closing: asyncio.Task[None] | None
    #: the pool's I/O under trio (``poolkit._trio``), once bound in a trio run; ``None`` on
    #: asyncio (whose paths never look at it but where they bind)
    _trio: TrioIO | None
    #: the running pool task (``_await_hook``): ``asyncio.current_task``, or the trio I/O's
    _current_task: Callable[[], Any]

    @overload
    def __init__(
        self: AsyncPool[C],
        connect: Callable[[ConnectContext], Awaitable[Established[C]]],
        **kwargs: Unpack[PoolArguments],
    ) -> None: ...
    @overload
    def __init__(
        self: AsyncPool[C],
        connect: Callable[[ConnectContext], Awaitable[C]],
        **kwargs: Unpack[PoolArguments],
    ) -> None: ...
    def __init__(
        self, connect: Callable[[ConnectContext], Awaitable[Any]], **kwargs: Unpack[PoolArguments]
    ) -> None:
        self._init_io()
        self._setup(connect, "an async function", self._refuse, **kwargs)
        #: the request objects waiting (the book's lock guards it against a completion run from
        #: another thread's ``call_soon_threadsafe``; the core needs none: one thread)
        self._book = RequestBook(threading.Lock())
        #: what ``checkin`` returns: a future of the pool's loop, done (``_DONE`` until bound)
        self._done: Awaitable[None] = _DONE
        self._wait_timeout = self.options.wait_queue_timeout
        self._bind("init", required=False)
        self._after_core()

    # ------------------------------------------------------------------ feeding the core, the loop

    @staticmethod
    def _refuse(connect: Callable[..., Any], options: PoolOptions) -> None:
        """``AsyncPool`` takes plain and async functions alike (connect, hooks): nothing to
        refuse that ``PoolBase`` does not."""

    def _step(self, step: Callable[[PoolCore, float], T]) -> tuple[T, list[Action]]:
        """``step(core, now)`` and the core's output taken: the locked half of ``_feed``, with no
        lock to take (one thread)."""
        return step(self._input(), self._time()), self._take_locked()

    def _bind_loop(self, operation: str) -> asyncio.AbstractEventLoop | TrioIO:
        trio_io = self._trio
        if trio_io is not None:  # (bound to a trio run: it checks that this is the one)
            return trio_io.bound(operation)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is None and _trio_running():
                return self._bind_trio().bound(operation)
            raise RuntimeError(
                f"AsyncPool.{operation}() must be called from a running event loop"
            ) from None
        if self._loop is None:
            self._loop = loop
            done = loop.create_future()
            done.set_result(None)
            self._done = done
            if self._clock is None:
                # The loop's clock; time.monotonic itself when that is what loop.time() reads.
                base = type(loop).time is asyncio.BaseEventLoop.time
                self._time = time.monotonic if base else loop.time
                self._align_to_wall()
                if self.options.adaptive is not None and base:  # (a virtual clock: no lag)
                    self._watch_lag(loop)
        elif self._loop is not loop:
            raise RuntimeError(
                f"AsyncPool.{operation}(): an AsyncPool belongs to the event loop it first ran "
                "on, and this is another one (make one pool per event loop)"
            )
        return loop

    def _bind_trio(self) -> TrioIO:
        """Bind to the running trio run: the pool's I/O from ``poolkit._trio`` from now on, its
        time trio's (unless it has a clock of its own)."""
        from . import _trio  # (only here: the asyncio paths never import trio)

        trio_io = self._trio = _trio.TrioIO(self)
        self._cancel_errors = (asyncio.CancelledError, _trio.Cancelled)
        self._current_task = trio_io.current_task
        if self._clock is None:
            self._time = trio_io.time
            self._align_to_wall()
        return trio_io

    def _bind(self, operation: str, *, required: bool = True) -> None:
        """Bind to the running loop (refusing another loop than the pool's). Not ``required``:
        with no loop running an unbound pool stays unbound, and a bound one refuses."""
        if not required and self._trio is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                if self._loop is not None:
                    raise RuntimeError(
                        f"AsyncPool.{operation}() must be called from the event loop the pool "
                        "runs on"
                    ) from None
                return
        self._bind_loop(operation)

    # (the loop timer for the core's earliest deadline)

    def _rearm_locked(self) -> None:
        when = self._core.take_deadline()
        if when == self._timer_at:
            return
        self._cancel_timer()
        if when is None:
            return
        if self._call_at is not None:
            self._timer_handle = self._call_at(when, self._on_timer)
        else:
            loop = self._loop
            if loop is None:
                trio_io = self._trio
                if trio_io is None:  # armed once the pool is bound to a loop
                    self._core.timers.dirty = True
                    return
                trio_io.arm(when)
                self._timer_handle = trio_io
                self._timer_at = when
                return
            if self._clock is None:
                self._timer_handle = loop.call_at(when, self._on_timer)
            else:
                delay = max(0.0, when - self._time())
                self._timer_handle = loop.call_later(delay, self._on_timer)
        self._timer_at = when

    def _watch_lag(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every ``LAG_EVERY`` seconds, the loop's lag told to the core, and every
        ``LOAD_EVERY`` its thread's load (see the module's rules)."""
        ref = weakref.ref(self)
        load = ThreadLoad(loop.time())

        def start() -> None:
            pool = ref()
            if pool is not None and pool._closing is None:
                loop.call_soon(end, loop.time())

        def end(made_ready: float) -> None:
            pool = ref()
            if pool is None:
                return
            tell_client(pool._core, load, made_ready, loop.time(), pool._time())
            loop.call_later(LAG_EVERY, start)

        loop.call_later(LAG_EVERY, start)

    def _cancel_timer(self) -> None:
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        self._timer_handle = None
        self._timer_at = None

    # ------------------------------------------------------------------ close

    async def close(self) -> None:
        """Close the pool: close available and pending connections, fail waiting checkouts.
        Leased connections are closed when they come back. Waits for the pool's own tasks.

        The closing goes on to its end even if the caller stops waiting (a cancelled ``close()``
        leaks nothing); a second call waits for the same work, and for the closes of leases given
        back since. Under trio it runs shielded, bounded by ``poolkit._trio.CLOSE_TIMEOUT``."""
        if self._trio is None and self._loop is None and _running_loop() is None:
            self._bind_loop("close")  # (not asyncio: trio, or an error)
        trio_io = self._trio
        if trio_io is not None:
            trio_io.bound("close")
            self._feed(lambda core, now: core.close(now))  # (a second time: nothing to do)
            self._cancel_timer()
            await trio_io.close()
            return
        closing = self._closing
        if closing is None or (closing.done() and self._tasks):
            loop = cast(asyncio.AbstractEventLoop, self._bind_loop("close"))  # (not trio)
            if closing is None:
                self._feed(lambda core, now: core.close(now))
                self._cancel_timer()
            # (a second call: closes begun since the first ended, of leases given back after it)
            closing = self._closing = loop.create_task(self._wait_tasks(), name="poolkit-close")
        await asyncio.shield(closing)

    async def _wait_tasks(self) -> None:
        """The end of closing: the pool's own tasks (closes, abandoned connects) run out."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def __aenter__(self) -> AsyncPool[C]:
        await self._open(True)
        return self

    def running(self, *, ready: bool = True) -> AbstractAsyncContextManager[AsyncPool[C]]:
        """``async with pool.running(ready=False):`` is ``async with pool:`` with the pool left
        paused (CMAP: a driver marks it ready once its server is known): the pool's life, closed
        at the end of the block, and under trio the nursery its tasks run in."""
        return _Running(self, ready)

    async def _open(self, ready: bool) -> None:
        """``async with``'s entry: under trio the pool's nursery first (the block's end closes
        it, after the pool), then ``ready()`` if ``ready``."""
        if self._loop is None and _running_loop() is None and _trio_running():
            await (self._trio or self._bind_trio()).open()
        if ready:
            self.ready()
        else:
            self._bind("running")

    async def __aexit__(self, *exc_info: object) -> None:
        trio_io = self._trio
        if trio_io is None:
            await self.close()
            return
        try:
            await self.close()
        finally:
            await trio_io.exit()

    # ------------------------------------------------------------------ checkout and check-in

    async def checkout(self, timeout: float | None = DEFAULT) -> Lease[C]:
        """Check out a connection, waiting at most ``timeout`` seconds (default:
        ``options.wait_queue_timeout``; ``None`` waits without limit)."""
        if timeout is not DEFAULT and timeout is not None:
            timeout = check_timeout(timeout)  # bad input fails before anything changes
        # The fast path (see "Fast paths" in ``_core.handout``): nobody listening (no listener,
        # DEBUG known to be off) and a connection available; not tried when checkouts wait already
        # (it would fail: a call less on the path of every checkout under contention).
        quick = self._quick and _cached_level(10) is False
        if quick and not self._waiting:
            pool = self
            # <fast-check-out>
            core = pool._core
            conn = core.fast.lease_idle(pool._time() if pool._clocked else 0.0)
            if core.actions:
                pool._after_core()  # perished connections closed on the way
            # </fast-check-out>
            if conn is not None:
                lease = _AsyncLease()  # (``new_lease`` inlined)
                lease._conn = conn
                lease._lent = None
                lease._pool = self
                return lease
        loop: asyncio.AbstractEventLoop | TrioIO | None = self._loop
        # (before anything changes; the cheap exact test: the pool's loop runs, in this thread)
        if loop is None or _running_loop() is not loop:
            loop = self._bind_loop("checkout")
        if self._orphans:
            self._reap()
        if timeout is DEFAULT:
            timeout = self._wait_timeout
        # (``_feed`` inlined: the path of every checkout that waits; ``_input`` too where the
        # fast paths' test already proves that nobody observes the pool)
        if quick:
            core = self._core
            core.observed = False
        else:
            core = self._input()
        now = self._time()
        req = Request(now, None if timeout is None else now + timeout)
        self._core.fast.request(req, now)
        if req.queued:
            req.owner = loop.create_future()
        if core.actions or core.events or core.timers.dirty:
            actions = self._take_locked()
            if actions is not NO_OUTPUT:
                self._carry_out(actions)
        if req.queued:
            try:
                await req.owner
            except self._cancel_errors:  # (trio's too, once bound to trio)
                self._abandon(req)
                raise
        conn = req.conn
        if quick and conn is not None and conn.state is not _S_CLOSED:
            lease = _AsyncLease()  # (``_served`` and ``new_lease`` inlined)
            lease._conn = conn
            lease._lent = None
            lease._pool = self
            return lease
        return self._served(req)

    def checkin(self, lease: Lease[C]) -> Awaitable[None]:
        """Give ``lease`` back (same as ``lease.release()``): ``await pool.checkin(lease)``.

        The check-in is done when this returns (a wrong lease raises here, before anything is
        awaited). What it returns is an awaitable already done (the pool's one done future: no
        coroutine made per check-in), so ``await pool.checkin(lease)``,
        ``asyncio.gather(pool.checkin(a), pool.checkin(b))`` and ``asyncio.ensure_future(...)``
        all take it, and dropping it unawaited loses nothing and warns of nothing;
        ``asyncio.create_task`` (which wants a coroutine) refuses it with ``TypeError``, after
        the check-in is done."""
        if type(lease) is _AsyncLease and lease._pool is self:  # (a plain lease of this pool, out)
            lease.release()  # (the one check-in fast path)
        else:
            self._checkin(lease, "AsyncPool.checkin()")
        return self._done

    def _handed_off(self, taken: Request) -> None:
        """A check-in's fast path handed the connection to the waiting ``taken``: its wait is
        noted (added to the tally when the statistics are read) and it is woken."""
        waits = self._handoff_waits
        waits.append(self._time() - taken.started)
        if len(waits) >= FOLD_WAITS:
            self._fold_waits(self._core, 0.0)
        owner = taken.owner
        if type(owner) is _Future:  # (a checkout's: ``_wake`` inlined)
            if not owner.done():
                owner.set_result(None)
        else:
            self._wake(owner)

    def connection(self, timeout: float | None = DEFAULT) -> AbstractAsyncContextManager[C]:
        """``async with pool.connection() as conn:`` checks out and always gives back (left by a
        cancellation, the connection is discarded: it may be mid-protocol), after ``hooks.end``
        if set."""
        block: _Block[C] = _Block()  # (no ``__init__``: see ``Lease``)
        block._owner = self
        block._state = timeout
        block._pool = self._returned  # not out yet
        return block

    def _release(self, lease: Lease[Any], clean: bool = False) -> None:
        """A check-in that the lease's fast path did not take (``clean``: ``hooks.end`` reset the
        connection itself). When it starts the connection's reset (every check-in of a pool with
        ``hooks.reset``, unless ``clean``) and the reset answers at once (a plain result: the
        backends' resets do for a clean connection), the reset's end is reported in the same
        step: no second pass through the action list."""
        if self._adapted_quick and not clean and lease._pool is self and _cached_level(10) is False:
            # an adaptive pool's check-in under contention, fast: handed to the oldest waiter,
            # the operation's time sampled in the core
            taken = self._fast.release_adapted(lease._conn, self._time())
            if taken is not None:
                lease._pool = self._returned
                self._handed_off(taken)
                core = self._core
                if core.actions or core.events or core.timers.dirty:  # (a round ended)
                    self._after_core()
                return
        core = self._input()
        conn = lease._conn
        self._check_in(core, lease, self._time(), clean)
        actions = self._take_locked()
        reset = self._reset
        if reset is None or clean or len(actions) != 1 or type(actions[0]) is not StartReset:
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
            else:
                self._sink.flush()  # (the check-in's events, taken above)
            return
        self._await_apart(action, result, "reset")  # (raises if no task can be made)
        self._sink.flush()  # the check-in's events, taken above (not at the reset's end)

    # ------------------------------------------------------------------ the pool's tasks

    def _init_io(self) -> None:
        """No loop, no task yet (a new pool, or the child of a fork)."""
        self._loop = None
        self._tasks = set()
        self._closing = None
        self._trio = None
        self._current_task = asyncio.current_task
        #: the tasks connections started for their life (``ConnectContext.start_soon``), by
        #: connection id, until the pool closes the connection
        self._lives: dict[int, list[Any]] = {}

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
        Under trio the task runs in the pool's nursery (``poolkit._trio``).
        """
        if self._trio is not None:
            return self._trio.spawn(work, name, if_cancelled)  # type: ignore[return-value]
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
        ctx._spawner = self._start_life
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
        except self._cancel_errors:
            # Abandoned by the pool (then the core already closed the record) or cancelled from
            # outside (loop shutdown): either way the connect failed, and a waiter is told so
            # with a pool error, not with a cancellation of its own.
            self._end_lives(conn.id)
            self._connect_ended(conn, self._cancelled(conn))
            return
        except GeneratorExit:  # closed unfinished (its loop is gone): nothing to tell the pool
            self._end_lives(conn.id)
            raise
        except BaseException as exc:
            self._end_lives(conn.id)
            self._connect_over(conn, None, exc)
            return
        self._connect_over(conn, result)

    def _start_life(self, ctx: ConnectContext, work: Any, name: str) -> None:
        """``ctx.start_soon``: ``work`` in a task for the life of ``ctx``'s connection (see
        there): the trio I/O's in the pool's nursery, or a task of the pool's loop; kept by
        connection id until the pool closes that connection (``_close_connection``)."""
        if ctx._cancelled:
            work.close()
            raise RuntimeError(
                f"ConnectContext.start_soon(): the pool ({self.address}) abandoned this connect"
            )
        lives = self._lives.setdefault(ctx.connection_id, [])
        run = self._run_life(work, ctx.connection_id, lives)
        if self._trio is not None:
            try:
                task: Any = self._trio.spawn(run, name)
            except BaseException:
                work.close()  # (``run`` closed by ``spawn``)
                raise
        else:
            loop = self._loop
            try:
                if loop is None or _running_loop() is not loop:
                    raise RuntimeError(
                        f"ConnectContext.start_soon(): the pool ({self.address}) runs on the "
                        "event loop it first ran on, and it is not running here"
                    )
                task = loop.create_task(run, name=name)
            except BaseException:
                run.close()
                work.close()
                raise
            # (cancelled before its first step, ``work`` never ran: closed, not left un-awaited)
            task.add_done_callback(lambda done: work.close() if done.cancelled() else None)
        lives.append(task)

    async def _run_life(self, work: Any, conn_id: int, lives: list[Any]) -> None:
        task = self._current_task()
        try:
            await work
        except self._cancel_errors:
            pass  # (the pool's cancel: the connection is closed, or its connect failed)
        except Exception:
            _log.exception("a task of connection %d of %s raised", conn_id, self.address)
        finally:
            if task in lives:
                lives.remove(task)

    def _end_lives(self, conn_id: int) -> None:
        """The tasks connection ``conn_id`` started for its life, cancelled."""
        lives = self._lives.pop(conn_id, None)
        if lives:
            _cancel_all(lives)

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
        if conn.handle is self._current_task():
            conn.handle = None  # over: a close from here on has nothing to cancel
        self._hook_ended(action, error)
        if (
            error is not None
            and not isinstance(error, Exception)
            and not isinstance(error, self._cancel_errors)
        ):
            raise error

    # ------------------------------------------------------------------ closes

    def _close_connection(self, conn: Conn, connection: Any, pending: bool) -> None:
        handle = conn.handle
        # (a task: an asyncio one, or the trio I/O's; not a connect's ConnectContext)
        if handle is not None and not isinstance(handle, ConnectContext) and not handle.done():
            handle.cancel()  # a keep-alive probe, check or reset in flight
        if pending:
            ctx: ConnectContext | None = conn.handle
            if ctx is not None:
                ctx._cancelled = True
                if ctx._task is not None and not ctx._task.done():
                    ctx._task.cancel()
            self._end_lives(conn.id)
            return
        lives = self._lives.pop(conn.id, None) if self._lives else None
        trio_io = self._trio
        if trio_io is not None and not trio_io.running:
            self._close_after_block(conn, connection, lives)
            return
        try:
            result = call_close(connection, prefer_aclose=True)
        except Exception:
            _log.exception("closing connection %d of %s raised", conn.id, self.address)
            if lives:
                _cancel_all(lives)
            return
        if not inspect.isawaitable(result):
            if lives:
                _cancel_all(lives)
            return
        # (an async close: the connection's tasks are cancelled once it has run)
        work = _await_close(result, conn.id, self.address, lives)

        def never_ran() -> None:  # (cancelled before it awaited the close: not left un-awaited)
            if inspect.iscoroutine(result):
                result.close()  # (no-op if it ran)
            if lives:
                _cancel_all(lives)

        try:
            self._spawn(work, f"poolkit-close-{conn.id}", never_ran)
        except RuntimeError:
            if inspect.iscoroutine(result):
                result.close()
            if lives:
                _cancel_all(lives)
            _log.exception("connection %d of %s could not be closed", conn.id, self.address)

    def _close_after_block(self, conn: Conn, connection: Any, lives: list[Any] | None) -> None:
        """Under trio, a connection to close once the pool's ``async with`` block has ended (a
        lease given back after it): no nursery is left to await a close in. Its plain
        ``close()``, if it has one, closes it here; one whose close is async only is left open
        and the call that gave it back raises ``RuntimeError`` saying so (the pool's books and
        events are done first: the lease is back, the connection closed in the pool's eyes)."""
        if lives:
            _cancel_all(lives)
        close = getattr(connection, "close", None)
        if close is not None and not inspect.iscoroutinefunction(close):
            try:
                result = close()
            except Exception:
                _log.exception("closing connection %d of %s raised", conn.id, self.address)
                return
            if not inspect.isawaitable(result):
                return
            if inspect.iscoroutine(result):
                result.close()
        elif getattr(connection, "aclose", None) is None:
            return  # (nothing to close)
        self._sink.flush()  # (the events of the give-back, before the error)
        raise RuntimeError(
            f"AsyncPool ({self.address}) under trio: connection {conn.id} was given back after "
            "the pool's `async with` block ended, and its close is async only, which needs the "
            "pool's nursery: the pool has let it go but it is still open; close it yourself "
            f"(`await connection.aclose()`: {connection!r}), or give leases back inside the "
            "block"
        )

    # ------------------------------------------------------------------ leases lost, fork

    def _reap_soon(self) -> None:
        """``_reap`` from wherever a lease was collected (a closed pool has no next step to do
        it): soon on the pool's loop (the collection may have happened inside a core call), or
        at once if that loop is gone."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._reap)
        elif self._trio is None or not self._trio.reap_soon(self._reap):
            self._reap()

    def _reset_after_fork(self) -> None:
        """In the child after ``os.fork()``: the parent's loop and tasks are forgotten."""
        self._init_io()
        if self._clock is None:
            self._time = time.monotonic
        self._book = RequestBook(threading.Lock())
        self._forget_after_fork()
