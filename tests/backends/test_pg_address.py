"""The address a PostgreSQL pool shows (reprs, events, logs' serverHost/serverPort), from a
libpq URI or connection parameters as asyncpg and psycopg take them (an audit of issue 24: IPv6
hosts, several hosts and a host in the query string were shown wrong, or raised)."""

from __future__ import annotations

from typing import Any

import pytest

from poolkit.backends._common import shown_address, uri_params
from poolkit.log import split_address


@pytest.mark.parametrize(
    ("dsn", "shown", "server"),
    [
        ("postgresql://u:pw@db.example:5433/app", "db.example:5433/app", ("db.example", 5433)),
        ("postgresql://u@db.example/app", "db.example/app", ("db.example", None)),
        ("postgresql://postgres@[::1]:5432/test", "[::1]:5432/test", ("::1", 5432)),
        (
            "postgresql://postgres@127.0.0.1:5432,127.0.0.2:5433/test",
            "127.0.0.1:5432,127.0.0.2:5433/test",
            ("127.0.0.1", 5432),
        ),
        ("postgres://h1,h2:6000/x", "h1,h2:6000/x", ("h1", None)),
        (
            "postgresql://postgres@/test?host=127.0.0.1&port=5432",
            "127.0.0.1:5432/test",
            ("127.0.0.1", 5432),
        ),
        ("postgresql:///test", "localhost/test", ("localhost", None)),
    ],
)
def test_a_uri_is_shown_as_libpq_reads_it(
    dsn: str, shown: str, server: tuple[str, int | None]
) -> None:
    address = shown_address(uri_params(dsn))
    assert address == shown
    assert "pw" not in address
    assert split_address(address) == server


@pytest.mark.parametrize(
    ("params", "shown"),
    [
        ({"host": ["a", "b"], "port": [1, 2], "database": "d"}, "a:1,b:2/d"),
        ({"host": "a,b", "port": "5432"}, "a:5432,b:5432"),
        ({"host": "/var/run/postgresql", "port": "5432", "dbname": "t"}, "/var/run/postgresql/t"),
        ({"host": "::1", "port": 5432}, "[::1]:5432"),
        ({}, "postgresql"),
    ],
)
def test_parameters_are_shown_as_libpq_reads_them(params: dict[str, Any], shown: str) -> None:
    assert shown_address(params) == shown
