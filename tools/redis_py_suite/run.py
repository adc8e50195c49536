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

import argparse
import contextlib
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # tools/: what the runners share
import peer_sdist  # noqa: E402

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


def say(message: str) -> None:
    print(f"redis-py suite: {message}", flush=True)


def run(cmd: list[str], **kwargs: object) -> None:
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def redis_version() -> str:
    try:
        return importlib.metadata.version("redis")
    except importlib.metadata.PackageNotFoundError:
        sys.exit("redis-py suite: redis-py is not installed here (pip install -e '.[test]')")


def sources(cache: Path, version: str) -> Path:
    """redis-py ``version``'s unpacked source distribution (with its tests/), fetched once."""
    tree = cache / f"redis-{version}"
    if (tree / "tests" / "conftest.py").is_file():
        return tree
    download = cache / "download"
    download.mkdir(parents=True, exist_ok=True)
    archive = peer_sdist.fetch("redis", version, download, say)
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        unpacked = Path(tmp) / f"redis-{version}"
        if not (unpacked / "tests" / "conftest.py").is_file():
            sys.exit(f"redis-py suite: {archive.name} has no tests/: cannot run redis-py's tests")
        if tree.exists():
            shutil.rmtree(tree)
        unpacked.rename(tree)
    return tree


def venv(cache: Path, version: str) -> Path:
    """The python of a venv with redis-py ``version`` and what its tests need, made once."""
    home = cache / "venv"
    python = home / "bin" / "python"
    marker = home / "poolkit-suite.json"
    wanted = {"redis": version, "needs": NEEDS, "python": sys.version.split()[0]}
    if python.exists() and marker.is_file() and json.loads(marker.read_text()) == wanted:
        return python
    if home.exists():
        shutil.rmtree(home)
    say(f"making a venv for redis-py's tests in {home}")
    run([sys.executable, "-m", "venv", str(home)])
    run([str(python), "-m", "pip", "install", "-q", f"redis=={version}", *NEEDS])
    marker.write_text(json.dumps(wanted))
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        sys.exit(f"redis-py suite: {binary} did not start on port {port}")
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
    """Start ``tests`` (files or node ids) in redis-py's tree with ``pools`` against ``url``;
    its output goes to ``results`` with the suffix .log, its outcomes to ``results``."""
    env = dict(os.environ)
    env.update(
        POOLKIT_REDIS_SUITE_POOLS=pools,
        POOLKIT_REDIS_SUITE_RESULTS=str(results),
        PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), str(ROOT / "src")]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("PYTEST_ADDOPTS", None)
    deselect = [f"--deselect={nodeid}" for nodeid in SKIPS] if pools == "poolkit" else []
    cmd = [str(python), "-m", "pytest", "-p", "poolkit_swap", "-p", "no:cacheprovider",
           "-q", "--tb=native", "--no-header", "-o", "addopts=", f"--redis-url={url}",
           *deselect, *tests]  # fmt: skip
    results.unlink(missing_ok=True)
    with open(results.with_suffix(".log"), "w", encoding="utf-8") as log:
        return subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)


def outcomes(run: subprocess.Popen[bytes], results: Path) -> dict[str, str]:
    """What ``run`` (from :func:`start_pytest`) found, by node id, once it has ended."""
    run.wait()
    if not results.is_file():
        sys.exit(f"redis-py suite: pytest wrote no results; see {results.with_suffix('.log')}")
    found: dict[str, str] = {}
    for line in results.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        found[entry["nodeid"]] = entry["outcome"]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_cache = os.environ.get("POOLKIT_REDIS_SUITE_CACHE") or str(
        Path.home() / ".cache" / "poolkit" / "redis-py-suite"
    )
    parser.add_argument("--cache", default=default_cache, help="where sources and venv are kept")
    parser.add_argument("--reruns", type=int, default=2, help="runs more of a test that differs")
    parser.add_argument("tests", nargs="*", help="files or node ids (default: FILES)")
    args = parser.parse_args()
    started = time.monotonic()
    version = redis_version()
    cache = Path(args.cache).expanduser().resolve() / version
    cache.mkdir(parents=True, exist_ok=True)
    tree = sources(cache, version)
    python = venv(cache, version)
    tests = args.tests or FILES
    work = cache / "last-run"  # (the logs of the last run stay there)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    # the two runs at once, each on a server of its own (mostly waiting: pub/sub timeouts)
    with redis_server(work / "a") as url_a, redis_server(work / "b") as url_b:
        say(f"redis-py {version}'s tests with redis-py's pools and with poolkit's, at once")
        runs = [
            start_pytest(python, tree, url, pools, tests, work / f"{pools}.jsonl")
            for url, pools in ((url_a, "redis"), (url_b, "poolkit"))
        ]
        base = outcomes(runs[0], work / "redis.jsonl")
        ours = outcomes(runs[1], work / "poolkit.jsonl")
        differ = sorted(t for t, o in ours.items() if o == "failed" and base.get(t) == "passed")
        for attempt in range(args.reruns):
            if not differ:
                break
            say(f"running again the {len(differ)} that differ ({attempt + 1})")
            results = work / f"again{attempt}.jsonl"
            again = outcomes(start_pytest(python, tree, url_b, "poolkit", differ, results), results)
            differ = [t for t in differ if again.get(t) != "passed"]
    passed = sum(o == "passed" for o in base.values())
    if passed < 100:
        print((work / "redis.log").read_text(encoding="utf-8"))
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
        print((work / "poolkit.log").read_text(encoding="utf-8"))
        for nodeid in differ:
            say(f"passes with redis-py's pools, FAILS with poolkit's: {nodeid}")
        say(f"{len(differ)} differ (the logs are in {work})")
        return 1
    say("no test that passes with redis-py's pools fails with poolkit's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
