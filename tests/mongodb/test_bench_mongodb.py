"""``poolkit bench mongodb://...`` against the simulated load balancer, run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from poolkit_sim_mongo import SimMongoServer, SimMongoSettings


def bench(uri: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poolkit", "bench", uri, *options],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("mode", [[], ["--threads"]], ids=["asyncio", "threads"])
def test_bench_a_load_balanced_mongodb(mode: list[str]) -> None:
    """With the URI's credentials: every connection authenticates (SCRAM, speculatively)."""
    server = SimMongoServer(SimMongoSettings(services=3, users={"app": "s3cret"}))
    with server.start_in_thread() as handle:
        uri = f"mongodb://app:s3cret@127.0.0.1:{handle.port}/?loadBalanced=true"
        done = bench(
            uri,
            *("--duration", "1", "--warmup", "0.2", "--max-size", "6", "--concurrency", "12"),
            *("--json", *mode),
        )
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        result = document["results"][0]
        assert document["kind"] == "mongodb" and "s3cret" not in done.stdout
        assert result["ops"] > 0 and result["errors"] == {}
        assert result["connections"]["client_peak"] == 6
        assert result["connections"]["left_open"] == 0
        stats = handle.call(server.stats)
        # every service got connections (round robin), and every one of them was closed
        assert all(s.connections_accepted > 0 for s in stats.services)
        assert stats.connections_open == 0
        assert stats.commands["ping"] >= result["ops"]
        assert stats.commands["saslContinue"] >= sum(s.connections_accepted for s in stats.services)


@pytest.mark.parametrize(
    ("query", "error"),
    [("", "AuthenticationError"), ("&tls=true", "HandshakeError")],
    ids=["wrong-password", "tls-to-a-plain-server"],
)
def test_bench_uses_the_uris_credentials_and_tls(query: str, error: str) -> None:
    server = SimMongoServer(SimMongoSettings(services=1, users={"app": "s3cret"}))
    with server.start_in_thread() as handle:
        password = "WRONG" if not query else "s3cret"
        uri = f"mongodb://app:{password}@127.0.0.1:{handle.port}/?loadBalanced=true{query}"
        done = bench(uri, "--duration", "1")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and error in lines[0] and password not in done.stderr, done.stderr


def test_bench_refuses_a_server_not_behind_a_load_balancer() -> None:
    server = SimMongoServer(SimMongoSettings(services=1, load_balanced=False))
    with server.start_in_thread() as handle:
        uri = f"mongodb://127.0.0.1:{handle.port}/?loadBalanced=true"
        done = bench(uri, "--duration", "1")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].endswith(
        "LoadBalancerUnsupportedError: Driver attempted to initialize in load balancing mode, "
        "but the server does not support this mode."
    )
