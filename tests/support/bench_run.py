"""Running ``poolkit bench`` as a user does, in a subprocess, for the tests of tests/bench; and
the services those tests use (skipped, saying why, when missing; failed under
``POOLKIT_REQUIRE_SERVICES=1``)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit

import pytest

PG_DSN = os.environ.get("POOLKIT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("POOLKIT_REDIS_URL", "redis://127.0.0.1:6379/0")


def skip_or_fail(reason: str) -> None:
    if os.environ.get("POOLKIT_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (POOLKIT_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def need_port(url: str, default_port: int, what: str) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        skip_or_fail(f"{what} at {host}:{port} is not reachable: {exc}")


@dataclasses.dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.stdout)
        return document

    def result(self) -> dict[str, Any]:
        first: dict[str, Any] = self.json()["results"][0]
        return first


def bench(*args: str, timeout: float = 120.0) -> Ran:
    """``python -m poolkit bench ARGS``; its exit code, stdout and stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "poolkit", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "120"},
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(ran: Ran, code: int, *words: str) -> None:
    """Exit ``code``; stderr is one line, ``poolkit bench: error: ...`` naming ``words``."""
    assert ran.code == code, (ran.code, ran.stderr)
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("poolkit bench: error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert ran.stdout == ""
