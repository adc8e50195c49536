"""The README's backend examples run as written, against the test servers (PostgreSQL, Redis)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from pg_service import PgServer, pg
from services import RedisServer

__all__ = ["pg"]

README = pathlib.Path(__file__).parents[2] / "README.md"
_TEXT = README.read_text()
_START = _TEXT.index("\n## Backends")
SECTION = _TEXT[_START : _TEXT.index("\n## ", _START + 1)]
EXAMPLES = re.findall(r"```python\n(.*?)```", SECTION, re.S)
README_DSN = "postgresql://postgres@127.0.0.1/test"
README_REDIS = "redis://127.0.0.1:6379/0"


#: the examples in order (asyncpg_switch, psycopg_pool: the one-line switches to the drop-ins;
#: sqlalchemy: the one-line switch from SQLAlchemy's QueuePool)
NAMES = [
    "asyncpg", "asyncpg_switch", "psycopg", "psycopg_pool", "redis", "tcp", "http2", "sqlalchemy"
]


def test_there_is_an_example_per_backend() -> None:
    assert len(EXAMPLES) == len(NAMES)
    for name, example in zip(NAMES, EXAMPLES, strict=True):
        if name == "psycopg_pool":
            assert "from poolkit.backends.psycopg import ConnectionPool" in example
            continue
        if name == "sqlalchemy":
            assert "poolclass=QueuePool" in example
            continue
        if name == "asyncpg_switch":  # (the one line: asyncpg's name, poolkit's module)
            assert "# import asyncpg\nfrom poolkit.backends import asyncpg\n" in example
            continue
        assert f"import {name}" in example or "import redis as pk_redis" in example


@pytest.mark.parametrize("example", EXAMPLES, ids=NAMES)
def test_example_runs(pg: PgServer, redis_server: RedisServer, example: str) -> None:
    code = example.replace(README_DSN, pg.dsn).replace(README_REDIS, redis_server.url)
    code = code.replace(  # (SQLAlchemy's URL names the driver)
        README_DSN.replace("postgresql:", "postgresql+psycopg:"),
        pg.dsn.replace("postgresql:", "postgresql+psycopg:"),
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "an example prints what it got"
