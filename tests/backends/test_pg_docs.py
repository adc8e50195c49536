"""The examples of ``docs/backends-postgres.md`` run, against the test server."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from pg_service import PgServer, need, pg

__all__ = ["pg"]

DOC = pathlib.Path(__file__).parents[2] / "docs" / "backends-postgres.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
DOC_DSN = "postgresql://postgres@127.0.0.1/test"


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_example_runs(pg: PgServer, example: str) -> None:
    need("asyncpg" if "backends import asyncpg" in example else "psycopg")
    assert DOC_DSN in example
    code = example.replace(DOC_DSN, pg.dsn)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "2" in out.stdout


def test_there_is_an_example_per_backend() -> None:
    # (asyncpg, psycopg threads and asyncio, psycopg's kept connection, the psycopg_pool drop-in)
    assert len(EXAMPLES) == 5
