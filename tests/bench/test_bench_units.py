"""The parts of ``poolkit bench`` that decide: option parsing, the histogram, the
recommendation (no processes, no clock)."""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from poolkit.bench.cli import parser
from poolkit.bench.config import (
    MAX_SWEEP_RUNS,
    SIM_NAMES,
    BenchUsageError,
    RunConfig,
    check_sweep,
    parse_duration,
    parse_schedule,
    parse_sweep,
    parse_target,
)
from poolkit.bench.histogram import Histogram
from poolkit.bench.measure import Tally
from poolkit.bench.report import PointResult, recommend
from poolkit.bench.worker import MAX_BACKOFF, backoff_delay


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2", 2.0), ("1.5", 1.5), ("250ms", 0.25), ("2s", 2.0), ("1m", 60.0), ("50us", 5e-5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1 fortnight", "-1s", "ms", "1e999s"])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(BenchUsageError, match="--x"):
        parse_duration(text, "--x")


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("max_size=1,2,4", (1, 2, 4)),
        ("max_size=1..4", (1, 2, 3, 4)),
        ("max_size=1..64:x2", (1, 2, 4, 8, 16, 32, 64)),
        ("max_size=2..9:3", (2, 5, 8)),
        ("concurrency=8", (8,)),
        ("min-size=0,1", (0, 1)),
    ],
)
def test_sweeps(text: str, values: tuple[int, ...]) -> None:
    assert parse_sweep(text).values == values


@pytest.mark.parametrize(
    "text",
    [
        "max_size",
        "size=1,2",
        "max_size=",
        "max_size=0,1",
        "max_size=4..1",
        "max_size=1..8:x1",
        "max_size=1..1000",
        "max_size=a,b",
    ],
)
def test_bad_sweeps(text: str) -> None:
    with pytest.raises(BenchUsageError, match="--sweep"):
        parse_sweep(text)


@pytest.mark.parametrize(
    "text", ["max_size=1..99999999999", "max_size=1..99999999999999999999999:x2", "max_size=1..65"]
)
def test_a_sweep_makes_at_most_64_runs(text: str) -> None:
    """(Counted before the values are made: 1..99999999999 was a MemoryError.)"""
    with pytest.raises(BenchUsageError, match=r"^--sweep max_size: .*\(at most 64 runs\)$"):
        parse_sweep(text)
    assert len(parse_sweep("max_size=1..64").values) == MAX_SWEEP_RUNS == 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_size=1..99999999:x2", "--sweep max_size=16384: --max-size must be <= 10000"),
        ("max_connecting=1,10001", "--sweep max_connecting=10001: --max-connecting must be <="),
        ("concurrency=1..20000:x2", "--sweep concurrency=16384: --concurrency must be <= 10000"),
        ("min_size=1,11", "--sweep min_size: every value must be <= --max-size"),
    ],
)
def test_every_swept_value_is_within_its_options_bounds(text: str, message: str) -> None:
    """The audit's ``--sweep max_size=1..99999999:x2`` made 27 runs, up to 16,777,216."""
    base = RunConfig(parse_target("sim://"))
    with pytest.raises(BenchUsageError, match=re.escape(message)):
        check_sweep(base, parse_sweep(text))
    check_sweep(base, parse_sweep("max_size=1..8192:x2"))


def test_targets_mask_passwords() -> None:
    target = parse_target("postgresql://app:s3cret@db.example:5432/prod")
    assert target.kind == "postgresql" and "s3cret" in target.url
    assert target.shown == "postgresql://app:***@db.example:5432/prod"
    assert "s3cret" not in repr(RunConfig(target).target.shown)
    assert parse_target("redis://:pw@host:6379/0").shown == "redis://:***@host:6379/0"
    tcp = parse_target("tcp://127.0.0.1:7000")
    assert (tcp.kind, tcp.host, tcp.port) == ("tcp", "127.0.0.1", 7000)


def test_a_tcp_targets_password_is_masked_too() -> None:
    tcp = parse_target("tcp://u:S3cretPW@127.0.0.1:1")
    assert tcp.shown == "tcp://u:***@127.0.0.1:1" and (tcp.host, tcp.port) == ("127.0.0.1", 1)
    with pytest.raises(BenchUsageError, match="HOST:PORT") as caught:
        parse_target("tcp://u:S3cretPW@127.0.0.1")
    assert "S3cretPW" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "port"),
    [
        ("postgresql://u:pw@db:notaport/app", "notaport"),
        ("redis://127.0.0.1:99999/0", "99999"),
        ("tcp://127.0.0.1:-1", "-1"),
        ("mongodb://127.0.0.1:x/", "x"),
    ],
)
def test_a_bad_port_is_the_targets_error(text: str, port: str) -> None:
    with pytest.raises(BenchUsageError, match=f"the port '{port}' is not a number") as caught:
        parse_target(text)
    assert "pw@" not in str(caught.value)


