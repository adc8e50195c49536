"""The server's side of authentication for the simulated MongoDB: the users
(:class:`SimUsers`) and SCRAM-SHA-1 / SCRAM-SHA-256 conversations (RFC 5802, RFC 7677) as
MongoDB runs them: ``saslStart`` (or a ``hello``'s ``speculativeAuthenticate``), then
``saslContinue`` (one with ``skipEmptyExchange``, else two), and ``hello``'s
``saslSupportedMechs``.

Rules of this module
--------------------
* No I/O. A user's password is kept only as MongoDB keeps it: per mechanism a salt, an
  iteration count, ``StoredKey`` and ``ServerKey``, made when the server starts.
* A failed authentication is error 18 AuthenticationFailed with the server's one message,
  whatever failed (no such user, a wrong proof): it tells a client nothing more. A
  ``saslContinue`` with no conversation to continue is error 17 ProtocolError; an unknown
  mechanism error 334 MechanismUnavailable.
* The conversation lives on the connection (:class:`~.settings.ConnectionInfo`); a success
  sets the connection's ``user`` (``"<db>.<name>"``), a failure ends the conversation.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

from pymongo.saslprep import saslprep

from .faults import error_document
from .settings import ConnectionInfo

__all__ = ["AUTH_FAILED", "SimUsers"]

AUTH_FAILED = "Authentication failed."
_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-1": "sha1"}
_SALT_SIZES = {"SCRAM-SHA-256": 28, "SCRAM-SHA-1": 16}  # (as MongoDB makes them)


class _Refused(Exception):
    def __init__(self, code: int, errmsg: str) -> None:
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg


@dataclasses.dataclass(frozen=True, slots=True)
class _Credential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclasses.dataclass(eq=False)
class _Conversation:
    conversation_id: int
    db: str
    user: str
    mechanism: str
    credential: _Credential
    gs2_header: bytes
    first_bare: bytes
    server_first: bytes
    nonce: bytes
    skip_empty_exchange: bool
    proven: bool = False


def _mongodb_password(mechanism: str, user: str, password: str) -> bytes:
    """The password SCRAM runs on: SASLprep'd for SHA-256, MongoDB's MD5 digest for SHA-1."""
    if mechanism == "SCRAM-SHA-1":
        digest = hashlib.md5(f"{user}:mongo:{password}".encode(), usedforsecurity=False)
        return digest.hexdigest().encode()
    prepared: str = saslprep(password)  # (pymongo's, untyped)
    return prepared.encode("utf-8")


def _server_keys(
    mechanism: str, password: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    """RFC 5802, section 3, the server's side: SaltedPassword is Hi(password, salt, i), PBKDF2
    with the mechanism's HMAC; ClientKey and ServerKey are HMACs of it. (Written here, not taken
    from the driver's SCRAM: the simulator is what the driver's is tested against.)"""
    name = _DIGESTS[mechanism]
    salted_password = hashlib.pbkdf2_hmac(name, password, salt, iterations)
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return client_key, server_key


def _fields(message: bytes) -> dict[bytes, bytes]:
    fields: dict[bytes, bytes] = {}
    for part in message.split(b","):
        name, equals, value = part.partition(b"=")
        if len(name) != 1 or not equals:
            raise _Refused(18, AUTH_FAILED)
        fields.setdefault(name, value)
    return fields


class SimUsers:
    """The users of the simulated cluster: ``users`` maps a name (a user of ``admin``) or
    ``"<db>.<name>"`` to its password; each has credentials for every one of ``mechanisms``,
    salted with ``iterations``. Empty: no authentication (every command is allowed)."""

    #: the commands a connection runs before it authenticates
    UNAUTHENTICATED = frozenset(
        {"hello", "isMaster", "ismaster", "saslStart", "saslContinue", "ping", "buildInfo",
         "buildinfo", "endSessions"}
    )  # fmt: skip

    def __init__(
        self, users: Mapping[str, str], mechanisms: tuple[str, ...], iterations: int
    ) -> None:
        self.mechanisms = tuple(m for m in mechanisms if m in _DIGESTS)
        self._credentials: dict[tuple[str, str], dict[str, _Credential]] = {}
        for name, password in users.items():
            db, _, user = name.partition(".") if "." in name else ("admin", "", name)
            self._credentials[db, user] = {
                mechanism: self._credential(mechanism, user, password, iterations)
                for mechanism in self.mechanisms
            }

    @staticmethod
    def _credential(mechanism: str, user: str, password: str, iterations: int) -> _Credential:
        salt = secrets.token_bytes(_SALT_SIZES[mechanism])
        secret = _mongodb_password(mechanism, user, password)
        client_key, server_key = _server_keys(mechanism, secret, salt, iterations)
        stored_key = hashlib.new(_DIGESTS[mechanism], client_key).digest()
        return _Credential(salt, iterations, stored_key, server_key)

    @property
    def enabled(self) -> bool:
        return bool(self._credentials)

    def allows(self, conn: ConnectionInfo, command: str) -> bool:
        """Whether ``conn`` may run ``command`` (authenticated, or one of the handshake's)."""
        return not self.enabled or conn.user is not None or command in self.UNAUTHENTICATED

    def supported_mechanisms(self, namespace: Any) -> list[str] | None:
        """``hello``'s ``saslSupportedMechs`` for ``"<db>.<user>"`` (None: no such user)."""
        if not isinstance(namespace, str) or "." not in namespace:
            return None
        db, _, user = namespace.partition(".")
        found = self._credentials.get((db, user))
        return list(found) if found else None

    # ------------------------------------------------------------------ the commands

    def sasl_start(self, conn: ConnectionInfo, body: Mapping[str, Any], db: str) -> dict[str, Any]:
        """Answer ``saslStart`` (also a ``hello``'s ``speculativeAuthenticate``, ``db`` its)."""
        conn.sasl = None
        try:
            conversation = self._start(body, db)
        except _Refused as exc:
            return error_document(exc.code, exc.errmsg)
        conn.sasl = conversation
        return {
            "conversationId": conversation.conversation_id,
            "done": False,
            "payload": conversation.server_first,
            "ok": 1.0,
        }

    def _start(self, body: Mapping[str, Any], db: str) -> _Conversation:
        mechanism = body.get("mechanism")
        if mechanism not in self.mechanisms:
            raise _Refused(
                334, f"Received authentication for mechanism {mechanism} which is not enabled"
            )
        payload = bytes(body.get("payload") or b"")
        gs2_cbind, _, rest = payload.partition(b",")
        authzid, _, first_bare = rest.partition(b",")
        if gs2_cbind not in (b"n", b"y") or authzid:
            raise _Refused(18, AUTH_FAILED)  # (channel binding, or an authzid: not MongoDB's)
        fields = _fields(first_bare)
        user = fields.get(b"n", b"").decode("utf-8", "replace")
        user = user.replace("=2C", ",").replace("=3D", "=")
        client_nonce = fields.get(b"r", b"")
        credential = self._credentials.get((db, user), {}).get(str(mechanism))
        if credential is None or not client_nonce:
            raise _Refused(18, AUTH_FAILED)
        nonce = client_nonce + base64.b64encode(secrets.token_bytes(24))
        salt = base64.b64encode(credential.salt)
        server_first = b"r=" + nonce + b",s=" + salt + b",i=" + str(credential.iterations).encode()
        options = body.get("options")
        return _Conversation(
            conversation_id=1,
            db=db,
            user=user,
            mechanism=str(mechanism),
            credential=credential,
            gs2_header=gs2_cbind + b"," + authzid + b",",
            first_bare=first_bare,
            server_first=server_first,
            nonce=nonce,
            skip_empty_exchange=isinstance(options, Mapping)
            and bool(options.get("skipEmptyExchange")),
        )

    def sasl_continue(
        self, conn: ConnectionInfo, body: Mapping[str, Any], db: str
    ) -> dict[str, Any]:
        """Answer ``saslContinue``: the proof checked (the server's signature answered), or,
        after it without ``skipEmptyExchange``, the empty last step."""
        conversation = conn.sasl
        if (
            not isinstance(conversation, _Conversation)
            or body.get("conversationId") != conversation.conversation_id
            or conversation.db != db
        ):
            return error_document(17, "No SASL session state found")
        payload = bytes(body.get("payload") or b"")
        if conversation.proven:  # (the empty exchange)
            conn.sasl = None
            conn.user = f"{conversation.db}.{conversation.user}"
            return self._continued(conversation, True, b"")
        try:
            signature = self._check_proof(conversation, payload)
        except _Refused as exc:
            conn.sasl = None
            return error_document(exc.code, exc.errmsg)
        conversation.proven = True
        if conversation.skip_empty_exchange:
            conn.sasl = None
            conn.user = f"{conversation.db}.{conversation.user}"
        return self._continued(conversation, conversation.skip_empty_exchange, signature)

    @staticmethod
    def _continued(conversation: _Conversation, done: bool, payload: bytes) -> dict[str, Any]:
        return {
            "conversationId": conversation.conversation_id,
            "done": done,
            "payload": payload,
            "ok": 1.0,
        }

    @staticmethod
    def _check_proof(conversation: _Conversation, payload: bytes) -> bytes:
        """The server-final message (``v=<signature>``), if the client-final's proof holds."""
        without_proof, _, proof_field = payload.rpartition(b",p=")
        fields = _fields(without_proof)
        if (
            not without_proof
            or fields.get(b"c") != base64.b64encode(conversation.gs2_header)
            or fields.get(b"r") != conversation.nonce
        ):
            raise _Refused(18, AUTH_FAILED)
        try:
            proof = base64.b64decode(proof_field, validate=True)
        except ValueError as exc:
            raise _Refused(18, AUTH_FAILED) from exc
        digest = _DIGESTS[conversation.mechanism]
        credential = conversation.credential
        auth_message = b",".join(
            (conversation.first_bare, conversation.server_first, without_proof)
        )
        client_signature = hmac.digest(credential.stored_key, auth_message, digest)
        if len(proof) != len(client_signature):
            raise _Refused(18, AUTH_FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), credential.stored_key):
            raise _Refused(18, AUTH_FAILED)
        server_signature = hmac.digest(credential.server_key, auth_message, digest)
        return b"v=" + base64.b64encode(server_signature)

    def speculative(
        self, conn: ConnectionInfo, request: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The answer to a ``hello``'s ``speculativeAuthenticate`` (``request``: ``saslStart``'s
        fields and ``db``, the database): ``saslStart``'s reply without ``ok``. None (the
        reply has no ``speculativeAuthenticate``) when it fails, whatever failed, as MongoDB
        treats a failed speculative start as one never made: the client then authenticates
        with ``saslStart``; and for one without ``db``, or an ``authenticate`` (MONGODB-X509,
        which the simulator does not run)."""
        db = request.get("db")
        if not self.enabled or next(iter(request), None) != "saslStart" or not isinstance(db, str):
            return None
        reply = self.sasl_start(conn, request, db)
        if reply.get("ok") != 1.0:
            return None
        return {key: value for key, value in reply.items() if key != "ok"}
