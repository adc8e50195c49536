"""SQLAlchemy's own tests for its pools and engines, run with SQLAlchemy's ``QueuePool`` and
``AsyncAdaptedQueuePool`` and then with poolkit's (``poolkit.backends.sqlalchemy``) in their
place, over psycopg and over asyncpg: fails if a test that passes with SQLAlchemy's pools fails,
errors, is newly skipped or disappears with poolkit's, except the tests listed in SKIPS (they
read SQLAlchemy's pools' private attributes; not run with poolkit's), each with its reason.

``python tools/sqlalchemy_suite/run.py`` (from any venv that has SQLAlchemy, psycopg and asyncpg;
.ci/run runs it):

1. reads the installed SQLAlchemy's version and fetches that version's source distribution from
   the package index (``tools/peer_sdist.py``: it ships SQLAlchemy's tests, and its testing
   plugin in ``lib/``), into a cache folder (``--cache``, default ``$POOLKIT_SQLA_SUITE_CACHE``
   or ``~/.cache/poolkit/sqlalchemy-suite``), never into the repository; a run works in fresh
   copies of its ``test/``, ``lib/`` and pytest configuration (``pyproject.toml``,
   ``setup.cfg``): the tests import SQLAlchemy from that ``lib/`` (its ``test/conftest.py``
   puts it first), the same version as the one installed here;
2. makes a venv of its own there with the installed psycopg's, asyncpg's and greenlet's versions
   and pytest, once;
3. starts a private PostgreSQL cluster (``initdb`` on a free port: ``tools/peer_suite.py``, as
   every runner; else fresh databases on the shared server), makes a
   database per run with the schemas the schema-translate tests need (``test_schema``,
   ``test_schema_2``), and runs FILES four times at once: ``--dburi postgresql+psycopg://...``
   and ``--dburi postgresql+asyncpg://...``, each with SQLAlchemy's pools and with poolkit's
   (``POOLKIT_SQLA_SUITE_POOLS=sqlalchemy`` / ``=poolkit``: see poolkit_swap.py). A test that
   differs is run again (up to ``--reruns`` times, alone) before it counts, and the output says
   so: some of SQLAlchemy's tests time threads, and a loaded machine can fail one once;
4. checks that the swap reached the tests: the passing tests that built a poolkit pool are at
   least as many as those that built SQLAlchemy's, less SKIPS.

Exit status 0 when nothing differs; 1 with the list of tests that do; 2 if it could not run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tools/: what the runners share
from peer_suite import Suite, figures, listed, reach, run, shared_server, tree_copy  # noqa: E402

SUITE = Suite("SQLAlchemy suite", "POOLKIT_SQLA_SUITE", HERE)

#: SQLAlchemy's test files for what the pools serve: the pool, reconnects, transactions, logging,
#: execution, the asyncio engine
FILES = [
    "test/engine/test_pool.py",
    "test/engine/test_reconnect.py",
    "test/engine/test_transaction.py",
    "test/engine/test_logging.py",
    "test/engine/test_execute.py",
    "test/ext/asyncio/test_engine.py",
]
#: the drivers the runs use, by the name of their --dburi
DRIVERS = ("psycopg", "asyncpg")
#: the schemas SQLAlchemy's schema-translate tests need in the test database
SCHEMAS = ("test_schema", "test_schema_2")
#: what the tests need beside SQLAlchemy's lib/ (pinned to this venv's versions where installed)
PINNED = ("psycopg", "psycopg-binary", "asyncpg", "greenlet", "typing_extensions")
NEEDS = ["pytest"]

#: tests not run with poolkit's pools (all the parametrizations of each), each with its reason:
#: they read or patch SQLAlchemy's QueuePool's private attributes, which poolkit's pools do not
#: have (the poolkit pool holds the records); what they check besides is checked by the tests
#: that do run and by tests/backends/test_sqlalchemy*.py
_QUEUE = (
    "reads or replaces QueuePool's private _pool (its sqlalchemy.util.queue.Queue of idle "
    "records: {what}), which poolkit's pools do not have (the poolkit pool holds the records)"
)
SKIPS: dict[str, str] = {
    "test/engine/test_pool.py::PoolTest::test_recreate_state[QueuePool-pool_args0]": (
        _QUEUE.format(
            what="_pool.use_lifo; recreate() keeping use_lifo is checked by "
            "tests/backends/test_sqlalchemy.py"
        )
    ),
    "test/engine/test_pool.py::QueuePoolTest::test_connect_checkout_handler_always_gets_info": (
        _QUEUE.format(what="it drops the unconnected records from _pool.queue")
    ),
    "test/engine/test_pool.py::QueuePoolTest::test_connect_handler_not_called_for_recycled": (
        _QUEUE.format(what="it drops the unconnected records from _pool.queue")
    ),
    **{
        f"test/engine/test_pool.py::QueuePoolTest::{name}": _QUEUE.format(what="_pool.empty()")
        for name in (
            "test_error_on_pooled_reconnect_cleanup_invalidate",
            "test_error_on_pooled_reconnect_cleanup_recycle",
            "test_error_on_pooled_reconnect_cleanup_wcheckout_event",
        )
    },
    "test/engine/test_reconnect.py::MockReconnectTest::"
    "test_dialect_initialize_retry_if_exception": _QUEUE.format(what="_pool.empty()"),
}


@contextlib.contextmanager
def databases(python: Path, server: str, names: list[str]) -> Iterator[None]:
    """Databases ``names`` (fresh) with SCHEMAS in each, dropped at the end."""
    with SUITE.databases(SUITE.psycopg_admin(python, server), names):
        script = (
            "import psycopg, sys\n"
            "with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
            "    for s in sys.argv[2:]:\n"
            "        c.execute(f'CREATE SCHEMA {s}')\n"
        )
        for name in names:
            run([str(python), "-c", script, f"{server} dbname={name}", *SCHEMAS])
        yield


def dburi(server: str, driver: str, database: str) -> str:
    """The --dburi of ``driver`` for ``database`` on ``server`` (``host=... port=... user=...``)."""
    parts = dict(item.split("=", 1) for item in server.split())
    return (
        f"postgresql+{driver}://{parts.get('user', 'postgres')}@{parts.get('host', '127.0.0.1')}:"
        f"{parts.get('port', '5432')}/{database}"
    )


def start_pytest(
    python: Path, tree: Path, uri: str, pools: str, tests: list[str], results: Path
) -> subprocess.Popen[bytes]:
    """Start ``tests`` (paths or node ids) in the tree with ``pools`` on ``uri``."""
    # (lib/ first: the SQLAlchemy under test is the sdist's, as its conftest.py wants;
    # -p no:cacheprovider: nothing kept between runs; -q over the configuration's -v)
    return SUITE.start_pytest(
        python, tree, pools, tests, results,
        args=["-p", "no:cacheprovider", "-q", "--no-header", "--dburi", uri],
        path=[tree / "lib"],
        deselect=SKIPS if pools == "poolkit" else None,
    )  # fmt: skip


def compare(
    base: tuple[dict[str, str], set[str]], ours: tuple[dict[str, str], set[str]]
) -> tuple[dict[str, str], int, int]:
    """The tests that pass with SQLAlchemy's pools and not with poolkit's (not SKIPS), by node
    id with poolkit's outcome; the passing tests that built a pool with poolkit's, and the
    number wanted."""
    (found, base_built), (mine, mine_built) = base, ours
    passed_before = {t for t, o in found.items() if o == "passed"}
    skipped = {t for t in found if listed(t, SKIPS)}
    worse = {t: mine.get(t, "absent") for t in passed_before - skipped if mine.get(t) != "passed"}
    reached, wanted = reach(found, base_built, mine, mine_built, skipped)
    return worse, reached, wanted


def main() -> int:
    args = SUITE.arguments(
        __doc__, "sqlalchemy-suite", "where the venv and runs are kept", "selection",
        "paths or node ids (default: FILES)",
        extra=lambda parser: parser.add_argument(
            "--drivers", default=",".join(DRIVERS), help="the --dburi drivers, comma-separated"
        ),
    )  # fmt: skip
    say = SUITE.say
    started = time.monotonic()
    drivers = [d for d in args.drivers.split(",") if d]
    if not drivers or set(drivers) - set(DRIVERS):
        say(f"--drivers must name some of {', '.join(DRIVERS)}, got {args.drivers!r}")
        return 2
    sqla = SUITE.version("SQLAlchemy")
    cache = SUITE.cache(args.cache, sqla)
    source = SUITE.sdist(
        cache, "SQLAlchemy", sqla, cache / "source", "test/engine/test_pool.py",
        # (lib/'s compiled extensions are not built: the tests run pure Python SQLAlchemy)
        keep=lambda name: name.startswith(("test/", "lib/", "pyproject.toml", "setup.cfg")),
    )  # fmt: skip
    pins = [f"{name}=={SUITE.version(name)}" for name in PINNED]
    python = SUITE.venv(cache, {"pins": pins}, pins, NEEDS, "SQLAlchemy's tests")
    tests = args.selection or FILES
    work = SUITE.work(cache)
    sides = [(driver, pools) for driver in drivers for pools in ("sqlalchemy", "poolkit")]
    trees = {side: tree_copy(source, work / f"tree-{side[0]}-{side[1]}") for side in sides}
    names = {side: f"poolkit_sqla_{side[0]}_{side[1]}_{os.getpid()}" for side in sides}
    found: dict[tuple[str, str], tuple[dict[str, str], set[str]]] = {}

    def jsonl(side: tuple[str, str]) -> Path:
        return work / f"{side[0]}-{side[1]}.jsonl"

    took: dict[tuple[str, str], float] = {}
    again_passed: list[str] = []
    status = 0

    def rerun(driver: str) -> None:
        """Run again, alone, the tests that fail with poolkit's pools over ``driver`` only."""
        base, ours = found[(driver, "sqlalchemy")], found[(driver, "poolkit")]
        worse, _, _ = compare(base, ours)
        side = (driver, "poolkit")
        SUITE.rerun(
            sorted(t for t, o in worse.items() if o == "failed"),
            args.reruns,
            lambda failing, results: start_pytest(
                python, trees[side], uris[side], "poolkit", failing, results
            ),
            lambda attempt: work / f"{driver}-again{attempt}.jsonl",
            lambda attempt, failing: (
                f"{driver}: running again, alone, the {len(failing)} that fail with "
                f"poolkit's pools ({attempt + 1} of {args.reruns}): {', '.join(failing)}"
            ),
            ours[0],
            ours[1],
            passed=lambda nodeid: again_passed.append(f"{driver}: {nodeid}"),
        )

    with SUITE.private_cluster() as private:
        server = private or shared_server()
        where = "a private cluster" if private else "the shared server"
        with databases(python, server, list(names.values())):
            uris = {side: dburi(server, side[0], names[side]) for side in sides}
            say(
                f"SQLAlchemy {sqla}'s tests over {' and '.join(drivers)}, with SQLAlchemy's "
                f"pools and with poolkit's, all at once, on {where}"
            )
            t0 = time.monotonic()
            runs = {
                side: start_pytest(python, trees[side], uris[side], side[1], tests, jsonl(side))
                for side in sides
            }
            for side, process in runs.items():
                found[side] = SUITE.outcomes(process, jsonl(side))
                took[side] = time.monotonic() - t0
            for driver in drivers:
                rerun(driver)
    for driver in drivers:
        base, ours = found[(driver, "sqlalchemy")], found[(driver, "poolkit")]
        passed_before = sum(o == "passed" for o in base[0].values())
        if passed_before < 100:
            SUITE.show_log(work / f"{driver}-sqlalchemy.log", 20000)
            say(f"{driver}: only {passed_before} tests passed with SQLAlchemy's pools: broken run")
            return 2
        skipped = {t for t in base[0] if listed(t, SKIPS)}
        say(f"{driver}: SQLAlchemy's pools: {figures(base[0], took[(driver, 'sqlalchemy')])}")
        say(
            f"{driver}: poolkit's pools:     {figures(ours[0], took[(driver, 'poolkit')])}; "
            f"{len(skipped)} not run (SKIPS)"
        )
        for nodeid in sorted(t for t, o in ours[0].items() if o == "passed" and base[0].get(t)
                             == "failed"):  # fmt: skip
            say(f"{driver}: fails with SQLAlchemy's pools, passes with poolkit's: {nodeid}")
        worse, reached, wanted = compare(base, ours)
        say(
            f"{driver}: passing tests that built a pool: {reached} with poolkit's (at least "
            f"{wanted} wanted: SQLAlchemy's, less SKIPS)"
        )
        if reached < wanted:
            say(f"{driver}: the swap did not reach every test: fewer built poolkit's pools")
            status = 1
        if worse:
            SUITE.show_log(work / f"{driver}-poolkit.log", 30000)
            for nodeid, state in sorted(worse.items()):
                say(f"{driver}: passes with SQLAlchemy's pools, {state.upper()} with poolkit's: "
                    f"{nodeid}")  # fmt: skip
            say(f"{driver}: {len(worse)} differ (the logs are in {work})")
            status = 1
    for entry, reason in sorted(SKIPS.items()):
        say(f"SKIPS (not run with poolkit's): {entry}: {reason}")
    SUITE.unlisted(
        SKIPS, "SKIPS", (t for side in found for t in found[side][0]), "SQLAlchemy's tests"
    )
    for entry in again_passed:
        say(f"failed once with poolkit's pools, passed when run again alone: {entry}")
    if status == 0:
        say(
            "no test that passes with SQLAlchemy's pools fails, is skipped or is missing with "
            f"poolkit's (less {len(SKIPS)} SKIPS), in {time.monotonic() - started:.0f} s"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