def test_an_unknown_sim_setting_lists_the_documented_names() -> None:
    with pytest.raises(BenchUsageError) as caught:
        parse_target("sim://", {"bogus": "1"})
    listed = str(caught.value).split("known: ", 1)[1].rstrip(")").split(", ")
    assert listed == list(SIM_NAMES)
    assert "goaway_after" in listed and "goaway_after_requests" not in listed
    docs = (Path(__file__).parents[2] / "docs" / "bench.md").read_text()
    table = docs[docs.index("| key | default | meaning |") :].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)?(?: \(`\w+`\))? \|", table, re.M)
    assert sorted(n for pair in documented for n in pair if n) == sorted(SIM_NAMES)
    for name in SIM_NAMES:  # (an alias documented here is accepted too)
        assert name in parser().format_help()


#: a bad value for each documented ``--sim`` key, and the rule its error states
BAD_SIM_VALUES = {
    "service_time": ("uniform:3ms:1ms", "a duration (2ms, 1.5), exp:MEAN or uniform:LO:HI"),
    "handshake": ("1e999", "a duration"),
    "concurrency": ("0", "an integer >= 1, or none (no limit)"),
    "max_connections": ("many", "an integer >= 1, or none (no limit)"),
    "streams": ("0", "an integer >= 1"),
    "drop_requests": ("2", "a fraction from 0 to 1"),
    "drop_connections": ("nan", "a fraction from 0 to 1"),
    "goaway_after": ("0", "an integer >= 1, or none (never)"),
    "seed": ("x", "an integer, or none"),
}
#: SimSettings' own field names, which a documented key's error must not show instead
SIM_FIELDS = ("max_streams", "_fraction", "handshake_latency", "goaway_after_requests")


@pytest.mark.parametrize("key", SIM_NAMES)
def test_a_bad_sim_value_names_the_documented_key_and_the_rule(key: str) -> None:
    value, rule = BAD_SIM_VALUES[key]
    for source in ({key: value}, None):  # (--sim, then the sim:// query)
        text = "sim://" if source else f"sim://?{key}={value}"
        with pytest.raises(BenchUsageError) as caught:
            parse_target(text, source)
        message = str(caught.value)
        assert message.startswith(f"sim setting {key}: {value!r} is not {rule}"), message
        assert "\n" not in message and not any(field in message for field in SIM_FIELDS)


def test_a_bad_sim_value_under_an_alias_names_both() -> None:
    with pytest.raises(BenchUsageError, match=r"^sim setting max_streams \(streams\): 'none' "):
        parse_target("sim://", {"max_streams": "none"})


def test_sim_settings_from_the_query_and_from_options() -> None:
    target = parse_target("sim://?service_time=2ms&concurrency=4", {"streams": "8"})
    assert target.sim is not None
    assert target.sim.service_time == pytest.approx(0.002)
    assert (target.sim.concurrency, target.sim.max_streams) == (4, 8)
    assert target.sim.max_connections == 100  # (a default kept)
    exp = parse_target("sim://?service_time=exp:1ms&concurrency=none").sim
    assert exp is not None and exp.service_time == ("exp", 0.001) and exp.concurrency is None
    with pytest.raises(BenchUsageError, match="--sim"):
        parse_target("redis://h", {"streams": "2"})


def test_run_config_rules() -> None:
    base = RunConfig(parse_target("sim://"))
    base.check()
    for change, option in [
        ({"concurrency": 0}, "--concurrency"),
        ({"concurrency": 99999999999}, "--concurrency must be <= 10000"),
        ({"concurrency": 1001, "threads": True}, "--concurrency must be <= 1000 with --threads"),
        ({"payload": 999999999999}, "--payload must be <= 16777216"),
        ({"max_size": 0}, "--max-size"),
        ({"max_size": 10_001}, "--max-size must be <= 10000"),
        ({"max_connecting": 10_001}, "--max-connecting must be <= 10000"),
        ({"min_size": 11}, "--min-size"),
        ({"ops": 1, "processes": 2}, "--ops"),
        ({"driver": "asyncpg"}, "--driver"),
    ]:
        with pytest.raises(BenchUsageError, match=option):
            RunConfig(base.target, **change).check()  # type: ignore[arg-type]


@given(st.lists(st.floats(min_value=1e-6, max_value=10.0), min_size=1, max_size=300))
def test_histogram_quantiles_are_within_a_bucket(values: list[float]) -> None:
    h = Histogram()
    for v in values:
        h.record(v)
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.99):
        exact = ordered[max(0, math.ceil(q * len(values)) - 1)]
        assert h.quantile(q) == pytest.approx(exact, rel=0.011)
    assert (h.min, h.max, h.count) == (ordered[0], ordered[-1], len(values))
    assert h.quantile(1.0) == ordered[-1]


