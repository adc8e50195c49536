"""What the peer-suite runners share (``tools/*_suite/run.py``: redis-py's, psycopg_pool's,
asyncpg's and SQLAlchemy's own tests, run with the peer's pools and with poolkit's in their
place): the steps every runner takes in the same way, each runner keeping what is its own (its
peer, its tests, its SKIPS and KNOWN_FAILURES with their reasons, how its plugin swaps the pools
in: ``poolkit_swap.py`` beside it).

A runner makes one :class:`Suite` (its name, the prefix of its plugin's environment variables,
its folder) and goes through it: the peer's version and venv (made once in the cache folder), a
fresh work folder, the peer's source distribution unpacked once, a private PostgreSQL cluster and
its databases, pytest started with the plugin and its outcomes read back, a differing test run
again alone before it counts, the figures and the check that the swap reached the tests.

Exit status of every runner: 0 when nothing differs; 1 with the list of tests that do; 2 if it
could not run.
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
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import peer_sdist

#: tools/: the shared modules (this one, peer_sdist, peer_suite_outcomes), on each run's PYTHONPATH
TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent


def listed(nodeid: str, table: dict[str, str]) -> str | None:
    """The entry of ``table`` (SKIPS, KNOWN_FAILURES: test names) ``nodeid`` falls under: its
    own, or its test function's (``name[param]`` under ``name``)."""
    if nodeid in table:
        return nodeid
    name = nodeid.split("[", 1)[0]
    return name if name in table else None


def figures(found: dict[str, str], seconds: float) -> str:
    """A run's outcomes counted: ``N passed, N failed, N skipped in N s``."""
    counts = {o: sum(v == o for v in found.values()) for o in ("passed", "failed", "skipped")}
    return (
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
        f"in {seconds:.0f} s"
    )


def reach(
    base: dict[str, str], base_built: set[str], ours: dict[str, str], ours_built: set[str],
    excluded: set[str],
) -> tuple[int, int]:  # fmt: skip
    """Whether the swap reached the tests: the passing tests that built a pool with poolkit's
    (``reached``) and how many at least (``wanted``: those that built the peer's and passed, less
    ``excluded``, the tests not run or tolerated)."""
    passed_before = {t for t, o in base.items() if o == "passed"}
    wanted = len((passed_before & base_built) - excluded)
    reached = len({t for t, o in ours.items() if o == "passed"} & ours_built)
    return reached, wanted


