"""What the backends' one-call builders share: setting the hooks, an address fit to show,
PostgreSQL's port and timeout arguments checked (the start, a first connection made, and the
pool starter are the seam's: :func:`poolkit.driver.start`, :func:`poolkit.driver.async_start`,
:class:`poolkit.driver.PoolStarter`); and the one set that holds the tasks the backends start
and nobody awaits, until they end (:func:`hold`)."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from .. import Hooks, PoolOptions
from ..driver import check_port, check_seconds, with_default_hooks

C = TypeVar("C")


def with_hooks(options: PoolOptions | None, chosen: Hooks, builder: str) -> PoolOptions:
    """``options`` (default ones if ``None``) with ``hooks=chosen``; refuses options whose
    ``hooks`` are set already (the builder's arguments set them)."""
    if isinstance(options, PoolOptions) and options.hooks is not None:
        raise ValueError(
            f"{builder}() sets options.hooks from its own arguments (reset=, check=, ...): "
            "leave options.hooks unset, or build the pool yourself from the backend's connect "
            "function and hooks()"
        )
    return with_default_hooks(options, chosen, builder)


def check_pg_args(
    call: str, kwargs: dict[str, Any], durations: tuple[str, ...], *, text: bool
) -> None:
    """A PostgreSQL driver's connect keywords checked for ``call`` where the driver would take
    them and fail at each connect (or connect elsewhere): ``port`` an int from 1 to 65535, its
    digits, or several (a comma-separated str, a list: one per host; empty: the default);
    ``durations`` seconds >= 0 or ``None`` (with ``text``, as libpq takes them, in a str too). A
    DSN's own values are the driver's to read."""
    if "port" in kwargs:
        port = kwargs["port"]
        parts = port if isinstance(port, list | tuple) else [port]
        if isinstance(port, str):
            parts = [part.strip() for part in port.split(",")]
        for part in parts:
            if part != "":
                check_port(part, f"{call}(port=...)", text=True)
    for name in durations:
        value = kwargs.get(name)
        if text and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass  # (refused below, as it was given)
        check_seconds(value, f"{call}({name}=...)")


def shown_address(params: dict[str, Any], default: str = "postgresql") -> str:
    """``host:port/dbname`` from connection parameters (never a password), as libpq reads them:
    ``host`` and ``port`` may list several (``"a,b"``, one port for all or one each, or lists, as
    asyncpg takes them); an IPv6 host is bracketed (``[::1]:5432``); a socket folder is shown as
    it is. Several hosts are shown comma-separated, the first one as the logs' server."""
    if not params:
        return default
    hosts = _listed(params.get("host")) or ["localhost"]
    ports = _listed(params.get("port"))
    if len(ports) == 1:
        ports *= len(hosts)
    shown = []
    for i, host in enumerate(hosts):
        if ":" in host and not host.startswith(("/", "[")):
            host = f"[{host}]"
        port = ports[i] if i < len(ports) and ports[i] else ""
        shown.append(f"{host}:{port}" if port and not host.startswith("/") else host)
    dbname = params.get("dbname") or params.get("database")
    return ",".join(shown) + (f"/{dbname}" if dbname else "")


def _listed(value: Any) -> list[str]:
    """A libpq host or port setting as a list of strings (``"a,b"``, a list, one value)."""
    if value is None or value == "":
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [part.strip() for part in str(value).split(",")]


def uri_params(dsn: str | None) -> dict[str, Any]:
    """host, port and dbname of a ``postgresql://`` URI (``{}`` if there is none), as libpq reads
    one: several ``host:port`` in its authority (``a:5432,b:5433``, IPv6 in brackets), and
    ``host``/``port``/``dbname`` in its query string winning over the authority's."""
    if not dsn or "://" not in dsn:
        return {}
    parts = urlsplit(dsn)
    hosts: list[str] = []
    ports: list[str] = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = item.partition(":")
        hosts.append(unquote(host))
        ports.append(port)
    query = parse_qs(parts.query)
    out: dict[str, Any] = {"dbname": unquote(parts.path.lstrip("/"))}
    out["host"] = query["host"][-1] if "host" in query else ",".join(hosts)
    out["port"] = query["port"][-1] if "port" in query else ",".join(ports) if any(ports) else ""
    if "dbname" in query:
        out["dbname"] = query["dbname"][-1]
    return out


#: the tasks the backends start and nobody awaits (the closes of pools terminated or collected
#: unclosed, the resets a cancellation moved out of their callers' tasks): the event loop keeps
#: only a weak reference to a task, which could be collected before it ends
_held: set[asyncio.Future[Any]] = set()


def hold(task: asyncio.Future[Any]) -> None:
    """Keep ``task`` referenced until it is done."""
    _held.add(task)
    task.add_done_callback(_held.discard)