@given(
    st.lists(st.floats(min_value=1e-6, max_value=1.0), max_size=50),
    st.lists(st.floats(min_value=1e-6, max_value=1.0), max_size=50),
)
def test_histograms_merge_as_if_recorded_together(a: list[float], b: list[float]) -> None:
    one, two, both = Histogram(), Histogram(), Histogram()
    for v in a:
        one.record(v)
        both.record(v)
    for v in b:
        two.record(v)
        both.record(v)
    one.merge(pickle.loads(pickle.dumps(two)))  # (as from a worker process)
    assert one.buckets == both.buckets and one.count == both.count
    assert one.quantile(0.99) == both.quantile(0.99)


def point(
    size: int,
    throughput: float,
    errors: int = 0,
    wait_ms: float = 0.0,
    held_ms: float = 0.0,
    peak: int | None = None,
    min_size: int = 0,
) -> PointResult:
    """A run of ``size`` (32 tasks) with this throughput; every operation waited ``wait_ms``
    for its connection and held it ``held_ms`` (none recorded when both are 0); its pool
    peaked at ``peak`` connections (default: it filled up, to at most its 32 tasks)."""
    peak = min(size, 32) if peak is None else peak
    tally = Tally(ops=int(throughput))
    if errors:
        tally.errors["WaitQueueTimeoutError"] = errors
    if wait_ms or held_ms:
        for _ in range(100):
            tally.wait.record(wait_ms / 1e3)
            tally.latency.record(held_ms / 1e3)
    return PointResult(
        max_size=size,
        min_size=min_size,
        max_connecting=2,
        concurrency=32,
        processes=1,
        seconds=1.0,
        tally=tally,
        client_connections_peak=peak,
        pool_peak=peak,
        server_connections_peak=peak,
        connections_created=peak,
        left_open=0,
        server_left_open=0,
        interrupted=False,
    )


def test_the_recommendation_is_the_smallest_within_five_percent() -> None:
    points = [point(1, 900), point(2, 1800), point(4, 3500), point(8, 3900), point(16, 4000)]
    rec = recommend("max_size", points)
    assert rec is not None
    assert (rec.value, rec.best_value) == (8, 16)  # 3,900 is 97.5 % of 4,000; 3,500 is 87.5 %
    assert "smallest value within 5%" in rec.reason and "max_size=16" in rec.reason


def test_runs_with_errors_are_not_recommended() -> None:
    points = [point(1, 1000, errors=500), point(2, 990)]
    rec = recommend("max_size", points)
    assert rec is not None and rec.value == 2 and "errors were left out" in rec.reason


def test_no_recommendation_without_a_finished_run() -> None:
    assert recommend("max_size", []) is None
    assert recommend("max_size", [point(1, 0)]) is None


def test_a_task_backs_off_after_failures_in_a_row() -> None:
    assert backoff_delay(0) == backoff_delay(1) == 0  # one operation's error: no pause
    delays = [backoff_delay(n) for n in range(2, 12)]
    assert delays[:3] == [0.001, 0.002, 0.004]
    assert delays == sorted(delays)
    assert backoff_delay(10**9) == MAX_BACKOFF == 0.25  # (no overflow after many)


def test_a_size_whose_callers_queue_in_the_pool_is_not_recommended() -> None:
    """The issue's Redis sweep: every size within 5 % of the best throughput (the client is the
    limit), but at 1 connection each caller waits 2.7 ms for 0.09 ms of use."""
    points = [
        point(1, 10_000, wait_ms=2.7, held_ms=0.09),
        point(2, 10_100, wait_ms=1.3, held_ms=0.18),
        point(4, 9_900, wait_ms=0.6, held_ms=0.35),
        point(8, 10_050, wait_ms=0.3, held_ms=0.7),
        point(16, 10_200, wait_ms=0.08, held_ms=1.4),
        point(32, 10_000, wait_ms=0.01, held_ms=2.7),
    ]
    rec = recommend("max_size", points)
    assert rec is not None and rec.value == 8
    assert "wait no longer for a connection than they hold one" in rec.reason
    assert "max_size=1 reaches that throughput too, but its callers queue" in rec.reason
    assert "adds no throughput" in rec.reason


def test_when_every_fast_size_queues_the_least_waiting_is_recommended() -> None:
    points = [
        point(1, 3_000, wait_ms=9.0, held_ms=1.0),
        point(2, 3_050, wait_ms=4.0, held_ms=1.0),
        point(4, 3_020, wait_ms=2.0, held_ms=1.0),
    ]
    rec = recommend("max_size", points)
    assert rec is not None and rec.value == 4 and "try larger values" in rec.reason


