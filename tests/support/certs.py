"""A self-signed certificate for the TLS tests (tests/backends, tests/mongodb): the ``cert``
fixture (conftest.py) makes one per session; these build contexts from it."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class Cert(NamedTuple):
    """A self-signed certificate for localhost / 127.0.0.1: its file, its key's, its PEM."""

    cert: Path
    key: Path
    pem: str


def self_signed(folder: Path) -> Cert:
    """A self-signed certificate (also a CA: it signs itself) written to ``folder``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    (folder / "cert.pem").write_text(pem)
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Cert(folder / "cert.pem", folder / "key.pem", pem)


def server_context(cert: Cert) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    return context


def trusting(cert: Cert) -> ssl.SSLContext:
    """A client context that verifies (as the default one) but trusts the test certificate."""
    return ssl.create_default_context(cadata=cert.pem)
