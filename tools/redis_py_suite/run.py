"""redis-py's own tests for its pools, pipelines and pub/sub, run with redis-py's pools and then
with poolkit's drop-ins in their place: fails if a test passes with redis-py's pools and fails
with poolkit's, except the tests listed in SKIPS (each with its reason).

``python tools/redis_py_suite/run.py`` (from any venv that has redis-py; .ci/run runs it):

1. reads the installed redis-py's version and fetches that version's source distribution from
   the package index (``tools/peer_sdist.py``; it ships redis-py's tests/), into a cache folder
   (``--cache``, default ``$POOLKIT_REDIS_SUITE_CACHE`` or ``~/.cache/poolkit/redis-py-suite``);
2. makes a venv of its own there with that redis-py and what its tests need (pytest-asyncio and
   the rest: the project's own venv and test suite do not depend on them);
3. starts two private redis-servers on free ports (redis-py's tests flush their databases: never
   the shared 6379), runs FILES on them at once, with redis-py's pools on one and poolkit's on
   the other (``POOLKIT_REDIS_SUITE_POOLS=redis`` / ``=poolkit``: see poolkit_swap.py), and
   compares. A test that differs is run again (up to ``--reruns``
   times, alone) before it counts: a timing test can lose once on a loaded machine.

Exit status 0 when nothing differs; 1 with the list of tests that do; 2 if it could not run.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tools/: what the runners share
from peer_suite import Suite, free_port  # noqa: E402

SUITE = Suite("redis-py suite", "POOLKIT_REDIS_SUITE", HERE)

#: redis-py's test files for what the drop-ins serve: pools, pipelines, pub/sub (sync, asyncio)
FILES = [
    "tests/test_connection_pool.py",
    "tests/test_asyncio/test_connection_pool.py",
    "tests/test_pipeline.py",
    "tests/test_asyncio/test_pipeline.py",
    "tests/test_pubsub.py",
    "tests/test_asyncio/test_pubsub.py",
]
#: what redis-py's tests need beside redis-py and pytest (its conftest imports packaging)
NEEDS = ["pytest", "pytest-asyncio>=0.24", "pytest-timeout", "packaging"]

_PRIVATE_LISTS = (
    "reads or fills redis-py's private _available_connections / _in_use_connections lists, "
    "which poolkit's pools do not keep (the poolkit pool holds the connections)"
)
#: tests not run with poolkit's pools: each reads redis-py's private attributes (what they check
#: besides is in tests/backends/test_redis_dropin*.py)
SKIPS: dict[str, str] = {
    f"tests/{test}": _PRIVATE_LISTS
    for test in [
        "test_connection_pool.py::TestConnectionPool::test_release_not_owned_connection",
        "test_connection_pool.py::TestConnection::test_on_connect_error",
        "test_connection_pool.py::TestConnection::test_busy_loading_from_pipeline",
        "test_connection_pool.py::TestConnection::"
        "test_busy_loading_from_pipeline_immediate_command",
        "test_asyncio/test_connection_pool.py::TestConnection::test_on_connect_error",
        *(
            f"test_asyncio/test_connection_pool.py::TestConnection::{name}[{client}]"
            for name in (
                "test_busy_loading_from_pipeline",
                "test_busy_loading_from_pipeline_immediate_command",
            )
            for client in ("single", "pool")
        ),
        *(
            f"test_asyncio/test_connection_pool.py::TestRedisAutoReleaseConnectionPool::{name}"
            for name in (
                "test_auto_disconnect_redis_created_pool[single]",
                "test_auto_disconnect_redis_created_pool[pool]",
                "test_do_not_auto_disconnect_redis_created_pool[single]",
                "test_do_not_auto_disconnect_redis_created_pool[pool]",
                "test_auto_release_override_true_manual_created_pool[single]",
                "test_auto_release_override_true_manual_created_pool[pool]",
                "test_negate_auto_close_client_pool[single-True]",
                "test_negate_auto_close_client_pool[single-False]",
                "test_negate_auto_close_client_pool[pool-True]",
                "test_negate_auto_close_client_pool[pool-False]",
            )
        ),
        "test_asyncio/test_connection_pool.py::TestAsyncConnectionPoolMetricsRecording::"
        "test_connection_pool_does_not_record_create_time_for_existing_connection",
        "test_asyncio/test_connection_pool.py::TestAsyncConnectionPoolMetricsRecording::"
        "test_blocking_connection_pool_records_only_wait_time_for_existing_connection",
        *(
            "test_asyncio/test_pipeline.py::TestPipeline::"
            f"test_pipeline_reset_releases_connection_when_cancelled[{client}]"
            for client in ("single", "pool")
        ),
    ]
}


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A private redis-server on a free port of 127.0.0.1 (no persistence, in ``workdir``); its
    URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    base = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--dir", str(workdir)]  # fmt: skip
    for extra in (["--enable-debug-command", "local"], []):  # (Redis >= 7 knows the option)
        server = subprocess.Popen(
            [*base, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if _answers(port, server):
            break
    else:
        SUITE.fail(f"{binary} did not start on port {port}")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _answers(port: int, server: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return True
        except OSError:
            time.sleep(0.05)
    server.kill()
    server.wait()
    return False


def start_pytest(
    python: Path, tree: Path, url: str, pools: str, tests: list[str], results: Path
) -> subprocess.Popen[bytes]:
    """Start ``tests`` (files or node ids) in redis-py's tree with ``pools`` against ``url``."""
    deselect = [f"--deselect={nodeid}" for nodeid in SKIPS] if pools == "poolkit" else []
    return SUITE.start_pytest(
        python, tree, pools, tests, results,
        args=["-p", "no:cacheprovider", "-q", "--tb=native", "--no-header", "-o", "addopts=",
              f"--redis-url={url}", *deselect],
    )  # fmt: skip


