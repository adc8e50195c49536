"""asyncpg's own pool tests (``tests/test_pool.py``), run with asyncpg's pool and then with
poolkit's drop-in in its place: fails if a test that passes with asyncpg's pool fails, errors, is
newly skipped or disappears with poolkit's, except the tests listed in SKIPS (each reads asyncpg's
private attributes, with its reason; not run with poolkit's).

``python tools/asyncpg_suite/run.py`` (from any venv that has asyncpg; .ci/run runs it):

1. reads the installed asyncpg's version and fetches that version's source distribution from
   the package index (``tools/peer_sdist.py``), and copies its ``tests/`` only into a cache folder
   (``--cache``, default ``$POOLKIT_ASYNCPG_SUITE_CACHE`` or ``~/.cache/poolkit/asyncpg-suite``);
2. makes a venv of its own there with that asyncpg and pytest, once;
3. starts a private PostgreSQL cluster (``initdb``, as tools/psycopg_pool_suite does; without it,
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

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # tools/: what the runners share
import peer_sdist  # noqa: E402

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


def say(message: str) -> None:
    print(f"asyncpg suite: {message}", flush=True)


def run(cmd: list[str], **kwargs: object) -> None:
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def _psycopg_runner() -> ModuleType:
    """tools/psycopg_pool_suite/run.py, for its private PostgreSQL cluster."""
    spec = importlib.util.spec_from_file_location(
        "psycopg_pool_suite_run", HERE.parent / "psycopg_pool_suite" / "run.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def asyncpg_version() -> str:
    try:
        return importlib.metadata.version("asyncpg")
    except importlib.metadata.PackageNotFoundError:
        sys.exit("asyncpg suite: asyncpg is not installed here (pip install -e '.[dev]')")


def sources(cache: Path, version: str) -> Path:
    """asyncpg ``version``'s ``tests/`` (from its source distribution), fetched once; the folder
    that holds it."""
    tree = cache / f"asyncpg-{version}-tests"
    if (tree / "tests" / "test_pool.py").is_file():
        return tree
    download = cache / "download"
    download.mkdir(parents=True, exist_ok=True)
    archive = peer_sdist.fetch("asyncpg", version, download, say)
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"asyncpg-{version}/tests/")]
        tar.extractall(tmp, members=members, filter="data")
        unpacked = Path(tmp) / f"asyncpg-{version}"
        if not (unpacked / "tests" / "test_pool.py").is_file():
            sys.exit(f"asyncpg suite: {archive.name} has no tests/test_pool.py")
        if tree.exists():
            shutil.rmtree(tree)
        unpacked.rename(tree)
    return tree


def venv(cache: Path, version: str) -> Path:
    """The python of a venv with asyncpg ``version`` and what its tests need, made once."""
    home = cache / "venv"
    python = home / "bin" / "python"
    marker = home / "poolkit-suite.json"
    wanted = {"asyncpg": version, "needs": NEEDS, "python": sys.version.split()[0]}
    if python.exists() and marker.is_file() and json.loads(marker.read_text()) == wanted:
        return python
    if home.exists():
        shutil.rmtree(home)
    say(f"making a venv for asyncpg's tests in {home}")
    run([sys.executable, "-m", "venv", str(home)])
    run([str(python), "-m", "pip", "install", "-q", f"asyncpg=={version}", *NEEDS])
    marker.write_text(json.dumps(wanted))
    return python


def start_pytest(
    python: Path, tree: Path, server: dict[str, str], pools: str, tests: list[str], results: Path
) -> subprocess.Popen[bytes]:
    """Start ``tests`` in asyncpg's tree with ``pools`` against ``server`` (PG* variables); its
    output goes to ``results`` with the suffix .log, its outcomes to ``results``."""
    env = dict(os.environ)
    env.update(server)
    env.update(
        POOLKIT_ASYNCPG_SUITE_POOLS=pools,
        POOLKIT_ASYNCPG_SUITE_RESULTS=str(results),
        PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), str(ROOT / "src")]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("PYTEST_ADDOPTS", None)
    if pools == "poolkit":
        env["POOLKIT_ASYNCPG_SUITE_DESELECT"] = json.dumps(sorted(SKIPS))
    cmd = [str(python), "-m", "pytest", "-p", "poolkit_swap", "-p", "no:cacheprovider", "-q",
           "--tb=native", "--no-header", "-o", "addopts=", *tests]  # fmt: skip
    results.unlink(missing_ok=True)
    with open(results.with_suffix(".log"), "w", encoding="utf-8") as log:
        return subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)


def outcomes(run: subprocess.Popen[bytes], results: Path) -> tuple[dict[str, str], set[str]]:
    """What ``run`` found, by node id, once it has ended; the tests that built a pool."""
    run.wait()
    if not results.is_file():
        sys.exit(f"asyncpg suite: pytest wrote no results; see {results.with_suffix('.log')}")
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


def server_env(dsn: str, database: str) -> dict[str, str]:
    """The PG* variables for ``dsn`` (``host=... port=... user=...``) and ``database``."""
    parts = dict(item.split("=", 1) for item in dsn.split())
    return {
        "PGHOST": parts.get("host", "127.0.0.1"),
        "PGPORT": parts.get("port", "5432"),
        "PGUSER": parts.get("user", "postgres"),
        "PGDATABASE": database,
    }


def admin(python: Path, server: dict[str, str], sql: str) -> None:
    """Run ``sql`` in the server's ``postgres`` database, with the suite's asyncpg."""
    script = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        "    c = await asyncpg.connect(database='postgres')\n"
        "    await c.execute(sys.argv[1])\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    )
    run([str(python), "-c", script, sql], env={**os.environ, **server})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_cache = os.environ.get("POOLKIT_ASYNCPG_SUITE_CACHE") or str(
        Path.home() / ".cache" / "poolkit" / "asyncpg-suite"
    )
    parser.add_argument("--cache", default=default_cache, help="where sources and venv are kept")
    parser.add_argument("--reruns", type=int, default=2, help="runs more of a test that differs")
    parser.add_argument("tests", nargs="*", help="files or node ids (default: TESTS)")
    args = parser.parse_args()
    started = time.monotonic()
    version = asyncpg_version()
    cache = Path(args.cache).expanduser().resolve() / version
    cache.mkdir(parents=True, exist_ok=True)
    tree = sources(cache, version)
    python = venv(cache, version)
    tests = args.tests or TESTS
    work = cache / "last-run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    sides = ("asyncpg", "poolkit")
    names = {side: f"poolkit_asyncpg_suite_{side}_{os.getpid()}" for side in sides}
    helper = _psycopg_runner()
    with helper.private_cluster() as private:
        dsn = private or helper.shared_server()
        where = "a private cluster" if private else "the shared server"
        envs = {side: server_env(dsn, names[side]) for side in sides}
        for side in sides:
            admin(python, envs[side], f"DROP DATABASE IF EXISTS {names[side]} WITH (FORCE)")
            admin(python, envs[side], f"CREATE DATABASE {names[side]}")
        try:
            say(f"asyncpg {version}'s pool tests with asyncpg's pool and poolkit's, at once, on "
                f"{where}")  # fmt: skip
            t0 = time.monotonic()
            runs = {
                side: start_pytest(python, tree, envs[side], side, tests, work / f"{side}.jsonl")
                for side in sides
            }
            base, base_built = outcomes(runs["asyncpg"], work / "asyncpg.jsonl")
            base_time = time.monotonic() - t0
            ours, ours_built = outcomes(runs["poolkit"], work / "poolkit.jsonl")
            ours_time = time.monotonic() - t0
            passed_before = {t for t, o in base.items() if o == "passed"}
            differ = sorted(t for t in passed_before if t not in SKIPS and ours.get(t) != "passed")
            for attempt in range(args.reruns):
                if not differ:
                    break
                say(f"running again, alone, the {len(differ)} that differ ({attempt + 1}): "
                    + ", ".join(differ))  # fmt: skip
                results = work / f"again{attempt}.jsonl"
                again, again_built = outcomes(
                    start_pytest(python, tree, envs["poolkit"], "poolkit", differ, results),
                    results,
                )
                for nodeid in differ:
                    if again.get(nodeid) == "passed":
                        say(f"passed when run again alone: {nodeid}")
                        ours[nodeid] = "passed"
                        if nodeid in again_built:
                            ours_built.add(nodeid)
                differ = [t for t in differ if again.get(t) != "passed"]
        finally:
            for side in sides:
                admin(python, envs[side], f"DROP DATABASE IF EXISTS {names[side]} WITH (FORCE)")
    if len(passed_before) < 30:
        print((work / "asyncpg.log").read_text(encoding="utf-8"))
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
    wanted = len((passed_before & base_built) - skipped)
    reached = len({t for t, o in ours.items() if o == "passed"} & ours_built)
    say(
        f"passing tests that built a pool: {reached} with poolkit's (at least {wanted} wanted: "
        f"asyncpg's {len(passed_before & base_built)}, less SKIPS)"
    )
    status = 0
    if reached < wanted:
        say("the swap did not reach every test: fewer passing tests built poolkit's pool")
        status = 1
    if worse:
        print((work / "poolkit.log").read_text(encoding="utf-8"))
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
