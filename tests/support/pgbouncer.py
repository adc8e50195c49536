"""PgBouncer in front of the test PostgreSQL server, for the tests of tests/bench.

Tests take the ``pgbouncer`` fixture (import it: ``from pgbouncer import pgbouncer``; a
``conftest.py`` in tests/bench would be a second top-level module named ``conftest`` beside
tests/conftest.py, which mypy refuses). It gives each test a PgBouncer of its own, started fresh
(no server connection, no prepared statement left by another test) on 127.0.0.1 and a free port,
in transaction pooling with :data:`DEFAULT_POOL_SIZE` server connections, in front of
``POOLKIT_TEST_PG_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``).

The ``pgbouncer`` program is taken from PATH or /usr/sbin (Debian's package: ``.ci/run``
installs it; the tests install nothing). Without it, or without the PostgreSQL server, the
tests skip saying why, and fail under ``POOLKIT_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from bench_run import PG_DSN, skip_or_fail
from debian_packages import program_or_reason

#: PgBouncer's server connections per (database, user): small, so that the effect is seen
DEFAULT_POOL_SIZE = 5
#: the name the PostgreSQL database has behind PgBouncer
DATABASE = "test"
#: how long PgBouncer may take to listen, and to stop
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


@dataclasses.dataclass
class PgBouncer:
    """A PgBouncer process listening on 127.0.0.1:``port``; ``url`` reaches PostgreSQL's
    database through it, ``admin()`` asks its admin console (``SHOW ...``)."""

    port: int
    user: str
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@{self.address}/{DATABASE}"

    def admin(self, command: str) -> list[dict[str, Any]]:
        """The rows of an admin console command (``SHOW SERVERS``, ...), as dicts."""
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(
            f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer",
            autocommit=True,
            prepare_threshold=None,
            connect_timeout=5,
            row_factory=dict_row,
        ) as conn:
            return conn.execute(command).fetchall()

    def servers(self) -> list[dict[str, Any]]:
        """PgBouncer's server connections to :data:`DATABASE` (its pool, open now)."""
        return [s for s in self.admin("SHOW SERVERS") if s["database"] == DATABASE]

    def clients(self) -> list[dict[str, Any]]:
        """The client connections PgBouncer holds for :data:`DATABASE` now."""
        return [c for c in self.admin("SHOW CLIENTS") if c["database"] == DATABASE]

    def log(self) -> str:
        """PgBouncer's log so far (for a failing test's message)."""
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


@functools.cache
def _postgres_missing() -> str | None:
    """Why the PostgreSQL server behind PgBouncer cannot be used, or ``None`` (asked once)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (it talks to PgBouncer): pip install -e '.[test]'"
    try:
        with psycopg.connect(PG_DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_DSN} is not reachable: {' '.join(str(exc).split())}"
    return None


def _find() -> str | None:
    found = shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


@functools.cache
def _program() -> tuple[str | None, str]:
    """The ``pgbouncer`` program, or why it is missing (asked once per run)."""
    return program_or_reason("pgbouncer", _find)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _config(directory: Path, port: int) -> tuple[Path, str]:
    """pgbouncer.ini and userlist.txt in ``directory``; the ini's path and the client user."""
    server = urlsplit(PG_DSN)
    user = unquote(server.username or "postgres")
    target = (
        f"host={server.hostname or '127.0.0.1'} port={server.port or 5432} "
        f"dbname={unquote(server.path.lstrip('/')) or DATABASE}"
    )
    if server.password:  # (PgBouncer logs in to PostgreSQL with it; its clients need none)
        target += f" user={user} password={unquote(server.password)}"
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"{DATABASE} = {target}\n"
        "\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'userlist.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {DEFAULT_POOL_SIZE}\n"
        "max_client_conn = 200\n"
        f"admin_users = {user}\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
        f"pidfile = {directory / 'pgbouncer.pid'}\n"
    )
    return ini, user


def _run_as() -> list[str]:
    """PgBouncer will not run as root: ``-u USER`` (postgres, else nobody) makes it switch."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return ["-u", name]
    raise RuntimeError("running as root, and neither a postgres nor a nobody user to run as")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (PgBouncer's immediate shutdown: its connections close), then SIGKILL."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)


def _start(program: str, directory: Path) -> PgBouncer:
    """PgBouncer on a free port of 127.0.0.1, once it accepts connections."""
    log = ""
    for _attempt in range(3):  # (another process may take the free port first)
        port = _free_port()
        ini, user = _config(directory, port)
        (directory / "pgbouncer.log").unlink(missing_ok=True)
        process = subprocess.Popen(
            [program, *_run_as(), str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # (it logs to the logfile, and to stderr: not kept twice)
            stderr=subprocess.DEVNULL,
        )
        bouncer = PgBouncer(port, user, directory, process)
        deadline = time.monotonic() + START_TIMEOUT
        while process.poll() is None and time.monotonic() < deadline:
            if _accepts(port):
                return bouncer
            time.sleep(0.05)
        _stop(process)
        log = bouncer.log()
    raise RuntimeError(f"pgbouncer did not start; its log:\n{log}")


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    """A fresh PgBouncer in front of the test PostgreSQL server (see the module's doc)."""
    reason = _postgres_missing()
    if reason is not None:
        skip_or_fail(reason)
    program, missing = _program()
    if program is None:
        skip_or_fail(missing)
        raise AssertionError("not reached")
    # (not pytest's tmp_path: its parent is private to root, and PgBouncer runs as postgres)
    directory = Path(tempfile.mkdtemp(prefix="poolkit-pgbouncer-"))
    try:
        if os.geteuid() == 0 and (run_as := _run_as()):
            entry = pwd.getpwnam(run_as[1])
            os.chown(directory, entry.pw_uid, entry.pw_gid)  # (its log and pid files)
        directory.chmod(0o755)
        bouncer = _start(program, directory)
        try:
            yield bouncer
        finally:
            _stop(bouncer.process)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