def main() -> int:
    args = SUITE.arguments(
        __doc__, "redis-py-suite", "where sources and venv are kept", "tests",
        "files or node ids (default: FILES)",
    )  # fmt: skip
    say = SUITE.say
    started = time.monotonic()
    version = SUITE.version("redis", "redis-py")
    cache = SUITE.cache(args.cache, version)
    tree = SUITE.sdist(
        cache, "redis", version, cache / f"redis-{version}", "tests/conftest.py",
        missing=f"redis-{version}.tar.gz has no tests/: cannot run redis-py's tests",
    )  # fmt: skip
    python = SUITE.venv(cache, {"redis": version}, [f"redis=={version}"], NEEDS, "redis-py's tests")
    tests = args.tests or FILES
    work = SUITE.work(cache)
    # the two runs at once, each on a server of its own (mostly waiting: pub/sub timeouts)
    with redis_server(work / "a") as url_a, redis_server(work / "b") as url_b:
        say(f"redis-py {version}'s tests with redis-py's pools and with poolkit's, at once")
        runs = [
            start_pytest(python, tree, url, pools, tests, work / f"{pools}.jsonl")
            for url, pools in ((url_a, "redis"), (url_b, "poolkit"))
        ]
        base, _ = SUITE.outcomes(runs[0], work / "redis.jsonl")
        ours, _ = SUITE.outcomes(runs[1], work / "poolkit.jsonl")
        differ = SUITE.rerun(
            sorted(t for t, o in ours.items() if o == "failed" and base.get(t) == "passed"),
            args.reruns,
            lambda differ, results: start_pytest(python, tree, url_b, "poolkit", differ, results),
            lambda attempt: work / f"again{attempt}.jsonl",
            lambda attempt, differ: f"running again the {len(differ)} that differ ({attempt + 1})",
        )
    passed = sum(o == "passed" for o in base.values())
    if passed < 100:
        SUITE.show_log(work / "redis.log")
        say(f"only {passed} tests passed with redis-py's pools: the run is broken")
        return 2
    missing = sorted(set(SKIPS) - set(base))
    for nodeid in missing:
        say(f"listed in SKIPS but not in redis-py {version}'s tests: {nodeid}")
    counts = {o: sum(v == o for v in ours.values()) for o in ("passed", "failed", "skipped")}
    say(
        f"redis-py's pools: {passed} passed; poolkit's: {counts['passed']} passed, "
        f"{counts['failed']} failed, {counts['skipped']} skipped, {len(SKIPS)} not run (SKIPS), "
        f"in {time.monotonic() - started:.0f} s"
    )
    better = sorted(t for t, o in ours.items() if o == "passed" and base.get(t) == "failed")
    for nodeid in better:
        say(f"fails with redis-py's pools, passes with poolkit's: {nodeid}")
    if differ:
        SUITE.show_log(work / "poolkit.log")
        for nodeid in differ:
            say(f"passes with redis-py's pools, FAILS with poolkit's: {nodeid}")
        say(f"{len(differ)} differ (the logs are in {work})")
        return 1
    say("no test that passes with redis-py's pools fails with poolkit's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
