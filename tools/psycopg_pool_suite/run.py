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

import argparse
import contextlib
import importlib.metadata
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
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


def listed(nodeid: str, table: dict[str, str]) -> str | None:
    """The entry of ``table`` (SKIPS, KNOWN_FAILURES: test names) ``nodeid`` falls under: its
    own, or its test function's (``name[param]`` under ``name``)."""
    if nodeid in table:
        return nodeid
    name = nodeid.split("[", 1)[0]
    return name if name in table else None


#: tests that pass with psycopg_pool's pools and not with poolkit's, each with the reason: run at
#: every run, tolerated and reported (never silently: the summary lists them)
KNOWN_FAILURES: dict[str, str] = {}


def say(message: str) -> None:
    print(f"psycopg_pool suite: {message}", flush=True)


def run(cmd: list[str], **kwargs: object) -> None:
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"psycopg_pool suite: {name} is not installed here (pip install -e '.[test]')")


def venv(cache: Path, wanted_versions: dict[str, str]) -> Path:
    """The python of a venv with these psycopg and psycopg_pool and what the tests need, made
    once."""
    home = cache / "venv"
    python = home / "bin" / "python"
    marker = home / "poolkit-suite.json"
    wanted = {**wanted_versions, "needs": NEEDS, "python": sys.version.split()[0]}
    if python.exists() and marker.is_file() and json.loads(marker.read_text()) == wanted:
        return python
    if home.exists():
        shutil.rmtree(home)
    say(f"making a venv for psycopg's pool tests in {home}")
    run([sys.executable, "-m", "venv", str(home)])
    pins = [f"psycopg[binary]=={wanted['psycopg']}", f"psycopg-pool=={wanted['psycopg_pool']}"]
    run([str(python), "-m", "pip", "install", "-q", *pins, *NEEDS])
    marker.write_text(json.dumps(wanted))
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pg_bindir() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``), if any."""
    found = shutil.which("pg_config")
    if found:
        done = subprocess.run([found, "--bindir"], capture_output=True, text=True)
        bindir = Path(done.stdout.strip())
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(os.path.realpath(initdb)).parent
    return None


@contextlib.contextmanager
def private_cluster() -> Iterator[str | None]:
    """A private PostgreSQL cluster on a free port of 127.0.0.1 (trust auth, user postgres), in
    a temporary folder, stopped and removed at the end: its server DSN; ``None`` if it cannot be
    made here (no ``initdb``; root without a ``postgres`` user)."""
    bindir = pg_bindir()
    if bindir is None:
        yield None
        return
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:  # (initdb refuses root: the cluster is the postgres user's)
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            yield None
            return
        as_user = ["runuser", "-u", "postgres", "--"]
    # (in the system's temporary folder: the postgres user may not reach the cache folder)
    home = Path(tempfile.mkdtemp(prefix="poolkit-suite-pg-"))
    if owner is not None:
        os.chown(home, owner.pw_uid, owner.pw_gid)
    data = home / "data"
    port = free_port()
    try:
        run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--no-sync"], stdout=subprocess.DEVNULL)  # fmt: skip
        options = (f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=300")  # fmt: skip
        run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l",
             str(home / "server.log"), "start"], stdout=subprocess.DEVNULL)  # fmt: skip
    except (subprocess.CalledProcessError, OSError) as exc:
        say(f"could not start a private cluster ({exc}): using the shared server")
        shutil.rmtree(home, ignore_errors=True)
        yield None
        return
    try:
        yield f"host=127.0.0.1 port={port} user=postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "-w", "stop"], stdout=subprocess.DEVNULL)  # fmt: skip
        shutil.rmtree(home, ignore_errors=True)


def shared_server() -> str:
    """The server DSN of the shared server (``$POOLKIT_TEST_PG_DSN``'s host, port and user)."""
    url = urlsplit(os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/"))
    host, port, user = url.hostname or "127.0.0.1", url.port or 5432, url.username or "postgres"
    return f"host={host} port={port} user={user}"


def admin(python: Path, server: str, sql: str) -> None:
    """Run ``sql`` in the server's ``postgres`` database (autocommit), with the suite's psycopg."""
    script = "import psycopg, sys\nwith psycopg.connect(sys.argv[1], autocommit=True) as c:\n" \
        "    c.execute(sys.argv[2])\n"  # fmt: skip
    run([str(python), "-c", script, f"{server} dbname=postgres", sql])


@contextlib.contextmanager
def databases(python: Path, server: str, names: list[str]) -> Iterator[None]:
    """Databases ``names`` on ``server``, made fresh (dropped first if a run left them) and
    dropped at the end."""
    for name in names:
        admin(python, server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin(python, server, f"CREATE DATABASE {name}")
    try:
        yield
    finally:
        for name in names:
            with contextlib.suppress(subprocess.CalledProcessError):
                admin(python, server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def tree_copy(source: Path, target: Path) -> Path:
    """A fresh copy of psycopg's tests folder (each run writes its .pytest_cache there)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return target


def start_pytest(
    python: Path, tree: Path, dsn: str, pools: str, tests: list[str], results: Path
) -> subprocess.Popen[bytes]:
    """Start ``tests`` (paths or node ids) in psycopg's tree with ``pools`` against ``dsn``; its
    output goes to ``results`` with the suffix .log, its outcomes to ``results``."""
    env = dict(os.environ)
    env.update(
        POOLKIT_PSYCOPG_SUITE_POOLS=pools,
        POOLKIT_PSYCOPG_SUITE_RESULTS=str(results),
        PSYCOPG_TEST_DSN=dsn,
        PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), str(ROOT / "src")]),
        PYTHONDONTWRITEBYTECODE="1",
        PATH=os.pathsep.join([str(python.parent), env.get("PATH", "")]),  # (mypy: test_version)
    )
    env.pop("PYTEST_ADDOPTS", None)
    if pools == "poolkit":  # (by name, in poolkit_swap: --deselect takes any test id prefix)
        env["POOLKIT_PSYCOPG_SUITE_DESELECT"] = json.dumps(sorted(SKIPS))
    # (the cache provider stays on: psycopg's conftest keeps a crash marker in it; --tb=native:
    # pytest's own traceback, parsing the test's source, crashes Python 3.11 after a
    # RecursionError, "AST constructor recursion depth mismatch", and ends the session)
    cmd = [str(python), "-m", "pytest", "-p", "poolkit_swap", "-q", "--tb=native", "--no-header",
           *tests]  # fmt: skip
    results.unlink(missing_ok=True)
    with open(results.with_suffix(".log"), "w", encoding="utf-8") as log:
        return subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)


def outcomes(run: subprocess.Popen[bytes], results: Path) -> tuple[dict[str, str], set[str]]:
    """What ``run`` (from :func:`start_pytest`) found, by node id, once it has ended; the tests
    that built a pool of the side under test."""
    run.wait()
    if not results.is_file():
        sys.exit(f"psycopg_pool suite: pytest wrote no results; see {results.with_suffix('.log')}")
    found: dict[str, str] = {}
    built: set[str] = set()
    for line in results.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        found[entry["nodeid"]] = entry["outcome"]
        if entry["built"]:
            built.add(entry["nodeid"])
    return found, built


def figures(found: dict[str, str], seconds: float) -> str:
    counts = {o: sum(v == o for v in found.values()) for o in ("passed", "failed", "skipped")}
    return (
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"in {seconds:.0f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_cache = os.environ.get("POOLKIT_PSYCOPG_SUITE_CACHE") or str(
        Path.home() / ".cache" / "poolkit" / "psycopg-pool-suite"
    )
    parser.add_argument("--cache", default=default_cache, help="where the venv and runs are kept")
    parser.add_argument("--tests", default=str(PEER), help="psycopg's tests folder (a copy)")
    parser.add_argument("--reruns", type=int, default=2, help="runs more of a test that differs")
    parser.add_argument("selection", nargs="*", help="paths or node ids (default: tests/pool)")
    args = parser.parse_args()
    started = time.monotonic()
    source = Path(args.tests).resolve()
    if not (source / "tests" / "pool" / "test_pool.py").is_file():
        say(f"psycopg's tests are not in {source} (see --tests)")
        return 2
    versions = {"psycopg": version("psycopg"), "psycopg_pool": version("psycopg_pool")}
    cache = Path(args.cache).expanduser().resolve() / "-".join(versions.values())
    cache.mkdir(parents=True, exist_ok=True)
    python = venv(cache, versions)
    tests = args.selection or TESTS
    work = cache / "last-run"  # (the logs of the last run stay there)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    trees = {side: tree_copy(source, work / f"tree-{side}") for side in ("psycopg_pool", "poolkit")}
    names = {side: f"poolkit_suite_{side}_{os.getpid()}" for side in trees}
    with private_cluster() as private:
        server = private or shared_server()
        where = "a private cluster" if private else "the shared server"
        with databases(python, server, list(names.values())):
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
            base, base_built = outcomes(runs["psycopg_pool"], work / "psycopg_pool.jsonl")
            base_time = time.monotonic() - t0
            ours, ours_built = outcomes(runs["poolkit"], work / "poolkit.jsonl")
            ours_time = time.monotonic() - t0
            passed_before = {t for t, o in base.items() if o == "passed"}
            failing = sorted(
                t
                for t in passed_before
                if ours.get(t) == "failed" and not listed(t, KNOWN_FAILURES)
            )
            for attempt in range(args.reruns):
                if not failing:
                    break
                say(f"running again, alone, the {len(failing)} that fail ({attempt + 1})")
                results = work / f"again{attempt}.jsonl"
                again, again_built = outcomes(
                    start_pytest(python, trees["poolkit"], dsns["poolkit"], "poolkit", failing,
                                 results),
                    results,
                )  # fmt: skip
                for nodeid in failing:
                    if again.get(nodeid) == "passed":
                        ours[nodeid] = "passed"
                        if nodeid in again_built:
                            ours_built.add(nodeid)
                failing = [t for t in failing if again.get(t) != "passed"]
    if len(passed_before) < 100:
        print((work / "psycopg_pool.log").read_text(encoding="utf-8"))
        say(f"only {len(passed_before)} tests passed with psycopg_pool's pools: the run is broken")
        return 2
    skipped = {t for t in base if listed(t, SKIPS)}
    known = {t for t in base if listed(t, KNOWN_FAILURES)}
    for table, name in ((SKIPS, "SKIPS"), (KNOWN_FAILURES, "KNOWN_FAILURES")):
        for entry in sorted(set(table) - {listed(t, table) for t in base}):
            say(f"listed in {name} but not among psycopg's tests: {entry}")
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
    wanted = len((passed_before & base_built) - skipped - known)
    reached = len({t for t, o in ours.items() if o == "passed"} & ours_built)
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
        print((work / "poolkit.log").read_text(encoding="utf-8"))
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
