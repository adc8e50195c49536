"""psycopg's own pool tests, run with psycopg_pool's pools and then with poolkit's drop-ins in
their place: fails if a test that passes with psycopg_pool fails, errors, is newly skipped or
disappears with poolkit's, except the tests listed in SKIPS (they read psycopg_pool's private
attributes; not run with poolkit's) and in KNOWN_FAILURES (run, and tolerated, each with its
reason: differences not closed yet, reported at every run).

``python tools/psycopg_pool_suite/run.py`` (from any venv that has psycopg and psycopg_pool;
.ci/run runs it):

1. the tests are psycopg's, an unmodified copy beside the project (``../shared/peer-tests/psycopg``
   from the project root, or ``--tests``): each run works in a fresh copy of that folder in the
   cache folder (``--cache``, default ``$POOLKIT_PSYCOPG_SUITE_CACHE`` or
   ``~/.cache/poolkit/psycopg-pool-suite``), never in the repository nor in the shared folder;
2. makes a venv of its own there with the installed psycopg's and psycopg_pool's versions and
   what the tests need (pytest, anyio, pytest-timeout, pproxy for the proxy tests, mypy for
   test_version), once;
3. starts a private PostgreSQL cluster (``initdb`` on a free port, in a temporary folder, as the
   ``postgres`` user when run as root; the tests create tables), and runs the tests in two
   databases of its own at once, with psycopg_pool's pools in one and poolkit's in the other
   (``POOLKIT_PSYCOPG_SUITE_POOLS=psycopg_pool`` / ``=poolkit``: see poolkit_swap.py). Without
   ``initdb`` it creates the two databases on the server of ``$POOLKIT_TEST_PG_DSN`` (default
   ``postgresql://postgres@127.0.0.1:5432/postgres``) and drops them at the end. A test that
   differs is run again (up to ``--reruns`` times, alone) before it counts: psycopg_pool's tests
   time many things, and a loaded machine can fail one once;
4. checks that the swap reached the tests: the passing tests that built a poolkit pool are at
   least as many as those that built a psycopg_pool pool, less SKIPS and KNOWN_FAILURES.

Exit status 0 when nothing differs; 1 with the list of tests that do; 2 if it could not run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # tools/: what the runners share
from peer_suite import Suite, figures, listed, reach, shared_server, tree_copy  # noqa: E402

SUITE = Suite("psycopg_pool suite", "POOLKIT_PSYCOPG_SUITE", HERE)
#: psycopg's tests, beside the project (an unmodified copy: see its README.md)
PEER = ROOT.parent / "shared" / "peer-tests" / "psycopg"
#: what runs: psycopg_pool's tests
TESTS = ["tests/pool"]
#: what the tests need beside psycopg and psycopg_pool (the peer's README)
NEEDS = ["pytest", "anyio", "pytest-timeout", "pproxy", "mypy"]

_PRIVATE = "reads psycopg_pool's private"
_IDLE = f"{_PRIVATE} _pool (its deque of idle connections)"
_TASKS = f"{_PRIVATE} _sched_runner and _workers (its maintenance tasks or threads)"
#: tests not run with poolkit's pools, by name (all the parametrizations of each): each reads or
#: patches psycopg_pool's private attributes, which poolkit's pools do not have (the poolkit pool
#: holds the connections and needs no maintenance workers); what they check besides is checked
#: by tests/backends/test_psycopg_dropin.py or by the tests that do run
SKIPS: dict[str, str] = {
    f"tests/pool/{test}": reason
    for flavour in ("", "_async")
    for test, reason in [
        (f"test_pool{flavour}.py::test_concurrent_filling", f"{_PRIVATE} method _add_to_pool"),
        (f"test_pool{flavour}.py::test_shrink", f"{_PRIVATE} _nconns and ShrinkPool._run"),
        (f"test_pool{flavour}.py::test_reconnect_failure", f"{_PRIVATE} _nconns"),
        *(
            (f"test_pool{flavour}.py::{name}", _IDLE)
            for name in (
                "test_reconnect_after_grow_failed",
                "test_refill_on_check",
                "test_resize",
                "test_check",
                "test_spike",
                "test_check_returns_an_ok_connection",
                "test_override_close",
                "test_close_returns",
                "test_close_returns_custom_class",
                "test_close_returns_no_loop",
                "test_override_close_no_loop_subclass",
            )
        ),
        (f"test_pool_common{flavour}.py::test_setup_no_timeout", _IDLE),
        (f"test_pool_common{flavour}.py::test_dead_client", _IDLE),
        (f"test_pool_common{flavour}.py::test_close_no_tasks", _TASKS),
        (f"test_pool_common{flavour}.py::test_del_stops_threads", _TASKS),
        (f"test_pool_common{flavour}.py::test_reopen", _TASKS),
        (f"test_pool_common{flavour}.py::test_jitter", f"{_PRIVATE} classmethod _jitter"),
        (
            f"test_pool_common{flavour}.py::test_closed_queue",
            f"{_PRIVATE} _waiting (its queue of waiting clients, through ensure_waiting)",
        ),
    ]
}
SKIPS.update(
    {
        f"tests/pool/test_pool_null{flavour}.py::{name}": (
            f"{_PRIVATE} _waiting (its queue of waiting clients, through ensure_waiting)"
        )
        for flavour in ("", "_async")
        for name in (
            "test_reset",
            "test_reset_badstate",
            "test_reset_broken",
            "test_intrans_rollback",
            "test_inerror_rollback",
            "test_active_close",
            "test_fail_rollback_close",
        )
    }
)
SKIPS["tests/pool/test_pool_async.py::test_cancelled_waiter_assigned_conn_is_reclaimed"] = (
    f"{_PRIVATE} WaitingClient._cond (it replaces psycopg_pool's WaitingClient.wait)"
)


#: tests that pass with psycopg_pool's pools and not with poolkit's, each with the reason: run at
#: every run, tolerated and reported (never silently: the summary lists them)
KNOWN_FAILURES: dict[str, str] = {}


def start_pytest(
    python: Path, tree: Path, dsn: str, pools: str, tests: list[str], results: Path
) -> subprocess.Popen[bytes]:
    """Start ``tests`` (paths or node ids) in psycopg's tree with ``pools`` against ``dsn``."""
    # (the cache provider stays on: psycopg's conftest keeps a crash marker in it; --tb=native:
    # pytest's own traceback, parsing the test's source, crashes Python 3.11 after a
    # RecursionError, "AST constructor recursion depth mismatch", and ends the session; by name
    # in poolkit_swap, the deselected: --deselect takes any test id prefix)
    return SUITE.start_pytest(
        python, tree, pools, tests, results,
        args=["-q", "--tb=native", "--no-header"],
        env={
            "PSYCOPG_TEST_DSN": dsn,
            "PATH": os.pathsep.join([str(python.parent), os.environ.get("PATH", "")]),  # (mypy)
        },
        deselect=SKIPS if pools == "poolkit" else None,
    )  # fmt: skip


