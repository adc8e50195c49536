"""The tests install nothing: a program they need from a Debian package (PgBouncer, HAProxy)
that is missing is a one-line reason naming the package, even as root where apt-get is
(``.ci/run`` installs them for CI)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_program_is_a_reason_and_nothing_is_installed(tmp_path: Path) -> None:
    marker = tmp_path / "apt-get-ran"
    apt_get = tmp_path / "apt-get"  # (first in PATH: it only says that it ran)
    apt_get.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\n")
    apt_get.chmod(0o755)
    code = (
        "from debian_packages import program_or_reason\n"
        "print(program_or_reason('pgbouncer', lambda: None))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "tests" / "support",
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert not marker.exists(), marker.read_text()
    program, reason = ast.literal_eval(ran.stdout)
    assert program is None
    assert "pgbouncer is not installed" in reason and "apt-get install pgbouncer" in reason
    assert "\n" not in reason


def test_ci_installs_what_the_tests_need() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "need_package haproxy" in ci and "need_package pgbouncer" in ci
