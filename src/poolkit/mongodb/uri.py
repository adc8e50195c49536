"""MongoDB connection strings: ``parse_uri("mongodb://...") -> MongoURI``.

:func:`parse_uri` reads a ``mongodb://`` or ``mongodb+srv://`` connection string as the
Connection String, URI Options, Initial DNS Seedlist Discovery and Load Balancer specs say: the
hosts, the credentials, the options (:mod:`.uri_options`), the :class:`~poolkit.PoolOptions`
they make, and what a connection's handshake needs.

Rules of this module
--------------------
* Standard library only: no pymongo, so that a URI is parsed without the ``poolkit[mongodb]``
  extra. No DNS either: a ``mongodb+srv://`` URI is checked as far as it can be without a
  lookup (one host, no port, no ``directConnection=true``, the ``srvMaxHosts`` rules) and has
  no ``hosts`` until :meth:`MongoURI.seeded` is given the SRV and TXT answers, which applies the
  rest (the records' domain, the TXT options, ``srvMaxHosts``, ``loadBalanced``'s one host).
* A URI that cannot be used raises :class:`InvalidURIError` naming the part or option at fault.
  An unknown option, a repeated one or an invalid value is ignored with a
  :class:`URIOptionWarning` (the Connection String spec's rule), issued by the public function
  so that it points at the caller's line; a URI that raises issues none.
* A password never leaves :attr:`MongoURI.password`: messages name parts and never quote the
  URI, a port or a user-information part; reprs show ``***``; secret options (proxyPassword,
  tlsCertificateKeyFilePassword, authMechanismProperties) are masked the same way.
* Names are decoded with :func:`urllib.parse.unquote` (``+`` stays ``+``: RFC 3986 percent
  encoding, not form encoding). Host names are lower-cased; socket paths are kept as written.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import random
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote

from ..options import PoolOptions
from .uri_options import InvalidURIError, URIOptions, URIOptionWarning, collect

__all__ = [
    "DEFAULT_PORT",
    "Address",
    "InvalidURIError",
    "MongoURI",
    "URIOptionWarning",
    "URIOptions",
    "parse_uri",
]

DEFAULT_PORT: Final = 27017
#: ``(host, port)``: a host name (lower-cased) or an IPv6 address (no brackets) with its port,
#: or a Unix socket path (ending in ``.sock``) with ``None``
Address = tuple[str, int | None]

_SCHEMES: Final = (("mongodb://", "mongodb"), ("mongodb+srv://", "mongodb+srv"))
#: the defaults of the handshake fields (URI Options spec; Server Selection spec)
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
DEFAULT_SERVER_SELECTION_TIMEOUT: Final = 30.0
_EXTERNAL_MECHANISMS: Final = frozenset({"GSSAPI", "MONGODB-X509", "MONGODB-AWS", "MONGODB-OIDC"})
#: the options a TXT record may set (Initial DNS Seedlist Discovery spec)
_TXT_OPTIONS: Final = frozenset({"authsource", "replicaset", "loadbalanced"})
#: RFC 3986 userinfo: unreserved, pct-encoded, sub-delims and ':' (and any non-ASCII text)
_USERINFO = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:%\u0080-\U0010ffff]*")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_NAME = re.compile(r"[A-Za-z0-9\-._~!$&'()*+;=\u0080-\U0010ffff]+")
_DB_FORBIDDEN: Final = '/\\ "$'
_ESCAPE_HINT = (
    "percent-encode '@', ':', '/', '?' and '%' in a user name or password "
    "(urllib.parse.quote(..., safe=''))"
)


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class MongoURI:
    """A parsed connection string: immutable, its repr masks the password.

    * ``hosts``: the seed list, ``(host, port)`` pairs in URI order (port 27017 when not
      given; a Unix socket path has port ``None``). Empty for a ``mongodb+srv://`` URI until
      :meth:`seeded`; its name is ``srv_host``.
    * ``username``, ``password`` (``None`` when absent; ``""`` for ``user:@``), ``auth_source``
      (the database credentials are checked against: ``authSource``, else ``$external`` for an
      external mechanism, else the URI's database, else ``"admin"``; without credentials,
      ``authSource`` or ``None``), ``auth_mechanism`` (``None``: the server negotiates),
      ``database`` (the URI's path, decoded).
    * ``options``: what the URI says, valid values only, by canonical name (lookup in any case).
      The fields below are the settings in force (the defaults filled in); ``options`` is not.
    * ``pool_options``: maxPoolSize -> ``max_size``, minPoolSize -> ``min_size``,
      maxIdleTimeMS -> ``max_idle_time`` (seconds; 0: ``None``), waitQueueTimeoutMS ->
      ``wait_queue_timeout`` (seconds; 0: ``None``, no limit), maxConnecting ->
      ``max_connecting``, loadBalanced -> ``load_balanced``; everything else the defaults.
    * the handshake's: ``app_name``, ``tls`` (``tls``/``ssl``; else on for ``mongodb+srv://`` or
      when any other ``tls*`` option is given), ``connect_timeout`` (seconds, default 10;
      ``None`` for ``connectTimeoutMS=0``), ``server_selection_timeout`` (seconds, default 30),
      ``direct_connection``, ``replica_set``, ``load_balanced``.
    """

    scheme: str
    hosts: tuple[Address, ...]
    username: str | None = None
    password: str | None = None
    auth_source: str | None = None
    auth_mechanism: str | None = None
    database: str | None = None
    options: URIOptions = dataclasses.field(default_factory=URIOptions, hash=False)
    pool_options: PoolOptions = dataclasses.field(default_factory=PoolOptions)
    load_balanced: bool = False
    app_name: str | None = None
    tls: bool = False
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT
    server_selection_timeout: float = DEFAULT_SERVER_SELECTION_TIMEOUT
    direct_connection: bool = False
    replica_set: str | None = None
    srv_host: str | None = None
    srv_service_name: str = "mongodb"
    srv_max_hosts: int = 0

    def __repr__(self) -> str:
        fields = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            shown = "'***'" if field.name == "password" and value is not None else repr(value)
            fields.append(f"{field.name}={shown}")
        return f"MongoURI({', '.join(fields)})"

    @property
    def addresses(self) -> tuple[str, ...]:
        """``hosts`` as ``"host:port"`` strings (``"[::1]:27017"``; a socket path as it is)."""
        out = []
        for host, port in self.hosts:
            if port is None:
                out.append(host)
            else:
                out.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        return tuple(out)

    @property
    def srv_name(self) -> str | None:
        """The DNS name to ask for SRV records (``_mongodb._tcp.<srv_host>``); ``None`` for a
        ``mongodb://`` URI. The TXT record is asked of ``srv_host`` itself."""
        if self.srv_host is None:
            return None
        return f"_{self.srv_service_name}._tcp.{self.srv_host}"

    def seeded(self, records: Iterable[tuple[str, int]], txt: str = "") -> MongoURI:
        """This ``mongodb+srv://`` URI with the answers of its DNS lookups: ``records`` the SRV
        records' ``(target, port)``, ``txt`` the TXT record's text (``""`` if none).

        Raises :class:`InvalidURIError` if a target is outside ``srv_host``'s domain, a port is
        not one, there is no record, the TXT record sets an option other than authSource,
        replicaSet or loadBalanced, or the result breaks a rule (``loadBalanced=true`` with
        more than one host, or with a replicaSet from the TXT record...). The URI's own
        options override the TXT record's; ``srvMaxHosts`` keeps that many hosts at random.
        """
        if self.srv_host is None:
            raise InvalidURIError("seeded() is for mongodb+srv:// URIs only")
        labels = self.srv_host.split(".")
        domain = self.srv_host if len(labels) < 3 else ".".join(labels[1:])
        seeds: list[Address] = []
        for target, port in records:
            name = target.rstrip(".").lower()
            if not name.endswith("." + domain):
                raise InvalidURIError(
                    f"SRV record target {name!r} is not within the domain {domain!r} of "
                    f"{self.srv_host!r}"
                )
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise InvalidURIError(f"SRV record target {name!r} has no valid port")
            seeds.append((name, port))
        if not seeds:
            raise InvalidURIError(f"the SRV lookup of {self.srv_name!r} returned no hosts")
        notes: list[str] = []
        txt_pairs = _split_query(txt) if txt else []
        for key, _ in txt_pairs:
            if key.lower() not in _TXT_OPTIONS:
                raise InvalidURIError(
                    f"TXT record option {key[:60]!r} is not allowed (only authSource, "
                    "replicaSet and loadBalanced)"
                )
        values = {**collect(txt_pairs, notes), **self.options}
        max_hosts = values.get("srvMaxHosts", 0)
        if 0 < max_hosts < len(seeds):
            seeds = random.sample(seeds, max_hosts)
        result = _assemble(
            self.scheme,
            tuple(seeds),
            self.srv_host,
            self.username,
            self.password,
            self.database,
            values,
        )
        for note in notes:
            warnings.warn(note, URIOptionWarning, stacklevel=2)
        return result


