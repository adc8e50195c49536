"""H3's starvation check, shared by the drop-ins' complaint tests (``tests/backends/``:
``test_psycopg_dropin_complaints.py``, ``test_sqlalchemy_complaints.py``): many threads on a
smaller pool, each doing one operation (a checkout, ``SELECT 1``, a check-in) in a loop for a
while; no thread may do less than half the mean number of operations.

A pool that lets a newcomer take the connection a waiter was woken for can leave a thread with
almost nothing for the whole run; a pool that hands a returned connection to its oldest waiter
keeps every thread near the mean.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["THREADS", "assert_no_thread_starved", "operations_per_thread"]

#: H3's shape: 16 threads on a pool of 8 (the pool's size is the caller's), for 2 s
THREADS = 16
SECONDS = 2.0


def operations_per_thread(
    operation: Callable[[], object],
    *,
    threads: int = THREADS,
    seconds: float = SECONDS,
    join_timeout: float = 15.0,
) -> list[int]:
    """Run ``operation`` in a loop on ``threads`` threads, started together, for ``seconds``;
    the number of operations each thread finished. An error in a thread stops them all and is
    raised here (the first one), as is a thread still running ``join_timeout`` s after the
    stop."""
    counts = [0] * threads
    errors: list[BaseException] = []
    stop = threading.Event()
    start = threading.Barrier(threads + 1, timeout=10.0)

    def work(i: int) -> None:
        try:
            start.wait()
            while not stop.is_set():
                operation()
                counts[i] += 1
        except BaseException as exc:  # (reported by the caller, not lost in the thread)
            errors.append(exc)
            stop.set()

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    try:
        for worker in workers:
            worker.start()
        start.wait()
        time.sleep(seconds)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=join_timeout)
    if errors:
        raise AssertionError(f"{len(errors)} thread(s) failed: {errors!r}") from errors[0]
    alive = sum(worker.is_alive() for worker in workers)
    assert not alive, f"{alive} thread(s) still running {join_timeout} s after the stop"
    return counts


def assert_no_thread_starved(counts: list[int]) -> None:
    """Every thread did at least half the mean number of operations (and some were done)."""
    mean = sum(counts) / len(counts)
    assert mean > 0, f"no operation done: {counts}"
    assert min(counts) >= mean / 2, f"per thread: {counts} (mean {mean:.0f})"
