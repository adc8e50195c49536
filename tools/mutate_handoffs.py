"""Remove each give-back and hand-off step of the front ends, one at a time, and name the test
that catches it (issue 38 point 1): ``python tools/mutate_handoffs.py`` prints the table.

Each mutation is an exact ``(file, old text, new text)`` edit: ``old`` must occur exactly once in
the file, or the run stops (the source changed: the mutation must be rewritten with it). The
file is restored after each run, whatever happens. Each mutant runs
``tests/pools/test_handoffs.py`` first and, if that file lets it live, all of ``tests/pools``
(``--timeout 60``, stopping at the first failure); the table gives the first test that failed
and the seconds the run took. ``--only NAME`` runs the mutations whose names contain ``NAME``;
``--handoffs-only`` skips the fall-back run of ``tests/pools``. A step of the core that the
core's own tests hold (the adaptive limit's per-operation count) names them: they run with
``tests/pools/test_handoffs.py``.

Some edits change no behaviour, only speed (``lease_idle`` itself refuses when checkouts wait,
so the ``not _waiting`` gates only save a call): the table says "not caught" for them, which is
expected and listed as such.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src/poolkit"
HANDOFFS = "tests/pools/test_handoffs.py"


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  #: under src/poolkit
    old: str
    new: str
    #: true if the edit changes only speed, not behaviour (no test can catch it)
    neutral: bool = False
    #: how many times ``old`` occurs in the file (a fast path and its copy: 2), and which
    #: occurrence the edit changes (0: the first)
    found: int = 1
    nth: int = 0
    #: tests that hold this step besides the pools' (the core's own), run with the hand-offs'
    tests: tuple[str, ...] = ()


M = Mutation
MUTATIONS = [
    # ---- asyncio.py: the wake-up of the check-in fast path and of _handed_off
    M(
        "asyncio lease.release(): wake the waiter",
        "asyncio.py",
        "                    pool._handed_off(taken)\n                return\n",
        "                    pass\n                return\n",
    ),
    M(
        "asyncio _handed_off: set the checkout's future",
        "asyncio.py",
        "        if type(owner) is _Future:  # (a checkout's: ``_wake`` inlined)\n"
        "            if not owner.done():\n                owner.set_result(None)\n",
        "        if type(owner) is _Future:  # (a checkout's: ``_wake`` inlined)\n"
        "            pass\n",
    ),
    M(
        "asyncio _handed_off: complete a request object",
        "asyncio.py",
        "        else:\n            self._wake(owner)\n",
        "        else:\n            pass\n",
    ),
    M(
        "asyncio _handed_off: count the wait",
        "asyncio.py",
        "        waits.append(self._time() - taken.started)\n",
        "",
    ),
    # ---- asyncio.py: the lease marked given back
    M(
        "asyncio lease.release(): mark the lease given back",
        "asyncio.py",
        "                self._pool = pool._returned\n"
        "                if taken is not True:  # handed to a waiter: wake it\n"
        "                    pool._handed_off(taken)\n                return\n",
        "                if taken is not True:  # handed to a waiter: wake it\n"
        "                    pool._handed_off(taken)\n                return\n",
    ),
    # ---- asyncio.py: what the check-out fast paths leave, and their gates
    M(
        "asyncio block entry: _after_core",
        "asyncio.py",
        "            if core.actions:\n                pool._after_core()",
        "            if core.actions:\n                pass",
        found=2,
    ),
    M(
        "asyncio checkout(): _after_core",
        "asyncio.py",
        "            if core.actions:\n                pool._after_core()",
        "            if core.actions:\n                pass",
        found=2,
        nth=1,
    ),
    M(
        "asyncio checkout() resumed: closed-connection test",
        "asyncio.py",
        "if quick and conn is not None and conn.state is not _S_CLOSED:",
        "if quick and conn is not None:",
    ),
    M(
        "asyncio checkout(): `not _waiting` gate",
        "asyncio.py",
        "if quick and not self._waiting:",
        "if quick:",
        neutral=True,
    ),
    M(
        "asyncio checkout(): _quick gate",
        "asyncio.py",
        "quick = self._quick and _cached_level(10) is False",
        "quick = _cached_level(10) is False",
    ),
    M(
        "asyncio checkout(): DEBUG gate",
        "asyncio.py",
        "quick = self._quick and _cached_level(10) is False",
        "quick = self._quick",
    ),
    M(
        "asyncio block entry: _quick gate",
        "asyncio.py",
        "if state is DEFAULT and pool._quick and not pool._waiting and _cached_level(10) is False:",
        "if state is DEFAULT and not pool._waiting and _cached_level(10) is False:",
    ),
    M(
        "asyncio block entry: DEBUG gate",
        "asyncio.py",
        "if state is DEFAULT and pool._quick and not pool._waiting and _cached_level(10) is False:",
        "if state is DEFAULT and pool._quick and not pool._waiting:",
    ),
    M(
        "asyncio block entry: `not _waiting` gate",
        "asyncio.py",
        "if state is DEFAULT and pool._quick and not pool._waiting and _cached_level(10) is False:",
        "if state is DEFAULT and pool._quick and _cached_level(10) is False:",
        neutral=True,
    ),
    M(
        "asyncio lease.release(): _quick gate",
        "asyncio.py",
        "        if pool._quick and _cached_level(10) is False:\n",
        "        if _cached_level(10) is False:\n",
    ),
    M(
        "asyncio lease.release(): DEBUG gate",
        "asyncio.py",
        "        if pool._quick and _cached_level(10) is False:\n",
        "        if pool._quick:\n",
    ),
    # ---- threaded.py: the hand-off of the check-in fast path and _handed_off
    M(
        "threads lease.release(): hand to the waiter",
        "threaded.py",
        "            if taken is not False:  # handed to a waiter: woken outside the lock\n"
        "                pool._handed_off(taken)\n",
        "            if taken is not False:  # handed to a waiter: woken outside the lock\n"
        "                pass\n",
        found=2,
    ),
    M(
        "threads _handed_off: wake the waiter",
        "threaded.py",
        "        taken.owner()\n        if len(waits) >= FOLD_WAITS:\n",
        "        if len(waits) >= FOLD_WAITS:\n",
    ),
    M(
        "threads _handed_off: count the wait",
        "threaded.py",
        "        waits.append(self._time() - taken.started)\n",
        "",
    ),
    M(
        "threads lease.release(): mark the lease given back",
        "threaded.py",
        "                    self._pool = pool._returned\n"
        "            finally:\n                lock.release()\n"
        "            if taken is True:\n                return\n"
        "            if taken is not False:  # handed to a waiter",
        "                    pass\n"
        "            finally:\n                lock.release()\n"
        "            if taken is True:\n                return\n"
        "            if taken is not False:  # handed to a waiter",
        found=2,
    ),
    # ---- threaded.py: what the check-out fast paths leave, and their gates
    M(
        "threads block entry: _after_core",
        "threaded.py",
        "            if left:\n                pool._after_core()",
        "            if left:\n                pass",
        found=2,
    ),
    M(
        "threads checkout(): _after_core",
        "threaded.py",
        "            if left:\n                pool._after_core()",
        "            if left:\n                pass",
        found=2,
        nth=1,
    ),
    M(
        "threads checkout() resumed: closed-connection test",
        "threaded.py",
        "if conn is not None and self._quick and conn.state is not _S_CLOSED:",
        "if conn is not None and self._quick:",
    ),
    M(
        "threads checkout(): `not _waiting` gate",
        "threaded.py",
        "if quick and not self._waiting:",
        "if quick:",
        neutral=True,
    ),
    M(
        "threads block entry: `not _waiting` gate",
        "threaded.py",
        "pool._quick and not pool._waiting and _cached_level(10) is False:",
        "pool._quick and _cached_level(10) is False:",
        neutral=True,
    ),
    M(
        "threads checkout(): _quick gate",
        "threaded.py",
        "quick = self._quick and _cached_level(10) is False",
        "quick = _cached_level(10) is False",
    ),
    M(
        "threads checkout(): DEBUG gate",
        "threaded.py",
        "quick = self._quick and _cached_level(10) is False",
        "quick = self._quick",
    ),
    M(
        "threads block entry: _quick gate",
        "threaded.py",
        "pool._quick and not pool._waiting and _cached_level(10) is False:",
        "not pool._waiting and _cached_level(10) is False:",
    ),
    M(
        "threads block entry: DEBUG gate",
        "threaded.py",
        "pool._quick and not pool._waiting and _cached_level(10) is False:",
        "pool._quick and not pool._waiting:",
    ),
    M(
        "threads lease.release(): _quick gate",
        "threaded.py",
        "        if pool._quick and _cached_level(10) is False:\n",
        "        if _cached_level(10) is False:\n",
    ),
    M(
        "threads lease.release(): DEBUG gate",
        "threaded.py",
        "        if pool._quick and _cached_level(10) is False:\n",
        "        if pool._quick:\n",
    ),
    # ---- the block exits' own copies of the check-in fast path
    M(
        "asyncio block exit: wake the waiter",
        "asyncio.py",
        "                    pool._handed_off(taken)\n                return _DONE\n",
        "                    pass\n                return _DONE\n",
    ),
    M(
        "asyncio block exit: mark the block given back",
        "asyncio.py",
        "                self._pool = pool._returned\n"
        "                if taken is not True:  # handed to a waiter: wake it\n"
        "                    pool._handed_off(taken)\n                return _DONE\n",
        "                if taken is not True:  # handed to a waiter: wake it\n"
        "                    pool._handed_off(taken)\n                return _DONE\n",
    ),
    M(
        "asyncio block exit: _quick_exit gate",
        "asyncio.py",
        "if error is None and pool._quick_exit and _cached_level(10) is False:",
        "if error is None and _cached_level(10) is False:",
    ),
    M(
        "asyncio block exit: DEBUG gate",
        "asyncio.py",
        "if error is None and pool._quick_exit and _cached_level(10) is False:",
        "if error is None and pool._quick_exit:",
    ),
    M(
        "threads block exit: _quick_exit gate",
        "threaded.py",
        "if error is None and pool._quick_exit and _cached_level(10) is False:",
        "if error is None and _cached_level(10) is False:",
    ),
    M(
        "threads block exit: DEBUG gate",
        "threaded.py",
        "if error is None and pool._quick_exit and _cached_level(10) is False:",
        "if error is None and pool._quick_exit:",
    ),
    M(
        "threads block exit: mark the block given back",
        "threaded.py",
        "                    self._pool = pool._returned\n"
        "            finally:\n                lock.release()\n"
        "            if taken is True:\n                return\n"
        "            if taken is not False:  # handed to a waiter",
        "                    pass\n"
        "            finally:\n                lock.release()\n"
        "            if taken is True:\n                return\n"
        "            if taken is not False:  # handed to a waiter",
        found=2,
        nth=1,
    ),
    M(
        "threads block exit: hand to the waiter",
        "threaded.py",
        "            if taken is not False:  # handed to a waiter: woken outside the lock\n"
        "                pool._handed_off(taken)\n",
        "            if taken is not False:  # handed to a waiter: woken outside the lock\n"
        "                pass\n",
        found=2,
        nth=1,
    ),
    # ---- checkin(), and the block exits' slow paths: give back through the lease
    M(
        "asyncio checkin(): give back through the lease",
        "asyncio.py",
        "            lease.release()  # (the one check-in fast path)\n",
        "            pass\n",
    ),
    M(
        "asyncio block exit: give back through the lease",
        "asyncio.py",
        "        if error is None:\n            lease.release()\n        else:\n"
        "            owner._left(lease, error)\n        return _DONE\n",
        "        if error is None:\n            pass\n        else:\n"
        "            owner._left(lease, error)\n        return _DONE\n",
    ),
    M(
        "threads checkin(): give back through the lease",
        "threaded.py",
        "        if type(lease) is _ThreadLease and lease._pool is self:  "
        "# (a plain lease of this pool, out)\n            lease.release()\n",
        "        if type(lease) is _ThreadLease and lease._pool is self:  "
        "# (a plain lease of this pool, out)\n            pass\n",
    ),
    M(
        "threads block exit: give back through the lease",
        "threaded.py",
        "        elif error is None:\n            lease.release()\n",
        "        elif error is None:\n            pass\n",
    ),
    # ---- _base.py: the slow paths both front ends share
    M(
        "base _served: closed-connection test",
        "_base.py",
        "if self._quick and conn.state is not _S_CLOSED:",
        "if self._quick:",
    ),
    M(
        "base _dispatch: wake a completed request",
        "_base.py",
        "                self._wake(action.request.owner)\n",
        "                pass\n",
    ),
    M(
        "base _check_in: mark the lease given back",
        "_base.py",
        "        lease._pool = self._returned\n        core.release(",
        "        core.release(",
    ),
    M(
        "base _check_in: give the connection back",
        "_base.py",
        "        core.release(lease._conn, now, clean)\n",
        "        pass\n",
    ),
    M(
        "base _discard: give the connection back",
        "_base.py",
        "            core.discard(lease._conn, now, error)\n",
        "            pass\n",
    ),
    M(
        "base _left: release after an Exception",
        "_base.py",
        "            if not self._is_broken(lease, error):\n                lease.release()\n",
        "            if not self._is_broken(lease, error):\n                pass\n",
    ),
    M(
        "base _lease_for: give back a closed one",
        "_base.py",
        "        if conn.state is _S_CLOSED:\n            self._give_back(conn)\n",
        "        if conn.state is _S_CLOSED:\n            pass\n",
    ),
    M(
        "base _abandon: give back what came meanwhile",
        "_base.py",
        "            self._give_back(req.conn)\n",
        "            pass\n",
    ),
    # ---- an adaptive pool's fast check-in (AsyncPool._release, Handout.release_adapted)
    M(
        "asyncio adaptive check-in: wake the waiter",
        "asyncio.py",
        "                lease._pool = self._returned\n                self._handed_off(taken)\n",
        "                lease._pool = self._returned\n                pass\n",
    ),
    M(
        "asyncio adaptive check-in: mark the lease given back",
        "asyncio.py",
        "                lease._pool = self._returned\n                self._handed_off(taken)\n",
        "                self._handed_off(taken)\n",
    ),
    M(
        "asyncio adaptive check-in: take a round's output",
        "asyncio.py",
        "                if core.actions or core.events or core.timers.dirty:  # (a round ended)\n",
        "                if False:\n",
    ),
    M(
        "core release_adapted: the waiter's operation starts now",
        "_core/handout.py",
        "        conn.leased_at = now\n        before = adaptive.limit\n",
        "        before = adaptive.limit\n",
    ),
    M(
        "core release_adapted: a hand-off only with room under the limit",
        "_core/handout.py",
        "        if not waiters or in_use > adaptive.limit:\n",
        "        if not waiters:\n",
    ),
    M(
        "core release_adapted: a round's end decided",
        "_core/handout.py",
        "            self._round_ended(now, before)\n        return req\n",
        "            pass\n        return req\n",
    ),
    M(
        "core adaptive sample: a round ends at its least operations only",
        "_core/adaptive.py",
        "        if ops < self._least:\n",
        "        if False:\n",
        tests=("tests/core/test_core_adaptive.py",),
    ),
    M(
        "core adaptive sample: the next round's least operations set",
        "_core/adaptive.py",
        "        self._least = _BASE_LEAST if self._base_round else max(limit, self._round_ops)\n",
        "",
        tests=("tests/core/test_core_adaptive.py",),
    ),
    # ---- with hooks: connection()'s exit after hooks.end, the check-in that resets
    M(
        "asyncio block exit after hooks.end: release",
        "asyncio.py",
        "            else:\n                lease.release()\n            return\n",
        "            else:\n                pass\n            return\n",
    ),
    M(
        "asyncio block exit after hooks.end: give back after an error",
        "asyncio.py",
        "                lease.discard(exc)\n                raise\n"
        "        pool._left(lease, error)\n",
        "                lease.discard(exc)\n                raise\n",
    ),
    M(
        "threads block exit after hooks.end: release",
        "threaded.py",
        "            else:\n                lease.release()\n            return\n",
        "            else:\n                pass\n            return\n",
    ),
    M(
        "threads block exit after hooks.end: give back after an error",
        "threaded.py",
        "                lease.discard(exc)\n                raise\n"
        "        pool._left(lease, error)\n",
        "                lease.discard(exc)\n                raise\n",
    ),
    M(
        "asyncio _release: report a plain reset's end",
        "asyncio.py",
        "            core.reset_done(conn, self._time())\n",
        "            pass\n",
    ),
    M(
        "threads _release: report the reset's end",
        "threaded.py",
        "            self._input().reset_done(conn, self._time(), error)\n",
        "            pass\n",
    ),
    # ---- the I/O halves: how each wakes a waiter on the slow path
    M(
        "asyncio _wake: set the checkout's future",
        "asyncio.py",
        "        if isinstance(owner, asyncio.Future):\n"
        "            if not owner.done():\n                owner.set_result(None)\n",
        "        if isinstance(owner, asyncio.Future):\n            pass\n",
    ),
    M(
        "asyncio _wake: complete a request object",
        "asyncio.py",
        "        else:\n            owner()\n",
        "        else:\n            pass\n",
    ),
    M(
        "threads _wake: wake the waiter",
        "threaded.py",
        "        \"\"\"A waiter's owner is its wake-up (a lock's release, a request object's "
        'completion)."""\n        owner()\n',
        "        \"\"\"A waiter's owner is its wake-up (a lock's release, a request object's "
        'completion)."""\n        pass\n',
    ),
]

_FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)
_TIMEOUT = re.compile(r"Timeout \(>[\d.]+s\) from pytest-timeout")


def run_tests(paths: list[str]) -> tuple[str | None, float, bool]:
    """Run ``paths``: the first failing test (``None``: all passed), the seconds, whether a
    pytest-timeout ended a test (a hang)."""
    began = time.monotonic()
    command = [sys.executable, "-m", "pytest", *paths, "-q", "-x", "--timeout", "60", "-rf"]
    command += ["-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - began
    found = _FAILED.search(done.stdout)
    if done.returncode not in (0, 1):  # (5: nothing collected; 2, 3, 4: an error of the run)
        raise SystemExit(f"pytest ended with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    if done.returncode == 1 and found is None:
        raise SystemExit(f"pytest failed but named no test:\n{done.stdout}")
    return (None if found is None else found.group(1)), seconds, bool(_TIMEOUT.search(done.stdout))


def mutate(mutation: Mutation, handoffs_only: bool) -> tuple[str, float, bool]:
    """Apply ``mutation``, run the tests, restore the file: the catching test (or "not caught"),
    the seconds, whether it hung until pytest-timeout."""
    path = SRC / mutation.file
    original = path.read_text()
    count = original.count(mutation.old)
    if count != mutation.found:
        raise SystemExit(
            f"{mutation.name}: its old text occurs {count} times in {path} "
            f"({mutation.found} expected): the source changed, rewrite the mutation"
        )
    try:
        parts = original.split(mutation.old)
        n = mutation.nth + 1  # (the edit goes between part n-1 and part n)
        mutant = mutation.old.join(parts[:n]) + mutation.new + mutation.old.join(parts[n:])
        path.write_text(mutant)
        caught, seconds, hung = run_tests([HANDOFFS, *mutation.tests])
        if caught is None and not handoffs_only:
            caught, more, hung = run_tests([HANDOFFS, *mutation.tests, "tests/pools"])
            seconds += more
    finally:
        path.write_text(original)
    return caught or "not caught", seconds, hung


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="", help="run the mutations whose names contain this")
    parser.add_argument("--handoffs-only", action="store_true", help="skip the tests/pools run")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.only in m.name]
    for mutation in chosen:  # (every edit checked before any runs)
        count = (SRC / mutation.file).read_text().count(mutation.old)
        if count != mutation.found:
            raise SystemExit(
                f"{mutation.name}: old text found {count} times in {mutation.file}, "
                f"not {mutation.found}"
            )
    baseline, _, _ = run_tests([HANDOFFS])
    if baseline is not None:
        raise SystemExit(f"the unmutated source fails {baseline}: fix that first")
    missed = 0
    print(f"{'mutation':62} {'seconds':>7}  caught by")
    for mutation in chosen:
        caught, seconds, hung = mutate(mutation, args.handoffs_only)
        note = " (hung until --timeout)" if hung else ""
        if caught == "not caught":
            note += " (expected: speed only)" if mutation.neutral else " (MISSED)"
            missed += not mutation.neutral
        print(f"{mutation.name:62} {seconds:7.1f}  {caught}{note}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