def parse_uri(uri: str) -> MongoURI:
    """Parse a ``mongodb://`` or ``mongodb+srv://`` connection string (see the module's rules).

    Raises :class:`InvalidURIError` (a ``ValueError``) for a URI that cannot be used, and
    warns :class:`URIOptionWarning` for each option ignored.
    """
    notes: list[str] = []
    result = _parse(uri, notes)
    for note in notes:
        warnings.warn(note, URIOptionWarning, stacklevel=2)
    return result


def _parse(uri: str, notes: list[str]) -> MongoURI:
    if not isinstance(uri, str):
        raise TypeError(f"a MongoDB URI is a str, not {type(uri).__name__}")
    scheme = next((name for prefix, name in _SCHEMES if uri.startswith(prefix)), None)
    if scheme is None:
        raise InvalidURIError("a MongoDB URI must begin with 'mongodb://' or 'mongodb+srv://'")
    rest = uri[len(scheme) + len("://") :]
    # The host information ends at the first '/' or '?'; the user information, if any, ends
    # at the last '@' within it.
    ends = [i for i in (rest.find("/"), rest.find("?")) if i >= 0]
    cut = min(ends, default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if tail.startswith("/"):
        path, _, query = tail[1:].partition("?")
    else:
        path, query = "", tail[1:]
    if "@" in path:
        # an unescaped '/' in a password: "user:pa/ss@host" would make "ss@host" the database
        raise InvalidURIError(f"an '@' after the host list; {_ESCAPE_HINT}")
    username = password = None
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
        username, password = _userinfo(userinfo)
    pairs = _split_query(query)
    srv = scheme == "mongodb+srv"
    srv_host = None
    if srv:
        srv_host = _srv_host(authority)
        hosts: tuple[Address, ...] = ()
    else:
        hosts = _hosts(authority, path)
    database = _database(path)
    return _assemble(scheme, hosts, srv_host, username, password, database, collect(pairs, notes))


def _userinfo(text: str) -> tuple[str, str | None]:
    """``(username, password)`` of the user information; nothing of it is quoted in errors."""
    if text.count(":") > 1:
        raise InvalidURIError(f"the user information holds more than one ':'; {_ESCAPE_HINT}")
    if "@" in text:
        raise InvalidURIError(f"the user information holds an '@'; {_ESCAPE_HINT}")
    if _BAD_PERCENT.search(text) or not _USERINFO.fullmatch(text):
        raise InvalidURIError(
            "the user information holds a '%' that is not percent-encoding or a character "
            f"RFC 3986 does not allow there; {_ESCAPE_HINT}"
        )
    user, colon, secret = text.partition(":")
    try:
        username = unquote(user, errors="strict")
        password = unquote(secret, errors="strict") if colon else None
    except UnicodeDecodeError:
        raise InvalidURIError("the user information is not UTF-8 once decoded") from None
    if not username:
        raise InvalidURIError("the user name is empty (a password needs a user name)")
    return username, password


def _split_query(query: str) -> list[tuple[str, str]]:
    """The decoded ``(key, value)`` pairs of the options part, in order. An '@' in a name is
    a password's: "user:pa?ss@host" would make "ss@host" an option."""
    if not query:
        return []
    if "&" in query and ";" in query:
        raise InvalidURIError("URI options are separated by '&' or ';', not both")
    pairs = []
    for item in query.split(";" if ";" in query else "&"):
        if not item:
            continue
        key, _, value = item.partition("=")
        if "@" in key:
            raise InvalidURIError(f"an '@' in an option name; {_ESCAPE_HINT}")
        pairs.append((unquote(key), unquote(value)))
    return pairs


def _hosts(text: str, path: str) -> tuple[Address, ...]:
    if not text:
        if ".sock" in path:
            raise InvalidURIError(
                "a Unix domain socket path must be percent-encoded ('/' as %2F), as in "
                "mongodb://%2Ftmp%2Fmongodb-27017.sock"
            )
        raise InvalidURIError("the URI names no host")
    return tuple(_host(entry, n) for n, entry in enumerate(text.split(","), 1))


def _host(entry: str, n: int) -> Address:
    where = f"host #{n}"
    if not entry:
        raise InvalidURIError(f"{where} is empty (an extra ',' in the host list?)")
    port_text: str | None = None
    if entry.startswith("["):
        end = entry.find("]")
        rest = entry[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            raise InvalidURIError(f"{where}: an IPv6 literal is '[address]' or '[address]:port'")
        literal = unquote(entry[1:end])  # a zone index is written %25
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            raise InvalidURIError(f"{where}: {literal[:60]!r} is not an IPv6 address") from None
        host = literal.lower()
        port_text = rest[1:] if rest else None
    elif "%" in entry or entry.endswith(".sock"):
        path = unquote(entry)
        if not path.endswith(".sock"):
            raise InvalidURIError(
                f"{where}: percent-encoding is only for Unix domain socket paths (ending in "
                "'.sock') and IPv6 zone indexes"
            )
        return path, None
    else:
        host, colon, port_text_or_none = entry.partition(":")
        if ":" in port_text_or_none:
            raise InvalidURIError(
                f"{where}: more than one ':' (an IPv6 address needs brackets, '[::1]:27017'); "
                f"{_ESCAPE_HINT}"
            )
        if not host:
            raise InvalidURIError(f"{where} has a port but no host name")
        if not _HOST_NAME.fullmatch(host):
            raise InvalidURIError(f"{where}: {host[:60]!r} is not a host name")
        host = host.lower()
        port_text = port_text_or_none if colon else None
    return host, _port(port_text, host)


def _port(text: str | None, host: str) -> int:
    if text is None:
        return DEFAULT_PORT
    if text.isascii() and text.isdigit() and 0 < int(text) < 65536:
        return int(text)
    # the text is not quoted: in "user:pass/word@host" it would be the password
    raise InvalidURIError(
        f"the port of host {host[:60]!r} is not an integer in 1..65535; {_ESCAPE_HINT}"
    )


def _srv_host(text: str) -> str:
    if "," in text:
        raise InvalidURIError("a mongodb+srv:// URI names exactly one host")
    if not text:
        raise InvalidURIError("the mongodb+srv:// URI names no host")
    if text.startswith("[") or "%" in text or text.endswith(".sock"):
        raise InvalidURIError("the host of a mongodb+srv:// URI is a DNS name")
    host, colon, _ = text.partition(":")
    if colon:
        raise InvalidURIError("the host of a mongodb+srv:// URI takes no port")
    labels = host.lower().rstrip(".").split(".")
    if not all(labels) or not _HOST_NAME.fullmatch(host):
        raise InvalidURIError(f"the mongodb+srv:// host {host[:60]!r} is not a DNS name")
    return ".".join(labels)


def _database(path: str) -> str | None:
    if not path:
        return None
    try:
        name = unquote(path, errors="strict")
    except UnicodeDecodeError:
        raise InvalidURIError("the database name is not UTF-8 once decoded") from None
    bad = sorted({c for c in name if c in _DB_FORBIDDEN})
    if bad:
        raise InvalidURIError(f"the database name {name[:60]!r} holds {bad} (not allowed)")
    return name


def _assemble(
    scheme: str,
    hosts: tuple[Address, ...],
    srv_host: str | None,
    username: str | None,
    password: str | None,
    database: str | None,
    values: Mapping[str, Any],
) -> MongoURI:
    """The URI from its parts, after the rules between them."""
    get = values.get
    srv = srv_host is not None
    if not srv:
        for name in ("srvServiceName", "srvMaxHosts"):
            if name in values:
                raise InvalidURIError(f"URI option {name} is only for mongodb+srv:// URIs")
    direct = bool(get("directConnection", False))
    if direct and srv:
        raise InvalidURIError("directConnection=true is not allowed with mongodb+srv:// URIs")
    if direct and len(hosts) > 1:
        raise InvalidURIError("directConnection=true is not allowed with more than one host")
    max_hosts = int(get("srvMaxHosts", 0))
    load_balanced = bool(get("loadBalanced", False))
    if load_balanced:
        if len(hosts) > 1:
            raise InvalidURIError("loadBalanced=true is not allowed with more than one host")
        if "replicaSet" in values:
            raise InvalidURIError("loadBalanced=true is not allowed with replicaSet")
        if direct:
            raise InvalidURIError("loadBalanced=true is not allowed with directConnection=true")
        if max_hosts > 0:
            raise InvalidURIError("loadBalanced=true is not allowed with srvMaxHosts > 0")
    if max_hosts > 0 and "replicaSet" in values:
        raise InvalidURIError("srvMaxHosts > 0 is not allowed with replicaSet")
    _check_proxy(values)
    mechanism, source = _credentials(username, password, database, values)
    tls = get("tls")
    if tls is None:
        tls = srv or any(name.startswith("tls") for name in values)
    connect_ms = get("connectTimeoutMS")
    selection_ms = get("serverSelectionTimeoutMS")
    return MongoURI(
        scheme=scheme,
        hosts=hosts,
        username=username,
        password=password,
        auth_source=source,
        auth_mechanism=mechanism,
        database=database,
        options=URIOptions(values),
        pool_options=_pool_options(values, load_balanced),
        load_balanced=load_balanced,
        app_name=get("appname"),
        tls=bool(tls),
        connect_timeout=(
            DEFAULT_CONNECT_TIMEOUT if connect_ms is None else (connect_ms / 1000 or None)
        ),
        server_selection_timeout=(
            DEFAULT_SERVER_SELECTION_TIMEOUT if selection_ms is None else selection_ms / 1000
        ),
        direct_connection=direct,
        replica_set=get("replicaSet"),
        srv_host=srv_host,
        srv_service_name=get("srvServiceName", "mongodb"),
        srv_max_hosts=max_hosts,
    )


def _check_proxy(values: Mapping[str, Any]) -> None:
    """The SOCKS5 spec's rules."""
    if "proxyHost" not in values:
        for name in ("proxyPort", "proxyUsername", "proxyPassword"):
            if name in values:
                raise InvalidURIError(f"URI option {name} needs proxyHost")
    if ("proxyUsername" in values) != ("proxyPassword" in values):
        raise InvalidURIError("URI options proxyUsername and proxyPassword go together")


def _credentials(
    username: str | None, password: str | None, database: str | None, values: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """``(auth_mechanism, auth_source)`` after the Auth spec's rules for the URI's credentials."""
    mechanism: str | None = values.get("authMechanism")
    source: str | None = values.get("authSource")
    if source == "":
        raise InvalidURIError("URI option authSource must not be empty")
    if username is None and mechanism is None:
        return None, source  # no credentials (the application may add them)
    if mechanism in ("SCRAM-SHA-1", "SCRAM-SHA-256", "PLAIN", "GSSAPI") and username is None:
        raise InvalidURIError(f"authMechanism={mechanism} needs a user name")
    if mechanism in ("SCRAM-SHA-1", "SCRAM-SHA-256", "PLAIN") and password is None:
        raise InvalidURIError(f"authMechanism={mechanism} needs a password")
    if mechanism in ("MONGODB-X509", "MONGODB-OIDC") and password is not None:
        raise InvalidURIError(f"authMechanism={mechanism} takes no password")
    if mechanism == "MONGODB-AWS" and (username is None) != (password is None):
        raise InvalidURIError("authMechanism=MONGODB-AWS takes a user name and password or none")
    if mechanism in _EXTERNAL_MECHANISMS:
        if source not in (None, "$external"):
            raise InvalidURIError(f"authMechanism={mechanism} needs authSource=$external")
        return mechanism, "$external"
    if source is None:
        own = database.partition(".")[0] if database else None  # "db.collection" names db
        source = own or ("$external" if mechanism == "PLAIN" else "admin")
    return mechanism, source


def _pool_options(values: Mapping[str, Any], load_balanced: bool) -> PoolOptions:
    get = values.get
    max_size, min_size = get("maxPoolSize", 100), get("minPoolSize", 0)
    if max_size and min_size > max_size:
        raise InvalidURIError(
            f"URI option minPoolSize ({min_size}) must be <= maxPoolSize ({max_size}) when "
            "maxPoolSize is not 0"
        )
    kwargs: dict[str, Any] = {"max_size": max_size, "min_size": min_size}
    if "maxConnecting" in values:
        kwargs["max_connecting"] = values["maxConnecting"]
    for option, field in (
        ("maxIdleTimeMS", "max_idle_time"),
        ("waitQueueTimeoutMS", "wait_queue_timeout"),
    ):
        if option in values:
            kwargs[field] = values[option] / 1000 or None  # 0: no limit
    return PoolOptions(**kwargs, load_balanced=load_balanced)
