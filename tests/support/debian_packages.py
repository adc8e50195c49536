"""A program the tests need from a Debian package (pgbouncer, haproxy): found, or the reason it
is missing (for a one-line skip, or a failure under POOLKIT_REQUIRE_SERVICES=1).

The tests never install anything: a test command must not change the machine it runs on.
``.ci/run`` installs what CI needs (``apt-get install pgbouncer haproxy``); elsewhere the
reason says which package to install.
"""

from __future__ import annotations

from collections.abc import Callable


def program_or_reason(package: str, find: Callable[[], str | None]) -> tuple[str | None, str]:
    """(the program ``find`` finds, ""), or (None, why it is missing and how to install it)."""
    found = find()
    if found is not None:
        return found, ""
    return None, (
        f"{package} is not installed (the tests install nothing): apt-get install {package}, "
        "or run .ci/run, which installs it"
    )
