"""``poolkit bench`` through PgBouncer (transaction pooling), run as a user runs it: four worker
processes with a pool of 8 each (32 client connections) in front of PgBouncer's pool of
:data:`~pgbouncer.DEFAULT_POOL_SIZE` server connections.

What PgBouncer 1.18 does to the bench, found here:

* Through PgBouncer the server connections are PgBouncer's, shared by all its clients; it
  gives one the client's ``application_name`` with a ``SET`` when it lends it out, and the
  backends' reset hook (``RESET ALL``, on every check-in) sets it back to PgBouncer's own
  (empty), and PgBouncer copies that back into the client's. So ``pg_stat_activity`` cannot
  tell the run's server connections: with ``--pgbouncer`` the bench asks PgBouncer's admin
  console instead (``SHOW SERVERS``: its pool; ``SHOW CLIENTS``: what the run left open).
* asyncpg without ``--pgbouncer`` (its statement cache on: named prepared statements) runs, but
  each connection's statement exists only on the server connection it was prepared on: the
  operations that land on another fail with ``InvalidSQLStatementNameError`` (prepared
  statement "__asyncpg_stmt_N__" does not exist). Once PgBouncer's server connections hold such
  names (from any asyncpg client), the command stops at its first connection with
  ``DuplicatePreparedStatementError`` (exit 1, one line).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench_run import Ran, assert_one_line_error, bench
from pgbouncer import DEFAULT_POOL_SIZE, PgBouncer, pgbouncer

__all__ = ["pgbouncer"]  # (the fixture: imported for pytest)

# (a test's bench runs may take more than the suite's default 120 s)
pytestmark = pytest.mark.timeout(240)

PROCESSES = 4
MAX_SIZE = 8
RUN = (
    "--processes",
    str(PROCESSES),
    "--max-size",
    str(MAX_SIZE),
    "--concurrency",
    "16",
    "--duration",
    "2",
    "--warmup",
    "0.5",
    "--json",
)
#: the errors asyncpg's named prepared statements meet behind transaction pooling
PREPARED_STATEMENT_ERRORS = {"InvalidSQLStatementNameError", "DuplicatePreparedStatementError"}


def run(bouncer: PgBouncer, *extra: str) -> Ran:
    return bench(bouncer.url, *RUN, *extra, timeout=90.0)


def result_of(ran: Ran, bouncer: PgBouncer) -> dict[str, Any]:
    assert ran.code == 0, f"{ran.stderr}\nPgBouncer's log:\n{bouncer.log()}"
    return ran.result()


def wait_no_clients(bouncer: PgBouncer, timeout: float = 5.0) -> list[dict[str, Any]]:
    """PgBouncer's clients of the database once there are none (it sees a close a moment
    after the command has ended), or as they are after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (clients := bouncer.clients()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return clients


def assert_many_clients_few_servers(result: dict[str, Any], bouncer: PgBouncer) -> None:
    """32 client connections (the sum of the pools) were served by PgBouncer's pool of
    DEFAULT_POOL_SIZE server connections, and nothing was left open on either side."""
    assert result["errors"] == {}
    assert result["ops"] > 0 and result["throughput"] > 0
    connections = result["connections"]
    assert connections["client_peak"] == PROCESSES * MAX_SIZE  # every pool filled up
    assert connections["left_open"] == 0
    # The bench's count, from PgBouncer's admin console: its server connections for the
    # database (its pool: at most DEFAULT_POOL_SIZE, however many clients), and its clients
    # once the run has closed its pools (none).
    assert 1 <= connections["server_peak"] <= DEFAULT_POOL_SIZE, connections
    assert connections["server_left_open"] == 0, connections
    # PgBouncer's own count: its pool is still open (it keeps idle server connections), never
    # larger than default_pool_size; the bench's client connections are all closed.
    servers = bouncer.servers()
    assert 0 < len(servers) <= DEFAULT_POOL_SIZE, servers
    assert wait_no_clients(bouncer) == []


def test_four_processes_of_asyncpg_through_pgbouncer(pgbouncer: PgBouncer) -> None:
    """``--pgbouncer``: asyncpg's statement cache off, so every operation works."""
    ran = run(pgbouncer, "--pgbouncer")
    result = result_of(ran, pgbouncer)
    assert ran.json()["driver"] == "asyncpg"
    assert_many_clients_few_servers(result, pgbouncer)


def test_psycopg_threads_through_pgbouncer(pgbouncer: PgBouncer) -> None:
    """``--driver psycopg --threads --pgbouncer``: psycopg's prepare_threshold=None."""
    ran = run(pgbouncer, "--driver", "psycopg", "--threads", "--pgbouncer")
    result = result_of(ran, pgbouncer)
    assert (ran.json()["driver"], ran.json()["mode"]) == ("psycopg", "threads")
    assert_many_clients_few_servers(result, pgbouncer)


def test_asyncpg_without_the_pgbouncer_option_fails_its_operations(pgbouncer: PgBouncer) -> None:
    """On a fresh PgBouncer the command's first connection works (one client: PgBouncer lends
    it the same server connection each time), then each connection's operations that PgBouncer
    sends to a server connection other than the one its statement was prepared on fail (exit 0:
    the errors are counted, as any operation's; the summary says what to try)."""
    ran = run(pgbouncer)
    result = result_of(ran, pgbouncer)
    # Again, as a table: the summary (or, now that the server connections hold asyncpg's
    # statement names, the one-line error: see the next test) says what to try.
    again = bench(pgbouncer.url, *RUN[:-1], timeout=90.0)
    assert "Use --pgbouncer" in (again.stdout if again.code == 0 else again.stderr), again
    errors = result["errors"]
    assert errors, "asyncpg's named prepared statements through transaction pooling"
    assert set(errors) <= PREPARED_STATEMENT_ERRORS, errors
    assert result["connections"]["left_open"] == 0


def test_asyncpg_without_the_pgbouncer_option_stops_on_a_used_pgbouncer(
    pgbouncer: PgBouncer,
) -> None:
    """Server connections that hold an asyncpg statement name already (an earlier asyncpg
    client's, here put on every one of them): the command's first connection fails to prepare
    its first statement, and the command ends in one line, exit 1."""
    import psycopg

    # One transaction per server connection at once (transaction pooling: each holds one).
    clients = [
        psycopg.connect(pgbouncer.url, prepare_threshold=None, connect_timeout=5)
        for _ in range(DEFAULT_POOL_SIZE)
    ]
    try:
        for client in clients:
            client.execute("PREPARE __asyncpg_stmt_1__ AS SELECT 1")
        assert len({c.execute("SELECT pg_backend_pid()").fetchone() for c in clients}) == len(
            clients
        )
    finally:
        for client in clients:
            client.commit()
            client.close()
    ran = run(pgbouncer)
    assert_one_line_error(
        ran,
        1,
        pgbouncer.url,
        "DuplicatePreparedStatementError",
        "__asyncpg_stmt_1__",
        "Use --pgbouncer",
    )


def test_with_the_pgbouncer_option_asyncpg_ignores_statements_left_on_the_server(
    pgbouncer: PgBouncer,
) -> None:
    """The same used PgBouncer as above: ``--pgbouncer`` prepares only unnamed statements."""
    import psycopg

    with psycopg.connect(pgbouncer.url, prepare_threshold=None, connect_timeout=5) as client:
        client.execute("PREPARE __asyncpg_stmt_1__ AS SELECT 1")
    ran = run(pgbouncer, "--pgbouncer")
    assert result_of(ran, pgbouncer)["errors"] == {}


DOC = Path(__file__).parents[2] / "docs" / "bench-pgbouncer.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
DOC_URL = "postgresql://postgres@127.0.0.1:6432/test"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_the_documented_examples_run_through_pgbouncer(pgbouncer: PgBouncer, example: str) -> None:
    """docs/bench-pgbouncer.md's application code, through the test's PgBouncer."""
    assert DOC_URL in example
    code = example.replace(DOC_URL, pgbouncer.url).replace("127.0.0.1:6432", pgbouncer.address)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "2" in done.stdout
