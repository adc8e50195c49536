"""What a connection's handshake sends: the ``hello`` command and its client metadata (the
MongoDB Handshake spec's fields); with credentials, ``saslSupportedMechs`` and the first step
of the authentication (``speculativeAuthenticate``, :class:`~.auth.Speculation`).

Rules of this module
--------------------
* What does not change while the process runs (the driver's version, the OS, the platform)
  is read once; each ``hello`` gets documents of its own.
"""

from __future__ import annotations

import functools
import platform
import sys
from collections.abc import Mapping
from typing import Any

from .auth import Credentials, Speculation, sasl_supported_mechs

__all__ = ["DRIVER_NAME", "client_metadata", "hello_command", "opening_hello"]

DRIVER_NAME = "poolkit"


@functools.cache
def _environment() -> tuple[str, tuple[tuple[str, str], ...], str]:
    """(the driver's version, the ``os`` document's fields, the ``platform`` string): the same
    for every connection of the process, so read once (a package metadata lookup)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        driver_version = version("poolkit")
    except PackageNotFoundError:
        driver_version = "0"
    system = platform.system()
    os_fields = (
        ("type", system or "unknown"),
        ("name", system),
        ("architecture", platform.machine()),
        ("version", platform.release()),
    )
    return driver_version, os_fields, f"{platform.python_implementation()} {sys.version.split()[0]}"


def client_metadata(app_name: str | None = None) -> dict[str, Any]:
    """The handshake's ``client`` document (the Handshake spec's fields)."""
    driver_version, os_fields, platform_name = _environment()
    metadata: dict[str, Any] = {
        "driver": {"name": DRIVER_NAME, "version": driver_version},
        "os": dict(os_fields),
        "platform": platform_name,
    }
    if app_name:
        metadata["application"] = {"name": app_name}
    return metadata


def hello_command(
    *,
    load_balanced: bool,
    app_name: str | None = None,
    sasl_supported_mechs: str | None = None,
    speculative_authenticate: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The first command of a connection (``loadBalanced: true`` in load-balanced mode;
    ``saslSupportedMechs: "<db>.<user>"`` to negotiate the user's mechanism;
    ``speculativeAuthenticate``: the first step of authentication, see
    :class:`~.auth.Speculation`)."""
    command: dict[str, Any] = {"hello": 1, "helloOk": True, "client": client_metadata(app_name)}
    if load_balanced:
        command["loadBalanced"] = True
    if sasl_supported_mechs is not None:
        command["saslSupportedMechs"] = sasl_supported_mechs
    if speculative_authenticate is not None:
        command["speculativeAuthenticate"] = dict(speculative_authenticate)
    return command


def opening_hello(
    credentials: Credentials | None, *, load_balanced: bool, app_name: str | None = None
) -> tuple[dict[str, Any], Speculation | None]:
    """A connection's ``hello`` and, given ``credentials``, the speculation it carries (kept to
    go on with the authentication); it asks for the user's mechanisms unless they are given."""
    speculation = Speculation.of(credentials)
    hello = hello_command(
        load_balanced=load_balanced,
        app_name=app_name,
        sasl_supported_mechs=sasl_supported_mechs(credentials),
        speculative_authenticate=speculation.command() if speculation is not None else None,
    )
    return hello, speculation
