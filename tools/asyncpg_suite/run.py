"""asyncpg's own pool tests (``tests/test_pool.py``), run with asyncpg's pool and then with
poolkit's drop-in in its place: fails if a test that passes with asyncpg's pool fails, errors, is
newly skipped or disappears with poolkit's, except the tests listed in SKIPS (each reads asyncpg's
private attributes, with its reason; not run with poolkit's).

``python tools/asyncpg_suite/run.py`` (from any venv that has asyncpg; .ci/run runs it):

1. reads the installed asyncpg's version and fetches that version's source distribution from
   the package index (``tools/peer_sdist.py``), and copies its ``tests/`` only into a cache folder
   (``--cache``, default ``$POOLKIT_ASYNCPG_SUITE_CACHE`` or ``~/.cache/poolkit/asyncpg-suite``);
2. makes a venv of its own there with that asyncpg and pytest, once;
3. starts a private PostgreSQL cluster (``initdb``, tools/peer_suite.py's; without it,
   the server of ``$POOLKIT_TEST_PG_DSN``) and runs the tests in two databases of its own at
   once, with asyncpg's pool in one and poolkit's in the other (``POOLKIT_ASYNCPG_SUITE_POOLS``:
   see poolkit_swap.py). asyncpg's ``_testbase`` uses the running cluster through ``PGHOST``,
   ``PGPORT``, ``PGUSER``, ``PGDATABASE`` (its tests that need clusters of their own then skip,
   on both sides). A test that differs is run again, alone, up to ``--reruns`` times, before it
   counts (said in the output);
4. checks that the swap reached the tests: the passing tests that built a poolkit pool are at
   least as many as those that built asyncpg's pool, less SKIPS.

Exit status 0 when nothing differs; 1 with the list of tests that do; 2 if it could not run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tools/: what the runners share
from peer_suite import Suite, figures, reach, run, shared_server  # noqa: E402

SUITE = Suite("asyncpg suite", "POOLKIT_ASYNCPG_SUITE", HERE)

#: what runs: asyncpg's pool tests
TESTS = ["tests/test_pool.py"]
#: what asyncpg's tests need beside asyncpg (its test dependency group, what test_pool uses)
NEEDS = ["pytest"]

_HOLDERS = (
    "reads asyncpg's private _holders (its connection holders: the poolkit pool holds the "
    "connections)"
)
_QUEUE = "reads asyncpg's private _queue (its LIFO queue of holders; poolkit's core has none)"
_MAINTENANCE = (
    "reads or patches asyncpg's private _maintain_min_size / _maintenance_task (poolkit's core "
    "refills min_size itself)"
)
#: tests not run with poolkit's pool: each reads asyncpg's private attributes (what it checks
#: besides is checked by tests/backends/test_asyncpg_dropin*.py or by the tests that do run)
SKIPS: dict[str, str] = {
    f"tests/test_pool.py::TestPool::{name}": reason
    for name, reason in [
        ("test_pool_04", _HOLDERS),
        ("test_pool_handles_task_cancel_in_acquire_with_timeout", _QUEUE),
        ("test_pool_handles_task_cancel_in_release", _QUEUE),
        ("test_pool_handles_query_cancel_in_release", _QUEUE),
        ("test_pool_max_inactive_time_01", _HOLDERS),
        ("test_pool_max_inactive_time_02", _HOLDERS),
        ("test_pool_max_inactive_time_03", _HOLDERS),
        ("test_pool_max_inactive_time_05", _HOLDERS),
        ("test_pool_min_size_keeps_connections_alive", _HOLDERS),
        ("test_pool_min_size_reuses_retained_connections", _HOLDERS),
        ("test_pool_shutdown_cleans_idle_connections", _HOLDERS),
        ("test_pool_gc_does_not_restore_min_size", _MAINTENANCE),
        ("test_pool_min_size_restored_after_recycling", _HOLDERS),
        ("test_pool_min_size_restored_after_idle_connection_loss", _HOLDERS),
        ("test_pool_min_size_retries_failed_reconnect", _HOLDERS),
        ("test_pool_min_size_backs_off_on_target_attribute_mismatch", _MAINTENANCE),
        ("test_pool_floor_reconnect_honors_expired_generation", _HOLDERS),
        ("test_pool_min_size_retries_closed_connection", _HOLDERS),
        ("test_pool_min_size_restored_after_multiple_losses", _HOLDERS),
        ("test_pool_shutdown_cancels_floor_reconnect", _HOLDERS),
        ("test_pool_min_size_zero_allows_full_expiry", _HOLDERS),
        ("test_pool_min_size_reconnect_after_expiry", _HOLDERS),
        ("test_pool_expire_connections", _HOLDERS),
        ("test_pool_release_after_protocol_abort", f"{_HOLDERS}; {_QUEUE}"),
    ]
}


def start_pytest(
    python: Path, tree: Path, server: dict[str, str], pools: str, tests: list[str], results: Path
) -> subprocess.Popen[bytes]:
    """Start ``tests`` in asyncpg's tree with ``pools`` against ``server`` (PG* variables)."""
    return SUITE.start_pytest(
        python, tree, pools, tests, results,
        args=["-p", "no:cacheprovider", "-q", "--tb=native", "--no-header", "-o", "addopts="],
        env=server,
        deselect=SKIPS if pools == "poolkit" else None,
    )  # fmt: skip


