"""A program the tests need from a Debian package (pgbouncer, haproxy): found, or installed
with apt-get when we are root, or the reason it cannot be had (for a skip, or a failure under
POOLKIT_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable

#: seconds apt-get may take in all (an update and two installs)
INSTALL_TIMEOUT = 300.0


def program_or_reason(package: str, find: Callable[[], str | None]) -> tuple[str | None, str]:
    """(the program ``find`` finds, installing ``package`` first if need be, ""), or
    (None, why it is missing)."""
    found = find()
    if found is not None:
        return found, ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, (
            f"{package} is not installed, and cannot be installed here (apt-get, as root): "
            f"apt-get install {package}"
        )
    failure = _apt_install(package)
    found = find()
    if found is not None:
        return found, ""
    return None, f"{package} is not installed, and apt-get install {package} failed: {failure}"


def _apt_install(package: str) -> str:
    """``apt-get install -y -q PACKAGE`` (and ``apt-get update`` first, should that fail: an
    image may have empty package lists), in :data:`INSTALL_TIMEOUT` seconds; what failed."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    deadline = time.monotonic() + INSTALL_TIMEOUT
    failure = ""
    for args in (["install", package], ["update"], ["install", package]):
        try:
            done = subprocess.run(
                ["apt-get", "-y", "-q", *args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
            )
        except subprocess.TimeoutExpired:
            return f"apt-get took more than {INSTALL_TIMEOUT:.0f} s"
        if done.returncode == 0 and args[0] == "install":
            return f"it ran, yet there is no {package} in PATH nor in /usr/sbin"
        if done.returncode != 0:
            failure = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return failure
