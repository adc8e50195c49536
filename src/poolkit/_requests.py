"""Request objects: the low-level checkout API for client libraries that hand connections back
from their own I/O callbacks (the generic-pool proposal's ``leaseConnection(request)``).

Rules of this module
--------------------
* A request is any object with a hashable ``id`` and a ``complete(result)`` method; ``result`` is
  a :class:`~poolkit.Lease` or a :class:`~poolkit.PoolError`. ``complete`` is called exactly
  once, never under the pool's lock, on the thread (or loop) that completed the request; it must
  not block.
* The front ends keep the waiting requests by id (``RequestBook``) so that ``cancel_request`` can
  find them; an id may be reused once its request has completed. The book changes only under
  the front end's lock, which it is given (a completion takes it to strike its entry);
  ``AsyncPool``'s is no lock at all, since it runs on one thread.
* The same core paths as the awaitable checkout: one core ``Request`` per request object, owned by
  it; nothing here decides anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from ._core import PoolCore, Request, RequestState
from .errors import PoolError

__all__ = ["LeaseRequest", "RequestBook", "check_requests"]

_log = logging.getLogger("poolkit.pool")
_WAITING = RequestState.WAITING


@runtime_checkable
class LeaseRequest(Protocol):
    """What ``pool.lease_request`` takes: an ``id`` and a ``complete(result)`` callback."""

    @property
    def id(self) -> Hashable: ...

    def complete(self, result: Any) -> None: ...


def check_requests(requests: Iterable[Any], call: str) -> list[Any]:
    """Validate a batch before anything changes: every request well formed, ids unique."""
    batch = list(requests)
    seen: set[Any] = set()
    for request in batch:
        complete = getattr(request, "complete", None)
        if not callable(complete) or not hasattr(request, "id"):
            raise TypeError(
                f"{call}: a request needs an `id` and a `complete(result)` method, got {request!r}"
            )
        try:
            hash(request.id)
        except TypeError:
            raise TypeError(f"{call}: request id {request.id!r} is not hashable") from None
        if request.id in seen:
            raise ValueError(f"{call}: request id {request.id!r} given twice in one batch")
        seen.add(request.id)
    return batch


class RequestBook:
    """The waiting request objects of one pool, by id, guarded by the front end's ``lock``:
    held by the front end around every method but the completions, which take it themselves."""

    __slots__ = ("_lock", "_waiting")

    def __init__(self, lock: AbstractContextManager[Any]) -> None:
        self._lock = lock
        self._waiting: dict[Any, tuple[Request, Any]] = {}

    def check_free(self, batch: list[Any], call: str) -> None:
        """Raise if an id of ``batch`` belongs to a request still waiting."""
        waiting = self._waiting
        for request in batch:
            entry = waiting.get(request.id)
            if entry is not None and entry[0].state is _WAITING:
                raise ValueError(f"{call}: request id {request.id!r} is already waiting")

    def enqueue(
        self,
        core: PoolCore,
        batch: list[Any],
        now: float,
        timeout: float | None,
        make_lease: Callable[[Any], Any],
    ) -> list[Callable[[], None]]:
        """One core request per request object, in order (under the front end's lock). A request
        left waiting is completed through its owner when the core says; the completions of those
        served or failed at once are returned, for the caller to run outside its lock."""
        deadline = None if timeout is None else now + timeout
        done: list[Callable[[], None]] = []
        for request in batch:
            req = Request(now, deadline)
            core.fast.request(req, now)
            finish = self._finisher(req, request, make_lease)
            if req.queued:
                req.owner = finish
                self._waiting[request.id] = (req, request)
            else:
                done.append(finish)
        return done

    def cancel(self, core: PoolCore, request_id: Any, now: float) -> Any:
        """Take the waiting request ``request_id`` out of the core's queue (under the front end's
        lock); the request object, or ``None`` if none such is waiting."""
        entry = self._waiting.get(request_id)
        if entry is None:
            return None
        req, request = entry
        if not core.cancel(req, now):
            return None
        del self._waiting[request_id]
        return request

    def _finisher(
        self, req: Request, request: Any, make_lease: Callable[[Any], Any]
    ) -> Callable[[], None]:
        def finish() -> None:  # outside the front end's lock
            with self._lock:
                entry = self._waiting.get(request.id)
                if entry is not None and entry[0] is req:
                    del self._waiting[request.id]
            conn = req.conn
            result: Any = req.error
            if conn is not None:
                try:
                    result = make_lease(conn)
                except PoolError as exc:  # interrupted before it was handed over
                    result = exc
            deliver(request, result)

        return finish

    def clear(self) -> None:
        self._waiting.clear()


def deliver(request: Any, result: Any) -> None:
    """Call ``request.complete(result)``; an exception it raises is logged, never propagated."""
    try:
        request.complete(result)
    except Exception:
        _log.exception("complete() of request %r raised", getattr(request, "id", request))
