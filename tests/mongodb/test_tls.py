"""TLS from the URI (poolkit.mongodb.tls.tls_context): the context its tls* options make, and
connections over TLS to the simulator serving TLS (a self-signed certificate), asyncio and
blocking, and pymongo against the same server."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pymongo
import pytest

import poolkit
from certs import Cert, server_context, trusting
from lb_helpers import run
from poolkit.mongodb import (
    HandshakeError,
    async_connect_uri,
    connect_uri,
    create_async_pool,
    parse_uri,
)
from poolkit.mongodb.tls import tls_context
from poolkit_sim_mongo import SimMongoServer, SimMongoSettings


def test_no_tls_no_context() -> None:
    assert tls_context(parse_uri("mongodb://h/")) is None
    assert tls_context(parse_uri("mongodb://h/?tls=false")) is None


def test_by_default_it_verifies_the_certificate_and_the_host_name() -> None:
    context = tls_context(parse_uri("mongodb://h/?tls=true"))
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize(
    ("options", "verify", "hostname"),
    [
        ("tlsInsecure=true", ssl.CERT_NONE, False),
        ("tlsAllowInvalidCertificates=true", ssl.CERT_NONE, False),
        ("tlsAllowInvalidHostnames=true", ssl.CERT_REQUIRED, False),
        ("tlsDisableOCSPEndpointCheck=true", ssl.CERT_REQUIRED, True),
    ],
)
def test_the_relaxing_options(options: str, verify: ssl.VerifyMode, hostname: bool) -> None:
    context = tls_context(parse_uri(f"mongodb://h/?{options}"))  # (any tls* option: TLS on)
    assert context is not None
    assert (context.verify_mode, context.check_hostname) == (verify, hostname)


def test_files_that_cannot_be_read_name_their_option(tmp_path: Path, cert: Cert) -> None:
    with pytest.raises(ValueError, match=r"tlsCAFile='.*missing.pem': No such file"):
        tls_context(parse_uri(f"mongodb://h/?tlsCAFile={tmp_path / 'missing.pem'}"))
    encrypted = tmp_path / "both.pem"
    encrypted.write_text(cert.pem + cert.key.read_text())
    uri = parse_uri(
        f"mongodb://h/?tlsCertificateKeyFile={cert.cert}"
        "&tlsCertificateKeyFilePassword=sekrit-words"
    )
    with pytest.raises(ValueError, match="tlsCertificateKeyFile=") as caught:
        tls_context(uri)  # (a key in another file than the certificate: not this one)
    assert "sekrit" not in str(caught.value)
    context = tls_context(parse_uri(f"mongodb://h/?tlsCertificateKeyFile={encrypted}"))
    assert context is not None  # (certificate and key in one file, as MongoDB has it)


def tls_uri(server: SimMongoServer | Any, options: str) -> str:
    return f"mongodb://localhost:{server.port}/?loadBalanced=true&{options}"


def test_a_pool_over_tls(cert: Cert) -> None:
    async def main() -> None:
        settings = SimMongoSettings(services=2)
        async with SimMongoServer(settings, tls=server_context(cert)) as server:
            for options in (f"tlsCAFile={cert.cert}", "tlsAllowInvalidCertificates=true"):
                uri = parse_uri(tls_uri(server, options))
                async with poolkit.AsyncPool(
                    async_connect_uri(uri), address=uri.addresses[0], options=uri.pool_options
                ) as pool, pool.connection() as conn:
                    assert (await conn.command("admin", {"ping": 1}))["ok"] == 1
            uri = parse_uri(tls_uri(server, "tls=true"))  # (the system's CAs: not this one)
            async with poolkit.AsyncPool(
                async_connect_uri(uri), address=uri.addresses[0], options=uri.pool_options
            ) as pool:
                with pytest.raises(HandshakeError, match="CERTIFICATE_VERIFY_FAILED"):
                    await pool.checkout(5)

    run(main)


def test_a_blocking_pool_and_pymongo_over_tls(cert: Cert) -> None:
    server = SimMongoServer(SimMongoSettings(services=2), tls=server_context(cert))
    with server.start_in_thread() as handle:
        text = tls_uri(handle, f"tlsCAFile={cert.cert}")
        uri = parse_uri(text)
        with (
            poolkit.Pool(
                connect_uri(uri), address=uri.addresses[0], options=uri.pool_options
            ) as pool,
            pool.connection() as conn,
        ):
            assert conn.command("admin", {"ping": 1})["ok"] == 1
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            text, serverSelectionTimeoutMS=5000
        )
        with client:
            client.db.items.insert_one({"over": "tls"})
            assert client.db.items.find_one({}, {"_id": 0}) == {"over": "tls"}


def test_a_context_given_means_tls_whatever_the_uri_says(cert: Cert) -> None:
    async def main() -> None:
        async with SimMongoServer(SimMongoSettings(services=1), tls=server_context(cert)) as s:
            plain = f"mongodb://localhost:{s.port}/?loadBalanced=true"  # (no tls=true)
            pool = await create_async_pool(plain, tls=trusting(cert))
            async with pool, pool.connection() as conn:
                assert (await conn.command("admin", {"ping": 1}))["ok"] == 1
        with pytest.raises(TypeError, match=r"tls=...\): an ssl.SSLContext or None"):
            await create_async_pool("mongodb://h/?loadBalanced=true", tls="x")  # type: ignore[arg-type]
        wrong = r"create_async_pool\(options=...\) must be a PoolOptions, got 5"
        with pytest.raises(TypeError, match=wrong):
            await create_async_pool("mongodb://h/", options=5)  # type: ignore[arg-type]

    run(main)