def test_a_wait_under_the_floor_never_counts() -> None:
    """(A pool's own hand-off costs some microseconds: 50 us of wait for 10 us of use is fine.)"""
    points = [point(1, 5_000, wait_ms=0.05, held_ms=0.01), point(2, 5_100)]
    rec = recommend("max_size", points)
    assert rec is not None and rec.value == 1


def test_sizes_above_the_tasks_are_one_pool_and_never_recommended() -> None:
    """The audit's sweep, max_size=1..16777216:x2 with 32 tasks: every size from 32 up peaked
    at 32 connections, and one of them (noise) had the best throughput by more than 5 %."""
    sizes = [2**k for k in range(25)]
    points = [
        point(
            n,
            10_000 if n == 16_777_216 else 9_000 if n >= 32 else 250 * n,
            wait_ms=0.01 if n >= 32 else 4.0,
            held_ms=1.0,
        )
        for n in sizes
    ]
    assert all(p.pool_peak == 32 for p in points if p.max_size >= 32)
    rec = recommend("max_size", points)
    assert rec is not None and (rec.value, rec.best_value) == (32, 32)
    assert "a pool has no more connections in use than its 32 tasks (--concurrency)" in rec.reason
    assert "the runs at max_size=64 to 16777216 (which peaked at 32 connections" in rec.reason
    assert "no value above 32 is recommended" in rec.reason
    alone = recommend("max_size", [point(8, 1_000, wait_ms=3.0, held_ms=1.0), points[-1]])
    assert alone is not None and alone.value == 32  # (not a value swept: it is the same pool)


def test_sizes_above_the_connections_a_pool_used_are_one_pool() -> None:
    """Multiplexed connections: 32 tasks need only 8. The runs at 16 and 64 never filled their
    pool (8 connections): 8 and up are the same pool."""
    points = [
        point(4, 5_000, wait_ms=2.0, held_ms=1.0),
        point(8, 9_000, wait_ms=0.01, held_ms=1.0),
        point(16, 9_100, wait_ms=0.01, held_ms=1.0, peak=8),
        point(64, 9_900, wait_ms=0.01, held_ms=1.0, peak=8),
    ]
    rec = recommend("max_size", points)
    assert rec is not None and (rec.value, rec.best_value) == (8, 8)
    assert "than the 8 it had at most when its limit did not hold it back" in rec.reason
    assert "the runs at max_size=16, 64 (which peaked at 8 connections" in rec.reason


def test_at_the_ceiling_a_queue_is_not_cured_by_larger_values() -> None:
    """(Every caller waits for its connection even when each has one: the pool cannot help.)"""
    points = [point(n, 3_000, wait_ms=2.0 if n >= 32 else 4.0, held_ms=1.0) for n in (16, 32, 64)]
    rec = recommend("max_size", points)
    assert rec is not None and rec.value == 32 and "try larger values" not in rec.reason
    kept = [point(n, 3_000, min_size=40) for n in (40, 64, 128)]
    rec = recommend("max_size", kept)
    assert rec is not None and rec.value == 40 and "its min_size, 40" in rec.reason


def test_sim_schedule_parses_changes_in_time_order() -> None:
    changes = parse_schedule("20s:cores=8 10s:cores=4,service=exp:5ms; 30s:drop_requests=0.1")
    assert [change.at for change in changes] == [10.0, 20.0, 30.0]
    assert (changes[0].concurrency, changes[0].service_time) == (4, ("exp", 0.005))
    assert changes[1].concurrency == 8 and changes[1].service_time is None
    assert changes[2].drop_request_fraction == 0.1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no change given"),
        ("10s", "AT:KEY=VALUE"),
        ("soon:cores=4", "not a duration"),
        ("10s:cores=0", "an integer >= 1"),
        ("10s:cores=none", "cannot lift the limit"),
        ("10s:colour=blue", "KEY one of concurrency"),
        ("10s:drop_requests=2", "a fraction from 0 to 1"),
    ],
)
def test_sim_schedule_refuses_what_it_cannot_do(text: str, says: str) -> None:
    with pytest.raises(BenchUsageError, match=says):
        parse_schedule(text)


def test_a_histogram_since_an_earlier_copy_holds_what_came_after() -> None:
    """The timeline's intervals: what was recorded after the copy, within a bucket's width."""
    h = Histogram()
    for v in (0.001, 0.002, 0.004):
        h.record(v)
    earlier = h.copy()
    for v in (0.010, 0.020, 0.020, 0.030):
        h.record(v)
    later = h.since(earlier)
    assert later.count == 4 and later.total == pytest.approx(0.080)
    assert later.min == pytest.approx(0.010, rel=0.011) and later.min <= 0.010
    assert later.max == pytest.approx(0.030, rel=0.011) and later.max <= h.max
    assert later.quantile(0.5) == pytest.approx(0.020, rel=0.011)
    assert h.since(h.copy()).count == 0 and h.since(h.copy()).max == 0.0