def server_env(dsn: str, database: str) -> dict[str, str]:
    """The PG* variables for ``dsn`` (``host=... port=... user=...``) and ``database``."""
    parts = dict(item.split("=", 1) for item in dsn.split())
    return {
        "PGHOST": parts.get("host", "127.0.0.1"),
        "PGPORT": parts.get("port", "5432"),
        "PGUSER": parts.get("user", "postgres"),
        "PGDATABASE": database,
    }


def admin(python: Path, dsn: str) -> Callable[[str], None]:
    """Runs SQL in the server's ``postgres`` database, with the suite's asyncpg."""
    script = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        "    c = await asyncpg.connect(database='postgres')\n"
        "    await c.execute(sys.argv[1])\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    )

    def execute(sql: str) -> None:
        run([str(python), "-c", script, sql], env={**os.environ, **server_env(dsn, "postgres")})

    return execute


def main() -> int:
    args = SUITE.arguments(
        __doc__, "asyncpg-suite", "where sources and venv are kept", "tests",
        "files or node ids (default: TESTS)",
    )  # fmt: skip
    say = SUITE.say
    started = time.monotonic()
    version = SUITE.version("asyncpg", extra="dev")
    cache = SUITE.cache(args.cache, version)
    tree = SUITE.sdist(
        cache, "asyncpg", version, cache / f"asyncpg-{version}-tests", "tests/test_pool.py",
        keep=lambda name: name.startswith("tests/"),
    )  # fmt: skip
    python = SUITE.venv(
        cache, {"asyncpg": version}, [f"asyncpg=={version}"], NEEDS, "asyncpg's tests"
    )
    tests = args.tests or TESTS
    work = SUITE.work(cache)
    sides = ("asyncpg", "poolkit")
    names = {side: f"poolkit_asyncpg_suite_{side}_{os.getpid()}" for side in sides}
    with SUITE.private_cluster() as private:
        dsn = private or shared_server()
        where = "a private cluster" if private else "the shared server"
        envs = {side: server_env(dsn, names[side]) for side in sides}
        with SUITE.databases(admin(python, dsn), names.values()):
            say(f"asyncpg {version}'s pool tests with asyncpg's pool and poolkit's, at once, on "
                f"{where}")  # fmt: skip
            t0 = time.monotonic()
            runs = {
                side: start_pytest(python, tree, envs[side], side, tests, work / f"{side}.jsonl")
                for side in sides
            }
            base, base_built = SUITE.outcomes(runs["asyncpg"], work / "asyncpg.jsonl")
            base_time = time.monotonic() - t0
            ours, ours_built = SUITE.outcomes(runs["poolkit"], work / "poolkit.jsonl")
            ours_time = time.monotonic() - t0
            passed_before = {t for t, o in base.items() if o == "passed"}
            differ = SUITE.rerun(
                sorted(t for t in passed_before if t not in SKIPS and ours.get(t) != "passed"),
                args.reruns,
                lambda differ, results: start_pytest(
                    python, tree, envs["poolkit"], "poolkit", differ, results
                ),
                lambda attempt: work / f"again{attempt}.jsonl",
                lambda attempt, differ: (
                    f"running again, alone, the {len(differ)} that differ ({attempt + 1}): "
                    + ", ".join(differ)
                ),
                ours,
                ours_built,
                passed=lambda nodeid: say(f"passed when run again alone: {nodeid}"),
            )
    if len(passed_before) < 30:
        SUITE.show_log(work / "asyncpg.log")
        say(f"only {len(passed_before)} tests passed with asyncpg's pool: the run is broken")
        return 2
    skipped = {t for t in base if t in SKIPS}
    for entry in sorted(set(SKIPS) - set(base)):
        say(f"listed in SKIPS but not among asyncpg's tests: {entry}")
    say(f"asyncpg's pool:  {figures(base, base_time)}")
    say(f"poolkit's pool:  {figures(ours, ours_time)}; {len(skipped)} not run (SKIPS)")
    for entry, reason in sorted(SKIPS.items()):
        say(f"SKIPS (not run with poolkit's): {entry}: {reason}")
    for nodeid in sorted(t for t, o in ours.items() if o == "passed" and base.get(t) != "passed"):
        say(f"does not pass with asyncpg's pool, passes with poolkit's: {nodeid}")
    worse = {t: ours.get(t, "absent") for t in differ}
    reached, wanted = reach(base, base_built, ours, ours_built, skipped)
    say(
        f"passing tests that built a pool: {reached} with poolkit's (at least {wanted} wanted: "
        f"asyncpg's {len(passed_before & base_built)}, less SKIPS)"
    )
    status = 0
    if reached < wanted:
        say("the swap did not reach every test: fewer passing tests built poolkit's pool")
        status = 1
    if worse:
        SUITE.show_log(work / "poolkit.log")
        for nodeid, state in sorted(worse.items()):
            say(f"passes with asyncpg's pool, {state.upper()} with poolkit's: {nodeid}")
        say(f"{len(worse)} differ (the logs are in {work})")
        status = 1
    if status == 0:
        say(
            "no test that passes with asyncpg's pool fails, is skipped or is missing with "
            f"poolkit's (less {len(skipped)} SKIPS), in {time.monotonic() - started:.0f} s"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
