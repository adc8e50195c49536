"""``python benchmarks/peer_ab.py``: which drop-ins it pairs with which peers, and a short run as
a user runs it (a subprocess) against the local Redis: both pools built, warmed and driven in
turns, each pair's ratios reported. No figure is compared with an expectation (the machine is
shared): only what was run and reported."""

from __future__ import annotations

import importlib.util
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench_run import REDIS_URL, need_port, skip_or_fail

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import peer_ab  # noqa: E402
import peers  # noqa: E402
from peerbench.core import Sizes  # noqa: E402

#: every drop-in of the headline, called as the pool it replaces, and that pool
HEADLINE_PAIRS = {
    ("H1", "poolkit.backends.asyncpg.create_pool acquire() (as shipped)",
     "asyncpg.create_pool (as shipped)"),
    ("H1", "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool (as shipped)",
     "SQLAlchemy AsyncAdaptedQueuePool (as shipped)"),
    ("H2", "poolkit.backends.psycopg.AsyncConnectionPool (as shipped)",
     "psycopg_pool.AsyncConnectionPool (as shipped)"),
    ("H2", "poolkit.backends.psycopg.AsyncConnectionPool getconn/putconn (as shipped)",
     "psycopg_pool.AsyncConnectionPool getconn/putconn (as shipped)"),
    ("H2", "poolkit.backends.psycopg.AsyncConnectionPool (full reset (reset_session=True))",
     "psycopg_pool.AsyncConnectionPool (like for like)"),
    ("H2", "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool (as shipped)",
     "SQLAlchemy AsyncAdaptedQueuePool (as shipped)"),
    ("H3", "poolkit.backends.psycopg.ConnectionPool (as shipped)",
     "psycopg_pool.ConnectionPool (as shipped)"),
    ("H3", "poolkit.backends.psycopg.ConnectionPool getconn/putconn (as shipped)",
     "psycopg_pool.ConnectionPool getconn/putconn (as shipped)"),
    ("H3", "poolkit.backends.psycopg.ConnectionPool (full reset (reset_session=True))",
     "psycopg_pool.ConnectionPool (like for like)"),
    ("H3", "poolkit.backends.sqlalchemy.QueuePool (as shipped)",
     "SQLAlchemy QueuePool (as shipped)"),
    ("H3", "poolkit.backends.sqlalchemy.QueuePool (like for like)",
     "SQLAlchemy QueuePool (like for like)"),
    ("H4", "poolkit.backends.redis.BlockingConnectionPool (as shipped)",
     "redis.BlockingConnectionPool (as shipped)"),
    ("H5", "poolkit.backends.redis.AsyncBlockingConnectionPool (as shipped)",
     "redis.asyncio.BlockingConnectionPool (as shipped)"),
}  # fmt: skip


def test_every_drop_in_is_paired_with_the_pool_it_replaces() -> None:
    found = {
        (workload.key, contender.label, peer)
        for workload in peers.select(peers.workloads(Sizes.full()), "headline")
        for contender, peer in peer_ab.pairs_of(workload, None)
    }
    assert found == HEADLINE_PAIRS
    labels = {c.label for w in peers.workloads(Sizes.full()) for c in w.contenders}
    assert {peer for _, _, peer in found} <= labels  # (each peer is a contender of its own)


def test_only_picks_drop_ins_by_their_label() -> None:
    (h3,) = peers.select(peers.workloads(Sizes.full()), "H3")
    picked = [(c.label, peer) for c, peer in peer_ab.pairs_of(h3, "queuepool (as")]
    assert picked == [
        ("poolkit.backends.sqlalchemy.QueuePool (as shipped)", "SQLAlchemy QueuePool (as shipped)")
    ]


def test_versus_pairs_a_drop_in_with_the_one_contender_it_names() -> None:
    h1, h2 = peers.select(peers.workloads(Sizes.full()), "H1,H2")
    for workload in (h1, h2):
        picked = [(c.label, peer) for c, peer in
                  peer_ab.pairs_of(workload, "sqlalchemy", "(fair queue)")]  # fmt: skip
        assert picked == [("poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool (as shipped)",
                           "SQLAlchemy AsyncAdaptedQueuePool (fair queue)")]  # fmt: skip
    # a text no other contender's label holds, or more than one's: that drop-in is left out
    assert peer_ab.pairs_of(h1, "sqlalchemy", "no such pool") == []
    assert peer_ab.pairs_of(h1, "sqlalchemy", "SQLAlchemy AsyncAdaptedQueuePool") == []


