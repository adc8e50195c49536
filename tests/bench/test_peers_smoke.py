"""``python benchmarks/peers.py`` run as a user runs it (a subprocess), on a subset of its
workloads with ``--quick`` against the local PostgreSQL and Redis: the report has every pool,
its ratios, waits and fairness; the markdown, JSON and PNG files are written. No figure is
compared with an expectation (the machine is shared): only the report's structure."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_run import PG_DSN, REDIS_URL, need_port, skip_or_fail

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py"
SUBSET = "H1,H3,H4,W1-async,W8-redis"
#: every pool each workload of SUBSET must report (labels: name and variant)
EXPECTED = {
    "H1": [
        "poolkit.backends.asyncpg (as shipped)",
        "poolkit.backends.asyncpg.create_pool acquire() (as shipped)",
        "asyncpg.create_pool (as shipped)",
        "SQLAlchemy AsyncAdaptedQueuePool (as shipped)",
        "SQLAlchemy AsyncAdaptedQueuePool (like for like)",
        "SQLAlchemy AsyncAdaptedQueuePool (fair queue)",
        "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool (as shipped)",
        "floor: minimal FIFO pool",
        "floor: dedicated connections",
    ],
    "H3": [
        "poolkit.backends.psycopg.create_pool (as shipped)",
        "poolkit.backends.psycopg.create_pool (rollback only (reset=False))",
        "psycopg_pool.ConnectionPool (as shipped)",
        "psycopg_pool.ConnectionPool (like for like)",
        "psycopg_pool.ConnectionPool getconn/putconn (as shipped)",
        "poolkit.backends.psycopg.ConnectionPool (as shipped)",
        "poolkit.backends.psycopg.ConnectionPool getconn/putconn (as shipped)",
        "poolkit.backends.psycopg.ConnectionPool (full reset (reset_session=True))",
        "SQLAlchemy QueuePool (as shipped)",
        "SQLAlchemy QueuePool (like for like)",
        "poolkit.backends.sqlalchemy.QueuePool (as shipped)",
        "poolkit.backends.sqlalchemy.QueuePool (like for like)",
        "floor: minimal FIFO pool",
        "floor: dedicated connections",
    ],
    "H4": [
        "poolkit.backends.redis.BlockingConnectionPool (as shipped)",
        "poolkit.backends.redis.create_pool (as shipped)",
        "redis.BlockingConnectionPool (as shipped)",
        "floor: minimal FIFO pool",
        "floor: dedicated connections",
    ],
    "W1-async": [
        "poolkit: async with pool.connection() (as shipped)",
        "poolkit: checkout() + lease.release() (as shipped)",
        "poolkit: checkout() + await pool.checkin(lease) (as shipped)",
        "floor: minimal FIFO pool",
    ],
    "W8-redis": [
        "poolkit.backends.redis.BlockingConnectionPool (as shipped)",
        "poolkit.backends.redis.create_pool (as shipped)",
        "redis.BlockingConnectionPool (as shipped)",
    ],
}
DRIVERS = ("asyncpg", "psycopg", "psycopg_pool", "redis", "sqlalchemy", "greenlet", "matplotlib")


def peers(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "POOLKIT_TEST_PG_DSN": PG_DSN, "POOLKIT_REDIS_URL": REDIS_URL},
    )


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value) and not math.isinf(value)


def test_a_quick_run_reports_every_pool_with_ratios_waits_and_fairness(tmp_path: Path) -> None:
    for module in DRIVERS:
        if importlib.util.find_spec(module) is None:
            skip_or_fail(f"{module} is not installed: pip install -e '.[dev]'")
    need_port(PG_DSN, 5432, "PostgreSQL")
    need_port(REDIS_URL, 6379, "Redis")
    out = tmp_path / "peers.json"
    md = tmp_path / "peers.md"
    png = tmp_path / "peers.png"
    ran = peers("--quick", "--duration", "0.15", "--rounds", "2", "--workloads", SUBSET,
                "--json", str(out), "--markdown", str(md), "--plot", str(png))  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]

    document = json.loads(out.read_text())
    assert document["meta"]["rounds"] == 2 and document["meta"]["quick"] is True
    assert "python" in document["meta"]["machine"]
    workloads = {w["key"]: w for w in document["workloads"]}
    assert sorted(workloads) == sorted(EXPECTED)
    for key, labels in EXPECTED.items():
        w = workloads[key]
        assert w["skipped"] == "", (key, w["skipped"])
        contenders = {c["label"]: c for c in w["contenders"]}
        assert sorted(contenders) == sorted(labels), key
        for label, c in contenders.items():
            where = f"{key} {label}"
            assert c["skipped"] == "" and c["errors"] == [], (where, c["skipped"], c["errors"])
            assert len(c["rounds"]) == 2 and all(c["rounds"]), where
            assert finite(c["figures"][w["metric"]]["median"]), where
            if c["role"] != "floor" and w["floor"]:
                assert finite(c["vs_floor"]["median"]), where
                assert c["vs_floor"]["n"] == 2, where  # (a ratio per round)
            if c["label"] != w["reference"] and w["reference"]:
                assert finite(c["vs_reference"]["median"]), where
            if w["server"]:
                assert c["figures"]["server_conns_peak"]["max"] >= 1, where
        if w["group"] == "headline":  # the contention figures: waits, never p99 alone; fairness
            for label, c in contenders.items():
                figures = c["figures"]
                for name in ("ops_per_s", "wait_p50_us", "wait_p99_us", "wait_max_us",
                             "ops_worker_min", "ops_worker_max", "fairness",
                             "cpu_us_per_op"):  # fmt: skip
                    assert finite(figures[name]["median"]), (key, label, name)
                assert finite(figures["fairness_worst"]), (key, label)
    w8 = {c["label"]: c for c in workloads["W8-redis"]["contenders"]}
    for c in w8.values():
        assert finite(c["figures"]["recovery_s"]["median"])
        assert finite(c["figures"]["failed_ops"]["median"])
        assert finite(c["figures"]["connects_after_return"]["median"])

    for key in EXPECTED:
        assert key in ran.stdout
    text = md.read_text()
    assert text.startswith("# poolkit and its peers: ")
    assert "## Machine" in text and "## Headline" in text and "peers.py --quick" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_server_that_does_not_answer_skips_its_workloads_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    gone = "redis://127.0.0.1:1/0"
    ran = peers("--quick", "--workloads", "H4", "--redis-url", gone, "--json", str(out))
    assert ran.returncode == 0, ran.stderr
    (w,) = json.loads(out.read_text())["workloads"]
    assert "127.0.0.1:1" in w["skipped"] and "H4" in ran.stdout and "skipped" in ran.stdout
    strict = peers("--quick", "--workloads", "H4", "--redis-url", gone, "--strict")
    assert strict.returncode == 1


def test_an_unknown_workload_is_refused_naming_the_known_ones() -> None:
    ran = peers("--workloads", "H9")
    assert ran.returncode == 1
    assert "--workloads: no workload 'H9'" in ran.stderr and "headline" in ran.stderr
    listed = peers("--list", "--workloads", "headline,W1")
    assert listed.returncode == 0
    assert "H1" in listed.stdout and "W1-threads" in listed.stdout and "W8" not in listed.stdout
