"""The connection-string options :func:`poolkit.mongodb.parse_uri` knows, and how one value is read.

The table is the URI Options spec's (with ``timeoutMS`` from the CSOT spec): each option's
canonical name (the spec's spelling: ``appname``, ``maxPoolSize``, ``tlsCAFile``...), its kind
and its accepted range. :class:`URIOptions` is the mapping a parsed URI carries.

Rules of this module
--------------------
* Standard library only, no I/O and no warnings issued here: :func:`collect` reads ``key=value``
  pairs into canonical names and typed values and *returns* a message for every value it
  ignores; :mod:`.uri` issues them as :class:`URIOptionWarning` at its caller's line.
* Option names are case-insensitive (the Connection String spec); :class:`URIOptions` keys are
  the canonical names, and it looks keys up in any case.
* An invalid value is ignored with a message (the Connection String spec's rule); the only
  errors raised here are the URI Options spec's (conflicting TLS options, ``tls`` and ``ssl``
  that disagree) and an unsupported ``authMechanism`` (the Auth spec's).
* A secret option's value (:data:`SECRET_OPTIONS`) never appears in a message or a repr.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

__all__ = [
    "OPTIONS",
    "SECRET_OPTIONS",
    "InvalidURIError",
    "OptionSpec",
    "URIOptionWarning",
    "URIOptions",
    "collect",
]


class InvalidURIError(ValueError):
    """A connection string that cannot be used. The message names the part or the option at
    fault; it never holds a password (nor any secret option's value) and never quotes the URI."""


class URIOptionWarning(UserWarning):
    """An option that was ignored: unknown, repeated (the last value is used) or holding an
    invalid value, as the Connection String spec says to warn and go on."""


INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
#: the value of an option to leave unset (the spec: an empty integer or boolean is ignored)
IGNORED: Final = object()


@dataclasses.dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option: ``kind`` is ``bool``, ``int``, ``str``, ``enum``, ``list`` (comma-separated
    names out of ``choices``), ``pairs`` (``k:v,k:v``), ``tags`` (repeatable ``pairs``) or ``w``
    (an integer >= 0 or a string)."""

    name: str
    kind: str
    low: int = 0
    high: int = INT32_MAX
    choices: tuple[str, ...] = ()
    secret: bool = False
    #: an invalid value raises instead of being ignored
    fatal: bool = False


AUTH_MECHANISMS: Final = (
    "SCRAM-SHA-1",
    "SCRAM-SHA-256",
    "PLAIN",
    "GSSAPI",
    "MONGODB-X509",
    "MONGODB-AWS",
    "MONGODB-OIDC",
)
_BOOLS = (
    "directConnection",
    "journal",
    "loadBalanced",
    "retryReads",
    "retryWrites",
    "serverSelectionTryOnce",
    "tls",
    "tlsAllowInvalidCertificates",
    "tlsAllowInvalidHostnames",
    "tlsDisableCertificateRevocationCheck",
    "tlsDisableOCSPEndpointCheck",
    "tlsInsecure",
)
#: the integer options: (least, greatest)
_INTS: dict[str, tuple[int, int]] = {
    "connectTimeoutMS": (0, INT32_MAX),
    "heartbeatFrequencyMS": (500, INT32_MAX),
    "localThresholdMS": (0, INT32_MAX),
    "maxConnecting": (1, INT32_MAX),
    "maxIdleTimeMS": (0, INT32_MAX),
    "maxPoolSize": (0, INT32_MAX),
    "maxStalenessSeconds": (-1, INT32_MAX),
    "minPoolSize": (0, INT32_MAX),
    "proxyPort": (0, 65535),
    "serverSelectionTimeoutMS": (1, INT32_MAX),
    "socketTimeoutMS": (0, INT32_MAX),
    "srvMaxHosts": (0, INT32_MAX),
    "timeoutMS": (0, INT32_MAX),
    "waitQueueTimeoutMS": (0, INT32_MAX),
    "wTimeoutMS": (0, INT64_MAX),
    "zlibCompressionLevel": (-1, 9),
}
_STRINGS = (
    "appname",
    "authSource",
    "proxyHost",
    "proxyUsername",
    "readConcernLevel",
    "replicaSet",
    "srvServiceName",
    "tlsCAFile",
    "tlsCertificateKeyFile",
)
#: options whose values are secrets: never shown in a message, masked in a repr
SECRET_OPTIONS: Final = frozenset(
    {"proxyPassword", "tlsCertificateKeyFilePassword", "authMechanismProperties"}
)


def _table() -> dict[str, OptionSpec]:
    specs = [OptionSpec(name, "bool") for name in _BOOLS]
    specs += [OptionSpec(name, "int", low, high) for name, (low, high) in _INTS.items()]
    specs += [OptionSpec(name, "str") for name in _STRINGS]
    specs += [
        OptionSpec("proxyPassword", "str", secret=True),
        OptionSpec("tlsCertificateKeyFilePassword", "str", secret=True),
        OptionSpec("authMechanism", "enum", choices=AUTH_MECHANISMS, fatal=True),
        OptionSpec("authMechanismProperties", "pairs", secret=True),
        OptionSpec("compressors", "list", choices=("snappy", "zlib", "zstd")),
        OptionSpec(
            "readPreference",
            "enum",
            choices=("primary", "primaryPreferred", "secondary", "secondaryPreferred", "nearest"),
        ),
        OptionSpec("readPreferenceTags", "tags"),
        OptionSpec("serverMonitoringMode", "enum", choices=("stream", "poll", "auto")),
        OptionSpec("w", "w"),
    ]
    table = {spec.name.lower(): spec for spec in specs}
    table["ssl"] = table["tls"]  # the URI Options spec's alias: read as tls
    return table


#: every option known, by lower-cased name (``ssl`` is ``tls``)
OPTIONS: Final[Mapping[str, OptionSpec]] = _table()

#: pairs that must not both appear (the URI Options spec's "Conflicting TLS options")
_TLS_CONFLICTS = (
    ("tlsInsecure", "tlsAllowInvalidCertificates"),
    ("tlsInsecure", "tlsAllowInvalidHostnames"),
    ("tlsInsecure", "tlsDisableOCSPEndpointCheck"),
    ("tlsInsecure", "tlsDisableCertificateRevocationCheck"),
    ("tlsAllowInvalidCertificates", "tlsDisableOCSPEndpointCheck"),
    ("tlsAllowInvalidCertificates", "tlsDisableCertificateRevocationCheck"),
    ("tlsDisableOCSPEndpointCheck", "tlsDisableCertificateRevocationCheck"),
)
_INTEGER = re.compile(r"-?[0-9]+")
#: RFC 6335 section 5.1, with the Seedlist Discovery spec's longer limit
_SERVICE_NAME = re.compile(r"(?=[0-9-]*[A-Za-z])(?!-)(?!.*--)[A-Za-z0-9-]{1,62}(?<!-)")
_APPNAME_BYTES = 128


def _show(spec: OptionSpec, text: str) -> str:
    if spec.secret:
        return "its value (not shown)"
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _pairs(text: str) -> dict[str, str] | None:
    """``"k:v,k2:v2"`` -> ``{"k": "v", "k2": "v2"}`` (a value may hold ':'); None if malformed."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, colon, value = item.partition(":")
        if not colon or not key:
            return None
        out[key] = value
    return out


def parse_value(spec: OptionSpec, text: str) -> tuple[Any, str | None]:
    """``(value, message)``: the typed value (:data:`IGNORED` for none) and, if some or all of
    ``text`` was ignored, why."""
    name, kind = spec.name, spec.kind
    if text == "" and kind not in ("str", "tags"):
        return IGNORED, None  # the Connection String spec: an empty value leaves the key unset
    if kind == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true", None
        return IGNORED, f"URI option {name}: {_show(spec, text)} is not 'true' or 'false'"
    if kind in ("int", "w"):
        if _INTEGER.fullmatch(text):
            number = int(text)
            if spec.low <= number <= spec.high:
                return number, None
            high = {INT32_MAX: "2**31 - 1", INT64_MAX: "2**63 - 1"}.get(spec.high, spec.high)
            return IGNORED, (
                f"URI option {name}: {number} is not an integer from {spec.low} to {high}"
            )
        if kind == "w":
            return text, None  # "majority" or a tag set's name
        return IGNORED, f"URI option {name}: {_show(spec, text)} is not an integer"
    if kind == "enum":
        for choice in spec.choices:
            if text.lower() == choice.lower():
                return choice, None
        return IGNORED, f"URI option {name}: {_show(spec, text)} is not one of {spec.choices}"
    if kind == "list":
        names = [item.strip().lower() for item in text.split(",")]
        known = tuple(item for item in names if item in spec.choices)
        unknown = [item for item in names if item not in spec.choices]
        note = f"URI option {name}: unsupported {unknown} left out" if unknown else None
        return known, note
    if kind in ("pairs", "tags"):
        pairs = {} if text == "" else _pairs(text)
        if pairs is None:
            return IGNORED, f"URI option {name}: {_show(spec, text)} is not key:value pairs"
        return pairs, None
    if name == "appname" and len(text.encode()) > _APPNAME_BYTES:
        return IGNORED, f"URI option appname: longer than {_APPNAME_BYTES} bytes"
    if name == "srvServiceName" and not _SERVICE_NAME.fullmatch(text):
        return IGNORED, f"URI option srvServiceName: {_show(spec, text)} is not a service name"
    return text, None


def collect(pairs: Iterable[tuple[str, str]], notes: list[str]) -> dict[str, Any]:
    """The options of decoded ``(key, value)`` pairs, by canonical name; a message appended to
    ``notes`` for each unknown key, repeated key and ignored value. ``readPreferenceTags``
    accumulate (a tuple of tag sets, in order); otherwise the last valid value wins."""
    values: dict[str, Any] = {}
    seen: set[str] = set()
    tls_given: set[bool] = set()
    for key, text in pairs:
        spec = OPTIONS.get(key.lower())
        if spec is None:
            notes.append(f"unsupported URI option {key[:60]!r} ignored")
            continue
        name = spec.name
        if name in seen and name not in ("readPreferenceTags", "tls"):
            notes.append(f"URI option {name} given more than once; the last valid value is used")
        seen.add(name)
        value, note = parse_value(spec, text)
        if note is not None:
            if spec.fatal:
                raise InvalidURIError(f"{note} (supported: {', '.join(spec.choices)})")
            notes.append(note + ("; ignored" if value is IGNORED else ""))
        if value is IGNORED:
            continue
        if name == "tls":
            tls_given.add(value)
        if name == "readPreferenceTags":
            values[name] = (*values.get(name, ()), value)
        else:
            values[name] = value
    if len(tls_given) > 1:
        raise InvalidURIError("URI options tls and ssl must not disagree (one true, one false)")
    for first, second in _TLS_CONFLICTS:
        if first in seen and second in seen:
            raise InvalidURIError(f"URI options {first} and {second} must not both be given")
    return values


class URIOptions(Mapping[str, Any]):
    """A parsed URI's options, read-only: canonical names (as the URI Options spec spells them)
    to typed values (milliseconds stay integers, as written). Keys are looked up in any case:
    ``options["maxpoolsize"] == options["maxPoolSize"]``. The repr masks secret values."""

    __slots__ = ("_keys", "_values")

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(values or {})
        self._keys = {name.lower(): name for name in self._values}

    def __getitem__(self, key: str) -> Any:
        name = self._keys.get(key.lower()) if isinstance(key, str) else None
        if name is None:
            raise KeyError(key)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {
            name: "***" if name in SECRET_OPTIONS else value for name, value in self._values.items()
        }
        return f"URIOptions({shown!r})"