def test_versus_that_pairs_nothing_is_refused_naming_the_option() -> None:
    ran = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peer_ab.py"), "H1", "--versus", "no such pool"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "--versus 'no such pool': no drop-in picked has one other contender" in ran.stderr


def test_the_process_pairs_mean_and_its_interval_are_students_t_on_the_logs() -> None:
    lo, mean, hi = peer_ab.across([math.exp(-1.0), 1.0, math.exp(1.0)])
    # mean of the logs 0, their standard deviation 1, t(2 degrees of freedom) = 4.303
    assert mean == pytest.approx(1.0)
    assert math.log(hi) == pytest.approx(4.303 / math.sqrt(3))
    assert math.log(lo) == pytest.approx(-4.303 / math.sqrt(3))
    lo, mean, hi = peer_ab.across([2.0] * 40)  # (beyond the table: no spread, no interval)
    assert (lo, mean, hi) == pytest.approx((2.0, 2.0, 2.0))
    lo, mean, hi = peer_ab.across([0.5, 2.0] * 20)  # (39 degrees of freedom: t = 2.0)
    half = 2.0 * statistics.stdev([math.log(0.5), math.log(2.0)] * 20) / math.sqrt(40)
    assert (math.log(lo), math.log(hi)) == pytest.approx((-half, half))


def test_a_short_pinned_run_drives_both_pools_in_turns_over_three_process_pairs() -> None:
    if importlib.util.find_spec("redis") is None:
        skip_or_fail("redis-py is not installed: pip install -e '.[dev]'")
    need_port(REDIS_URL, 6379, "Redis")
    ran = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peer_ab.py"), "H4", "--pairs", "3", "--segment",
         "0.1", "--warmup", "0.1", "--restarts", "3", "--redis-url", REDIS_URL, "--cpu", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    assert "each contender on CPU [0]" in out, out  # (each child says where it runs: checked)
    assert (
        "H4 poolkit.backends.redis.BlockingConnectionPool (as shipped)  vs  "
        "redis.BlockingConnectionPool (as shipped)" in out
    ), out
    for name in ("ops_per_s", "client_per_op"):
        assert re.search(rf"{name} +\d+\.\d+ +\[\d+\.\d+-\d+\.\d+\] +\(3 pairs\)", out), (name, out)
    # the 3 pairs spread over 3 pairs of processes, each one's medians told, and their mean
    for name in ("ops_per_s", "client_per_op"):
        assert re.search(rf"{name} by process pair: \d+\.\d+ \d+\.\d+ \d+\.\d+\n", out), out
        assert re.search(
            rf"{name} +\d+\.\d+  95 % CI \[\d+\.\d+-\d+\.\d+\]  \(geometric mean of 3 process "
            r"pairs' medians\)",
            out,
        ), (name, out)
    # (the server's CPU is read in clock ticks, 10 ms: a 0.1 s segment may see none, and its pair
    # gives no ratio)
    for side in ("dropin", "peer"):
        assert re.search(
            rf"{side} +[\d,]+ ops/s  client +\d+\.\d µs/op \(user \d+\.\d, system \d+\.\d; "
            rf"\d+\.\d{{3}} sleeps/op\) .* errors 0",
            out,
        ), (side, out)


def test_only_takes_alternatives_separated_by_a_bar() -> None:
    """``--only "A|B"`` picks the contenders whose label holds either text (the tools that
    compare two contenders that share no text, e.g. a drop-in and SQLAlchemy's fair queue)."""
    from peerbench.cli import picked

    dropin = "poolkit.backends.sqlalchemy.AsyncAdaptedQueuePool (as shipped)"
    fair = "SQLAlchemy AsyncAdaptedQueuePool (fair queue)"
    shipped = "SQLAlchemy AsyncAdaptedQueuePool (as shipped)"
    only = "(fair queue)|poolkit.backends.sqlalchemy"
    assert [picked(label, only) for label in (dropin, fair, shipped)] == [True, True, False]
    assert picked(shipped, "QUEUEPOOL (as")  # (one text, case aside: as before)
    assert not picked(shipped, "nothing|")  # (an empty alternative picks nothing)
    assert picked(shipped, None) and picked(shipped, "")
