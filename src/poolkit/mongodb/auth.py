"""Authentication in the connection handshake: SCRAM-SHA-256 and SCRAM-SHA-1 (RFC 5802,
RFC 7677) as MongoDB runs them (``saslStart`` then ``saslContinue`` on the credentials'
database), with SASLprep (RFC 4013) for the password.

* :class:`ScramClient`: one SCRAM exchange, without I/O (``first()``, ``final(server_first)``,
  ``verify(server_final)``); :func:`saslprep`.
* :class:`Credentials`: who authenticates (``repr`` masks the password), and the mechanism
  negotiation (:func:`negotiate`: SCRAM-SHA-256 when the ``hello`` reply's
  ``saslSupportedMechs`` names it, else SCRAM-SHA-1, as the Auth spec says).
* :class:`Conversation`: the commands of one authentication and the checks of their replies,
  without I/O; :func:`~.connection_sync.authenticate` (blocking) and
  :func:`~.connection_async.async_authenticate` run it over a
  connection's unmonitored exchange (the handshake's).
* :class:`Speculation`: speculative authentication (the Handshake spec's): the ``saslStart``
  sent ahead in the ``hello`` as ``speculativeAuthenticate``; when the reply answers it, the
  conversation goes on from there with ``saslContinue`` (one round trip fewer), else it runs
  as without it.

Rules of this module
--------------------
* Standard library only (hashlib, hmac, base64, secrets, stringprep, unicodedata).
* A password never appears in a message, a repr or a log: errors say what failed, never with
  what; :data:`KEY_CACHE` (the PBKDF2 results, keyed by password, salt and iterations, as
  drivers keep them: 15000 iterations take milliseconds) shows only its size.
* The server's word is checked before it is trusted: its nonce must extend ours, its iteration
  count be at least 4096, its final signature match (a mismatch fails the authentication).
* A failure of the server's (``ok: 0``) or of these checks is :class:`~.errors.AuthenticationError`
  (no label: not retryable; SDAM's rules clear its service, :func:`~.errors.clear_scope`);
  network errors are the connection's to raise (:mod:`.connection`), as
  ``NetworkError(after_hello=True)`` with the service.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import hashlib
import hmac
import secrets
import stringprep
import threading
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from .errors import AuthenticationError, OperationFailure, ServiceId

__all__ = [
    "KEY_CACHE",
    "MECHANISMS",
    "Conversation",
    "Credentials",
    "KeyCache",
    "ScramClient",
    "ScramError",
    "Speculation",
    "negotiate",
    "sasl_supported_mechs",
    "saslprep",
]

MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-1")
#: the least iteration count accepted from a server (RFC 7677; drivers hold SHA-1 to it too)
MIN_ITERATIONS: Final = 4096
_DIGESTS: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-1": "sha1"}
_GS2_HEADER: Final = b"n,,"
_CHANNEL_BINDING: Final = base64.b64encode(_GS2_HEADER)  # b"biws"


class ScramError(ValueError):
    """A SCRAM exchange that cannot go on: a malformed or untrustworthy server message, or a
    password that SASLprep refuses. Its message never holds the password."""


# ---------------------------------------------------------------------- SASLprep (RFC 4013)

#: the tables whose characters SASLprep prohibits (RFC 4013 section 2.3)
_PROHIBITED: Final = (
    stringprep.in_table_c12,  # non-ASCII space characters
    stringprep.in_table_c21,  # ASCII control characters
    stringprep.in_table_c22,  # non-ASCII control characters
    stringprep.in_table_c3,  # private use
    stringprep.in_table_c4,  # non-character code points
    stringprep.in_table_c5,  # surrogate codes
    stringprep.in_table_c6,  # inappropriate for plain text
    stringprep.in_table_c7,  # inappropriate for canonical representation
    stringprep.in_table_c8,  # change display properties or deprecated
    stringprep.in_table_c9,  # tagging characters
)


def saslprep(text: str, *, allow_unassigned: bool = False) -> str:
    """``text`` prepared by the SASLprep profile of stringprep (RFC 4013, on Unicode 3.2 as
    RFC 3454 says): non-ASCII spaces mapped to a space, "commonly mapped to nothing"
    characters removed, NFKC, then the prohibited characters and the bidirectional rule
    checked (a :class:`ScramError`, naming neither the text nor the character). Unassigned code
    points are refused unless ``allow_unassigned`` (a query, not a stored string)."""
    if text.isascii() and text.isprintable():
        return text  # (nothing to map, normalize or refuse: printable ASCII is kept as it is)
    mapped = "".join(
        " " if stringprep.in_table_c12(c) else c for c in text if not stringprep.in_table_b1(c)
    )
    prepared = unicodedata.ucd_3_2_0.normalize("NFKC", mapped)
    for char in prepared:
        if any(table(char) for table in _PROHIBITED):
            raise ScramError("SASLprep: the string holds a prohibited character")
        if not allow_unassigned and stringprep.in_table_a1(char):
            raise ScramError("SASLprep: the string holds an unassigned code point")
    # RFC 3454 section 6: right-to-left text holds no left-to-right character, and starts and
    # ends with a right-to-left one
    if any(stringprep.in_table_d1(c) for c in prepared) and (
        any(stringprep.in_table_d2(c) for c in prepared)
        or not (stringprep.in_table_d1(prepared[0]) and stringprep.in_table_d1(prepared[-1]))
    ):
        raise ScramError("SASLprep: the string breaks the bidirectional rule")
    return prepared


# ---------------------------------------------------------------------- the salted keys


class KeyCache:
    """The client and server keys of salted passwords, by (mechanism, password, salt,
    iterations): PBKDF2 runs once per password and salt, not once per connection. Bounded
    (the least recently used go first) and safe across threads; its repr shows its size only."""

    def __init__(self, maxsize: int = 64) -> None:
        self.maxsize = maxsize
        self._keys: collections.OrderedDict[tuple[str, bytes, bytes, int], tuple[bytes, bytes]]
        self._keys = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, bytes, bytes, int]) -> tuple[bytes, bytes] | None:
        with self._lock:
            found = self._keys.get(key)
            if found is not None:
                self._keys.move_to_end(key)
            return found

    def put(self, key: tuple[str, bytes, bytes, int], keys: tuple[bytes, bytes]) -> None:
        with self._lock:
            self._keys[key] = keys
            self._keys.move_to_end(key)
            while len(self._keys) > self.maxsize:
                self._keys.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"<KeyCache {len(self)}/{self.maxsize}>"


KEY_CACHE: Final = KeyCache()


def salted_keys(
    mechanism: str, password: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    """``(ClientKey, ServerKey)`` of SCRAM (RFC 5802 section 3) for the prepared ``password``:
    PBKDF2 with ``iterations`` (slow on purpose; see :class:`KeyCache`)."""
    digest = _DIGESTS[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password, salt, iterations)
    return (
        hmac.digest(salted, b"Client Key", digest),
        hmac.digest(salted, b"Server Key", digest),
    )


def _escape(username: str) -> bytes:
    """A SCRAM ``saslname`` (``=`` and ``,`` escaped); MongoDB does not SASLprep user names."""
    return username.replace("=", "=3D").replace(",", "=2C").encode("utf-8")


def _fields(message: bytes) -> dict[bytes, bytes]:
    """``a=1,b=2`` as ``{b"a": b"1", b"b": b"2"}`` (a value may hold ``=``)."""
    fields: dict[bytes, bytes] = {}
    for part in message.split(b","):
        name, equals, value = part.partition(b"=")
        if len(name) != 1 or not equals:
            raise ScramError("a malformed SCRAM message from the server")
        fields.setdefault(name, value)
    return fields


class ScramClient:
    """The client's side of one SCRAM exchange (RFC 5802), no I/O: :meth:`first` is the
    client-first message (with its GS2 header), :meth:`final` answers the server-first message
    with the proof, :meth:`verify` checks the server's signature in its final message.

    ``password``: the SCRAM password, SASLprep'd here (RFC 5802's ``Normalize``); MongoDB's
    SCRAM-SHA-1 password is a digest of the user's (:meth:`for_mongodb` makes it). ``nonce``:
    the client nonce (default: 24 random bytes, base64), given only to replay a test vector."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        cache: KeyCache | None = KEY_CACHE,
    ) -> None:
        if mechanism not in _DIGESTS:
            raise ValueError(f"ScramClient: mechanism must be one of {MECHANISMS}")
        self.mechanism = mechanism
        self.username = username
        self._digest = _DIGESTS[mechanism]
        self._password = saslprep(password).encode("utf-8")
        self._nonce = (nonce or base64.b64encode(secrets.token_bytes(24)).decode()).encode()
        self._cache = cache
        self._first_bare = b"n=" + _escape(username) + b",r=" + self._nonce
        self._server_signature: bytes | None = None

    @classmethod
    def for_mongodb(cls, mechanism: str, username: str, password: str) -> ScramClient:
        """The client MongoDB's SCRAM needs: SCRAM-SHA-256 on the password (SASLprep'd),
        SCRAM-SHA-1 on the hex MD5 digest of ``"<username>:mongo:<password>"``."""
        if mechanism == "SCRAM-SHA-1":
            text = f"{username}:mongo:{password}".encode()
            password = hashlib.md5(text, usedforsecurity=False).hexdigest()
        return cls(mechanism, username, password)

    def first(self) -> bytes:
        """The client-first message: ``n,,n=<user>,r=<nonce>``."""
        return _GS2_HEADER + self._first_bare

    def _server_first(self, server_first: bytes) -> tuple[bytes, bytes, int]:
        """``(nonce, salt, iterations)`` of the server-first message, checked."""
        fields = _fields(server_first)
        if b"m" in fields:
            raise ScramError("the server requires a SCRAM extension this client does not know")
        try:
            nonce, salt, iterations = fields[b"r"], base64.b64decode(fields[b"s"]), fields[b"i"]
            count = int(iterations)
        except (KeyError, ValueError) as exc:
            raise ScramError("a malformed SCRAM server-first message") from exc
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        if count < MIN_ITERATIONS:
            raise ScramError(f"the server's iteration count {count} is below {MIN_ITERATIONS}")
        return nonce, salt, count

    def cached(self, server_first: bytes) -> bool:
        """Whether :meth:`final` will find its keys in the cache (no PBKDF2 to run)."""
        if self._cache is None:
            return False
        _, salt, iterations = self._server_first(server_first)
        return self._cache.get((self.mechanism, self._password, salt, iterations)) is not None

    def final(self, server_first: bytes) -> bytes:
        """The client-final message (``c=biws,r=<nonce>,p=<proof>``) answering
        ``server_first``; runs PBKDF2 unless the cache has its result."""
        nonce, salt, iterations = self._server_first(server_first)
        key = (self.mechanism, self._password, salt, iterations)
        keys = self._cache.get(key) if self._cache is not None else None
        if keys is None:
            keys = salted_keys(self.mechanism, self._password, salt, iterations)
            if self._cache is not None:
                self._cache.put(key, keys)
        client_key, server_key = keys
        without_proof = b"c=" + _CHANNEL_BINDING + b",r=" + nonce
        auth_message = b",".join((self._first_bare, server_first, without_proof))
        stored_key = hashlib.new(self._digest, client_key).digest()
        signature = hmac.digest(stored_key, auth_message, self._digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.digest(server_key, auth_message, self._digest)
        return without_proof + b",p=" + base64.b64encode(proof)

    def verify(self, server_final: bytes) -> None:
        """Check the server-final message: its signature (``v=``) must be the one the
        server's key makes; an ``e=`` error or a mismatch raises :class:`ScramError`."""
        if self._server_signature is None:
            raise ScramError("verify() before final()")
        fields = _fields(server_final)
        if b"e" in fields:
            raise ScramError(
                f"the server refused the proof: {fields[b'e'].decode(errors='replace')}"
            )
        try:
            signature = base64.b64decode(fields[b"v"], validate=True)
        except (KeyError, ValueError) as exc:
            raise ScramError("a malformed SCRAM server-final message") from exc
        if not hmac.compare_digest(signature, self._server_signature):
            raise ScramError("the server's signature does not match: it does not know the password")

    def __repr__(self) -> str:
        return f"<ScramClient {self.mechanism} user={self.username!r}>"


# ---------------------------------------------------------------------- credentials


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    """Who authenticates: ``username`` and ``password`` on ``source`` (the database holding
    the user), with ``mechanism`` (None: negotiated, see :func:`negotiate`). The repr masks
    the password."""

    username: str
    password: str = dataclasses.field(repr=False)
    source: str = "admin"
    mechanism: str | None = None

    def __post_init__(self) -> None:
        if not self.username:
            raise ValueError("Credentials: the user name is empty")
        _check_mechanism(self.mechanism)
        if not self.source:
            raise ValueError("Credentials: the auth source (database) is empty")

    @classmethod
    def of(
        cls,
        username: str | None,
        password: str | None,
        source: str | None = "admin",
        mechanism: str | None = None,
    ) -> Credentials | None:
        """The credentials of a connect function's arguments (None: no user, no
        authentication); a password without a user, or a user without one, is a ValueError."""
        _check_mechanism(mechanism)
        if username is None:
            if password is not None:
                raise ValueError("a password needs a user name")
            if mechanism is not None:
                raise ValueError(f"authMechanism={mechanism} needs a user name")
            return None
        if password is None:
            raise ValueError(f"user {username!r}: SCRAM authentication needs a password")
        return cls(username, password, source or "admin", mechanism)

    @property
    def negotiates(self) -> bool:
        """Whether the ``hello`` asks for the user's mechanisms (``saslSupportedMechs``)."""
        return self.mechanism is None

    @property
    def namespace(self) -> str:
        """``<source>.<username>``: what the ``hello``'s ``saslSupportedMechs`` names."""
        return f"{self.source}.{self.username}"


def _check_mechanism(mechanism: str | None) -> None:
    if mechanism is not None and mechanism not in MECHANISMS:
        raise ValueError(
            f"authentication mechanism {mechanism!r} is not supported: one of "
            f"{', '.join(MECHANISMS)} (or None, to negotiate)"
        )


def sasl_supported_mechs(credentials: Credentials | None) -> str | None:
    """What the ``hello`` says as ``saslSupportedMechs`` (``<source>.<username>``) to learn the
    user's mechanisms, or None (no credentials, or a mechanism given)."""
    if credentials is None or credentials.mechanism is not None:
        return None
    return credentials.namespace


def negotiate(credentials: Credentials, hello: Mapping[str, Any]) -> str:
    """The mechanism to use: the credentials', else SCRAM-SHA-256 if the ``hello`` reply's
    ``saslSupportedMechs`` lists it, else SCRAM-SHA-1 (listed or not: the Auth spec's rule)."""
    if credentials.mechanism is not None:
        return credentials.mechanism
    mechanisms = hello.get("saslSupportedMechs")
    if isinstance(mechanisms, list) and "SCRAM-SHA-256" in mechanisms:
        return "SCRAM-SHA-256"
    return "SCRAM-SHA-1"


# ---------------------------------------------------------------------- speculative authentication


class Speculation:
    """The first step of a SCRAM conversation sent ahead in the ``hello`` (:meth:`command`), no
    I/O. Its mechanism: the credentials', else SCRAM-SHA-256 (the Handshake spec's rule); the
    ``hello`` still asks for ``saslSupportedMechs``, and :func:`negotiate` still decides."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.mechanism = credentials.mechanism or "SCRAM-SHA-256"
        self.scram = ScramClient.for_mongodb(
            self.mechanism, credentials.username, credentials.password
        )

    @classmethod
    def of(cls, credentials: Credentials | None) -> Speculation | None:
        """The speculation of ``credentials``; None without credentials, or with a password
        SASLprep refuses (the conversation after the ``hello`` then fails as it would)."""
        if credentials is None:
            return None
        try:
            return cls(credentials)
        except ScramError:
            return None

    def command(self) -> dict[str, Any]:
        """The ``hello``'s ``speculativeAuthenticate``."""
        return {**_sasl_start(self.mechanism, self.scram), "db": self.credentials.source}

    def answer(self, hello: Mapping[str, Any], mechanism: str) -> Mapping[str, Any] | None:
        """The ``hello`` reply's ``speculativeAuthenticate`` (``saslStart``'s reply but ``ok``)
        if ``mechanism`` (negotiated) is the speculation's; None if the server ignored it (one
        before 4.4, or its speculative start failed): then ``saslStart`` starts over."""
        reply = hello.get("speculativeAuthenticate")
        if mechanism != self.mechanism or not isinstance(reply, Mapping) or not reply:
            return None
        return reply


# ---------------------------------------------------------------------- the conversation


class Conversation:
    """The commands of one SCRAM authentication, no I/O: :meth:`start` (``saslStart``),
    :meth:`proof` (the first ``saslContinue``, once the server-first payload was read with
    :meth:`challenge`), :meth:`finish` (checks the server's signature; another, empty
    ``saslContinue`` if the server is not done). Their failures are
    :class:`~.errors.AuthenticationError`."""

    #: the ``saslContinue`` commands a server may need (``skipEmptyExchange``: one; else two)
    MAX_CONTINUES: Final = 2

    def __init__(
        self,
        credentials: Credentials,
        hello: Mapping[str, Any],
        *,
        address: str,
        service_id: ServiceId,
        speculation: Speculation | None = None,
    ) -> None:
        self.credentials = credentials
        self.mechanism = negotiate(credentials, hello)
        self.source = credentials.source
        self.address = address
        self.service_id = service_id
        self._conversation_id: Any = None
        self._server_first = b""
        self._continues = 0
        #: the ``hello`` reply's answer to ``speculation``, for ``saslStart``'s (None: start)
        self.speculated: Mapping[str, Any] | None = None
        if speculation is not None:
            self.speculated = speculation.answer(hello, self.mechanism)
            if self.speculated is not None:
                self.scram = speculation.scram
                return
        try:
            self.scram = ScramClient.for_mongodb(
                self.mechanism, credentials.username, credentials.password
            )
        except ScramError as exc:
            raise self.failed(f"the password cannot be used: {exc}") from None

    def failed(self, reason: str, cause: OperationFailure | None = None) -> AuthenticationError:
        user = self.credentials.username
        return AuthenticationError(
            f"{self.mechanism} authentication of user {user!r} on {self.source!r} at "
            f"{self.address} failed: {reason}",
            address=self.address,
            service_id=self.service_id,
            mechanism=self.mechanism,
            code=cause.code if cause is not None else None,
            code_name=cause.code_name if cause is not None else "",
        )

    def start(self) -> dict[str, Any]:
        return _sasl_start(self.mechanism, self.scram)

    def challenge(self, reply: Mapping[str, Any]) -> bool:
        """Read ``saslStart``'s reply (or :attr:`speculated`); whether :meth:`proof` will run
        PBKDF2 (not cached: an event loop runs it on a thread)."""
        self._conversation_id = reply.get("conversationId")
        self._server_first = _payload(reply, self)
        try:
            return not self.scram.cached(self._server_first)
        except ScramError as exc:
            raise self.failed(str(exc)) from None

    def proof(self) -> dict[str, Any]:
        try:
            payload = self.scram.final(self._server_first)
        except ScramError as exc:
            raise self.failed(str(exc)) from None
        return self._continue(payload)

    def finish(self, reply: Mapping[str, Any]) -> dict[str, Any] | None:
        """Check a ``saslContinue`` reply: None when authenticated, else the next command."""
        if self._continues == 1:
            try:
                self.scram.verify(_payload(reply, self))
            except ScramError as exc:
                raise self.failed(str(exc)) from None
        if reply.get("done"):
            return None
        if self._continues >= self.MAX_CONTINUES:
            raise self.failed("the server did not end the SASL conversation")
        return self._continue(b"")

    def _continue(self, payload: bytes) -> dict[str, Any]:
        self._continues += 1
        return {"saslContinue": 1, "conversationId": self._conversation_id, "payload": payload}

    def refused(self, error: OperationFailure) -> AuthenticationError:
        """The server's ``ok: 0`` answer, as the authentication's failure."""
        reason = str(error.reply.get("errmsg") or "the server refused")
        what = f" ({error.code_name or 'code'} {error.code})" if error.code is not None else ""
        return self.failed(f"{reason}{what}", error)


def _sasl_start(mechanism: str, scram: ScramClient) -> dict[str, Any]:
    """``saslStart`` (``skipEmptyExchange``: one ``saslContinue`` fewer, if the server knows it)."""
    return {
        "saslStart": 1,
        "mechanism": mechanism,
        "payload": scram.first(),
        "autoAuthorize": 1,
        "options": {"skipEmptyExchange": True},
    }


def _payload(reply: Mapping[str, Any], conversation: Conversation) -> bytes:
    payload = reply.get("payload")
    if not isinstance(payload, bytes):
        raise conversation.failed("the server's reply has no payload")
    return bytes(payload)