def run(cmd: list[str], **kwargs: object) -> None:
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_copy(source: Path, target: Path) -> Path:
    """A fresh copy of a peer's tests folder (each run writes its .pytest_cache there)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return target


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


def shared_server() -> str:
    """The server DSN of the shared server (``$POOLKIT_TEST_PG_DSN``'s host, port and user)."""
    url = urlsplit(os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/"))
    host, port, user = url.hostname or "127.0.0.1", url.port or 5432, url.username or "postgres"
    return f"host={host} port={port} user={user}"


class Suite:
    """One runner's shared steps. ``name`` prefixes everything it says (``"asyncpg suite"``);
    ``env`` its plugin's environment variables (``POOLKIT_ASYNCPG_SUITE``: ``_POOLS``,
    ``_RESULTS``, ``_DESELECT``); ``here`` its folder (``poolkit_swap.py``'s)."""

    def __init__(self, name: str, env: str, here: Path) -> None:
        self.name = name
        self.env = env
        self.here = here

    def say(self, message: str) -> None:
        print(f"{self.name}: {message}", flush=True)

    def fail(self, message: str) -> NoReturn:
        """End the run, saying why on stderr (``sys.exit`` with a message: exit status 1)."""
        sys.exit(f"{self.name}: {message}")

    # ------------------------------------------------------------------ set-up

    def arguments(
        self, doc: str | None, cache: str, cache_help: str, selection: str, selection_help: str,
        extra: Callable[[argparse.ArgumentParser], object] | None = None,
    ) -> argparse.Namespace:  # fmt: skip
        """The command line: ``--cache`` (default ``$<env>_CACHE`` or ``~/.cache/poolkit/``
        ``cache``), ``--reruns``, what ``extra`` adds, then the tests to run (``selection``)."""
        parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
        default_cache = os.environ.get(f"{self.env}_CACHE") or str(
            Path.home() / ".cache" / "poolkit" / cache
        )
        parser.add_argument("--cache", default=default_cache, help=cache_help)
        parser.add_argument(
            "--reruns", type=int, default=2, help="runs more of a test that differs"
        )
        if extra is not None:
            extra(parser)
        parser.add_argument(selection, nargs="*", help=selection_help)
        return parser.parse_args()

    def version(self, dist: str, shown: str | None = None, extra: str = "test") -> str:
        """The installed version of ``dist``; if it is not installed, the run ends, saying so."""
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            self.fail(f"{shown or dist} is not installed here (pip install -e '.[{extra}]')")

    def cache(self, folder: str, version: str) -> Path:
        """``folder`` (``--cache``) / ``version``, made if need be."""
        cache = Path(folder).expanduser().resolve() / version
        cache.mkdir(parents=True, exist_ok=True)
        return cache

    @staticmethod
    def work(cache: Path) -> Path:
        """A fresh ``last-run`` folder in ``cache`` (the logs of the last run stay there)."""
        work = cache / "last-run"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        return work

    def venv(
        self, cache: Path, wanted: dict[str, object], install: list[str], needs: list[str],
        what: str,
    ) -> Path:  # fmt: skip
        """The python of a venv in ``cache`` with ``install`` and ``needs`` (pip requirements),
        made once: again only when ``wanted`` (the peer's versions), ``needs`` or this Python's
        version change. ``what``: whose tests it runs, as said when it is made."""
        home = cache / "venv"
        python = home / "bin" / "python"
        marker = home / "poolkit-suite.json"
        wanted = {**wanted, "needs": needs, "python": sys.version.split()[0]}
        if python.exists() and marker.is_file() and json.loads(marker.read_text()) == wanted:
            return python
        if home.exists():
            shutil.rmtree(home)
        self.say(f"making a venv for {what} in {home}")
        run([sys.executable, "-m", "venv", str(home)])
        run([str(python), "-m", "pip", "install", "-q", *install, *needs])
        marker.write_text(json.dumps(wanted))
        return python

    def sdist(
        self, cache: Path, dist: str, version: str, tree: Path, check: str,
        keep: Callable[[str], bool] | None = None, missing: str | None = None,
    ) -> Path:  # fmt: skip
        """``tree``: ``dist`` ``version``'s source distribution, fetched (``peer_sdist``) and
        unpacked once, its members under the top folder that ``keep`` takes (their paths below
        it; all if ``None``); ``check``, a file below the top folder, must be there
        (``missing``: what the run says, ending, when it is not)."""
        if (tree / check).is_file():
            return tree
        download = cache / "download"
        download.mkdir(parents=True, exist_ok=True)
        archive = peer_sdist.fetch(dist, version, download, self.say)
        with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(archive) as tar:
            members = None
            if keep is not None:
                members = [m for m in tar.getmembers() if keep(m.name.split("/", 1)[-1])]
            tar.extractall(tmp, members=members, filter="data")
            (top,) = Path(tmp).iterdir()
            if not (top / check).is_file():
                self.fail(missing or f"{archive.name} has no {check}")
            if tree.exists():
                shutil.rmtree(tree)
            shutil.move(str(top), str(tree))
        return tree

    # ------------------------------------------------------------------ PostgreSQL

    @contextlib.contextmanager
    def private_cluster(self) -> Iterator[str | None]:
        """A private PostgreSQL cluster on a free port of 127.0.0.1 (trust auth, user postgres),
        in a temporary folder, stopped and removed at the end: its server DSN; ``None`` if it
        cannot be made here (no ``initdb``; root without a ``postgres`` user)."""
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
            run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                 "postgres", "-E", "UTF8", "--no-sync"], stdout=subprocess.DEVNULL)  # fmt: skip
            options = (f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off "
                       "-c max_connections=300")  # fmt: skip
            run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l",
                 str(home / "server.log"), "start"], stdout=subprocess.DEVNULL)  # fmt: skip
        except (subprocess.CalledProcessError, OSError) as exc:
            self.say(f"could not start a private cluster ({exc}): using the shared server")
            shutil.rmtree(home, ignore_errors=True)
            yield None
            return
        try:
            yield f"host=127.0.0.1 port={port} user=postgres"
        finally:
            subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m",
                            "immediate", "-w", "stop"], stdout=subprocess.DEVNULL)  # fmt: skip
            shutil.rmtree(home, ignore_errors=True)

    @staticmethod
    def psycopg_admin(python: Path, server: str) -> Callable[[str], None]:
        """Runs SQL in ``server``'s ``postgres`` database (autocommit), with psycopg in the
        venv of ``python``."""
        script = "import psycopg, sys\nwith psycopg.connect(sys.argv[1], autocommit=True) as c:\n" \
            "    c.execute(sys.argv[2])\n"  # fmt: skip

        def admin(sql: str) -> None:
            run([str(python), "-c", script, f"{server} dbname=postgres", sql])

        return admin

    @staticmethod
    @contextlib.contextmanager
    def databases(admin: Callable[[str], None], names: Iterable[str]) -> Iterator[None]:
        """Databases ``names``, made fresh (dropped first if a run left them) with ``admin`` (runs
        SQL in the server's ``postgres`` database), and dropped at the end."""
        names = list(names)
        for name in names:
            admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin(f"CREATE DATABASE {name}")
        try:
            yield
        finally:
            for name in names:
                with contextlib.suppress(subprocess.CalledProcessError):
                    admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    # ------------------------------------------------------------------ the runs

    def start_pytest(
        self, python: Path, tree: Path, pools: str, tests: Sequence[str], results: Path, *,
        args: Sequence[str], env: dict[str, str] | None = None, path: Sequence[Path] = (),
        deselect: Iterable[str] | None = None,
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        """Start ``tests`` (paths or node ids) in the peer's ``tree`` with ``pools`` (the plugin
        swaps poolkit's in for ``"poolkit"``) and pytest's ``args`` before them; ``env`` added to
        the environment, ``path`` first on the PYTHONPATH (then the runner's folder, tools/ and
        poolkit's src); ``deselect``: the test names the plugin leaves out. Its output goes to
        ``results`` with the suffix .log, its outcomes to ``results``."""
        environ = dict(os.environ)
        environ.update(env or {})
        environ.update(
            {
                f"{self.env}_POOLS": pools,
                f"{self.env}_RESULTS": str(results),
                "PYTHONPATH": os.pathsep.join(
                    [*map(str, path), str(self.here), str(TOOLS), str(ROOT / "src")]
                ),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        environ.pop("PYTEST_ADDOPTS", None)
        if deselect is not None:
            environ[f"{self.env}_DESELECT"] = json.dumps(sorted(deselect))
        cmd = [str(python), "-m", "pytest", "-p", "poolkit_swap", *args, *tests]
        results.unlink(missing_ok=True)
        with open(results.with_suffix(".log"), "w", encoding="utf-8") as log:
            return subprocess.Popen(
                cmd, cwd=tree, env=environ, stdout=log, stderr=subprocess.STDOUT
            )

    def outcomes(
        self, process: subprocess.Popen[bytes], results: Path
    ) -> tuple[dict[str, str], set[str]]:
        """What ``process`` (from :meth:`start_pytest`) found, by node id, once it has ended; the
        tests that built a pool of the side under test (none where the plugin does not say)."""
        process.wait()
        if not results.is_file():
            self.fail(f"pytest wrote no results; see {results.with_suffix('.log')}")
        found: dict[str, str] = {}
        built: set[str] = set()
        for line in results.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            found[entry["nodeid"]] = entry["outcome"]
            if entry.get("built"):
                built.add(entry["nodeid"])
        return found, built

    def rerun(
        self, differ: list[str], reruns: int,
        start: Callable[[list[str], Path], subprocess.Popen[bytes]], results: Callable[[int], Path],
        saying: Callable[[int, list[str]], str], ours: dict[str, str] | None = None,
        ours_built: set[str] | None = None, passed: Callable[[str], None] | None = None,
    ) -> list[str]:  # fmt: skip
        """Run the tests that ``differ`` again, alone (``start(tests, results)``), up to
        ``reruns`` times, each time saying ``saying(attempt, tests)`` first; those still differing.
        A test that passes again counts as passed in ``ours`` (and built in ``ours_built`` if it
        built a pool), if given, and ``passed`` is told its node id."""
        for attempt in range(reruns):
            if not differ:
                break
            self.say(saying(attempt, differ))
            path = results(attempt)
            again, again_built = self.outcomes(start(differ, path), path)
            for nodeid in differ:
                if again.get(nodeid) == "passed":
                    if passed is not None:
                        passed(nodeid)
                    if ours is not None:
                        ours[nodeid] = "passed"
                    if ours_built is not None and nodeid in again_built:
                        ours_built.add(nodeid)
            differ = [t for t in differ if again.get(t) != "passed"]
        return differ

    def unlisted(self, table: dict[str, str], name: str, found: Iterable[str], whose: str) -> None:
        """Say each entry of ``table`` (``name``: SKIPS, KNOWN_FAILURES) that none of the tests
        ``found`` falls under (``whose``: the peer's tests, as said)."""
        for entry in sorted(set(table) - {listed(t, table) for t in found}):
            self.say(f"listed in {name} but not among {whose}: {entry}")

    def show_log(self, log: Path, tail: int | None = None) -> None:
        """Print a run's log (its last ``tail`` characters if given)."""
        text = log.read_text(encoding="utf-8")
        print(text if tail is None else text[-tail:])