def main() -> int:
    args = SUITE.arguments(
        __doc__, "psycopg-pool-suite", "where the venv and runs are kept", "selection",
        "paths or node ids (default: tests/pool)",
        extra=lambda parser: parser.add_argument(
            "--tests", default=str(PEER), help="psycopg's tests folder (a copy)"
        ),
    )  # fmt: skip
    say = SUITE.say
    started = time.monotonic()
    source = Path(args.tests).resolve()
    if not (source / "tests" / "pool" / "test_pool.py").is_file():
        say(f"psycopg's tests are not in {source} (see --tests)")
        return 2
    versions = {"psycopg": SUITE.version("psycopg"), "psycopg_pool": SUITE.version("psycopg_pool")}
    cache = SUITE.cache(args.cache, "-".join(versions.values()))
    pins = [f"psycopg[binary]=={versions['psycopg']}", f"psycopg-pool=={versions['psycopg_pool']}"]
    python = SUITE.venv(cache, dict(versions), pins, NEEDS, "psycopg's pool tests")
    tests = args.selection or TESTS
    work = SUITE.work(cache)
    trees = {side: tree_copy(source, work / f"tree-{side}") for side in ("psycopg_pool", "poolkit")}
    names = {side: f"poolkit_suite_{side}_{os.getpid()}" for side in trees}
    with SUITE.private_cluster() as private:
        server = private or shared_server()
        where = "a private cluster" if private else "the shared server"
        with SUITE.databases(SUITE.psycopg_admin(python, server), names.values()):
            dsns = {side: f"{server} dbname={names[side]}" for side in trees}
            say(
                f"psycopg_pool {versions['psycopg_pool']}'s tests (psycopg {versions['psycopg']}) "
                f"with psycopg_pool's pools and with poolkit's, at once, on {where}"
            )
            t0 = time.monotonic()
            runs = {
                side: start_pytest(
                    python, trees[side], dsns[side], side, tests, work / f"{side}.jsonl"
                )
                for side in trees
            }
            base, base_built = SUITE.outcomes(runs["psycopg_pool"], work / "psycopg_pool.jsonl")
            base_time = time.monotonic() - t0
            ours, ours_built = SUITE.outcomes(runs["poolkit"], work / "poolkit.jsonl")
            ours_time = time.monotonic() - t0
            passed_before = {t for t, o in base.items() if o == "passed"}
            SUITE.rerun(
                sorted(
                    t
                    for t in passed_before
                    if ours.get(t) == "failed" and not listed(t, KNOWN_FAILURES)
                ),
                args.reruns,
                lambda failing, results: start_pytest(
                    python, trees["poolkit"], dsns["poolkit"], "poolkit", failing, results
                ),
                lambda attempt: work / f"again{attempt}.jsonl",
                lambda attempt, failing: (
                    f"running again, alone, the {len(failing)} that fail ({attempt + 1})"
                ),
                ours,
                ours_built,
            )
    if len(passed_before) < 100:
        SUITE.show_log(work / "psycopg_pool.log")
        say(f"only {len(passed_before)} tests passed with psycopg_pool's pools: the run is broken")
        return 2
    skipped = {t for t in base if listed(t, SKIPS)}
    known = {t for t in base if listed(t, KNOWN_FAILURES)}
    SUITE.unlisted(SKIPS, "SKIPS", base, "psycopg's tests")
    SUITE.unlisted(KNOWN_FAILURES, "KNOWN_FAILURES", base, "psycopg's tests")
    say(f"psycopg_pool's pools: {figures(base, base_time)}")
    say(f"poolkit's pools:      {figures(ours, ours_time)}; {len(skipped)} not run (SKIPS)")
    for entry, reason in sorted(SKIPS.items()):
        say(f"SKIPS (not run with poolkit's): {entry}: {reason}")
    for nodeid in sorted(known):
        state = ours.get(nodeid, "absent")
        note = "passes now: take it off KNOWN_FAILURES" if state == "passed" else state
        reason = KNOWN_FAILURES[str(listed(nodeid, KNOWN_FAILURES))]
        say(f"KNOWN_FAILURES ({note}): {nodeid}: {reason}")
    for nodeid in sorted(t for t, o in ours.items() if o == "passed" and base.get(t) == "failed"):
        say(f"fails with psycopg_pool's pools, passes with poolkit's: {nodeid}")
    worse = {
        t: ours.get(t, "absent")
        for t in passed_before
        if ours.get(t) != "passed" and t not in skipped and t not in known
    }
    # the swap reached the tests: every test that built psycopg_pool's pool and passed (less
    # those not run, or tolerated) built poolkit's and passed
    reached, wanted = reach(base, base_built, ours, ours_built, skipped | known)
    say(
        f"passing tests that built a pool: {reached} with poolkit's "
        f"(at least {wanted} wanted: psycopg_pool's {len(passed_before & base_built)}, less "
        "SKIPS and KNOWN_FAILURES)"
    )
    status = 0
    if reached < wanted:
        say("the swap did not reach every test: fewer passing tests built poolkit's pools")
        status = 1
    if worse:
        SUITE.show_log(work / "poolkit.log")
        for nodeid, state in sorted(worse.items()):
            say(f"passes with psycopg_pool's pools, {state.upper()} with poolkit's: {nodeid}")
        say(f"{len(worse)} differ (the logs are in {work})")
        status = 1
    if status == 0:
        say(
            "no test that passes with psycopg_pool's pools fails, is skipped or is missing with "
            f"poolkit's (less {len(skipped)} SKIPS and {len(known)} KNOWN_FAILURES), in "
            f"{time.monotonic() - started:.0f} s"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
