"""Every Python example of README.md runs as pasted: each ``python`` code block, unchanged, in a
fresh interpreter, against the servers the README names (Redis at 127.0.0.1:6379, PostgreSQL at
``postgresql://postgres@127.0.0.1/test``). When those are not there the examples that need them
skip saying so (fail under POOLKIT_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import functools
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from services import skip_or_fail

README = Path(__file__).parents[2] / "README.md"
_TEXT = README.read_text()
#: (the line a block starts on, its code)
EXAMPLES = [
    (_TEXT[: m.start()].count("\n") + 1, m.group(1))
    for m in re.finditer(r"^```python\n(.*?)^```", _TEXT, re.S | re.M)
]
README_DSN = "postgresql://postgres@127.0.0.1/test"
REDIS = ("127.0.0.1", 6379)


@functools.cache
def _redis_missing() -> str | None:
    try:
        with socket.create_connection(REDIS, timeout=2) as sock:
            sock.sendall(b"PING\r\n")
            if not sock.recv(64).startswith(b"+PONG"):
                return "the server at 127.0.0.1:6379 does not answer PING as Redis does"
    except OSError as exc:
        return f"no Redis at 127.0.0.1:6379, where the README's examples connect ({exc})"
    return None


@functools.cache
def _postgresql_missing() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install -e '.[test]'"
    try:
        with psycopg.connect(README_DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at {README_DSN}, where the README's examples connect ({exc})"
    return None


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 8
    assert all(code.strip() for _, code in EXAMPLES)


@pytest.mark.parametrize(("line", "code"), EXAMPLES, ids=[f"line{line}" for line, _ in EXAMPLES])
def test_example_runs_as_pasted(line: int, code: str) -> None:
    if "6379" in code and (missing := _redis_missing()) is not None:
        skip_or_fail(missing)
    if README_DSN in code and (missing := _postgresql_missing()) is not None:
        skip_or_fail(missing)
    ran = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=README.parent,
    )
    assert ran.returncode == 0, f"README.md line {line}:\n{ran.stderr}"
    assert "Traceback" not in ran.stderr, ran.stderr
