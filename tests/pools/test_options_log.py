"""PoolOptions validation and CMAP names; the CMAP log messages."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import poolkit
from frontends import Front, drive
from poolkit import events as ev
from poolkit.log import build, split_address


def test_defaults_are_cmap_defaults() -> None:
    opts = poolkit.PoolOptions()
    assert (opts.max_size, opts.min_size, opts.max_idle_time, opts.max_connecting) == (
        100,
        0,
        None,
        2,
    )
    assert opts.wait_queue_timeout is None
    assert opts.cmap_options() == {}


def test_timedelta_and_cmap_names() -> None:
    opts = poolkit.PoolOptions(
        max_size=50,
        min_size=5,
        max_idle_time=timedelta(milliseconds=100),
        background_interval=math.inf,
    )
    assert opts.max_idle_time == 0.1
    assert opts.cmap_options() == {
        "maxPoolSize": 50,
        "minPoolSize": 5,
        "maxIdleTimeMS": 100,
        "backgroundThreadIntervalMS": -1,
    }


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"max_size": -1}, ValueError, "max_size must be an integer >= 0"),
        ({"max_size": 1.5}, TypeError, "max_size must be an int"),
        ({"max_size": True}, TypeError, "max_size must be an int"),
        ({"min_size": 5, "max_size": 2}, ValueError, "min_size (5) must be <= max_size (2)"),
        ({"max_connecting": 0}, ValueError, "max_connecting must be an integer >= 1"),
        ({"max_idle_time": 0}, ValueError, "max_idle_time must be > 0 seconds or None"),
        ({"max_idle_time": -1}, ValueError, "max_idle_time"),
        (
            {"max_idle_time": math.nan},
            ValueError,
            "max_idle_time must be a number of seconds, not NaN",
        ),
        ({"max_idle_time": "10"}, TypeError, "max_idle_time must be seconds"),
        ({"wait_queue_timeout": -0.5}, ValueError, "wait_queue_timeout must be > 0 seconds"),
        ({"wait_queue_timeout": math.inf}, ValueError, "wait_queue_timeout must be finite"),
        ({"background_interval": 0}, ValueError, "background_interval must be > 0 seconds"),
        (
            {"background_interval": None},
            TypeError,
            "background_interval must be a number of seconds",
        ),
        ({"connect_timeout": 0}, ValueError, "connect_timeout must be > 0"),
        ({"load_balanced": 1}, TypeError, "load_balanced must be a bool"),
        ({"warn_connects_failing": None}, TypeError, "warn_connects_failing must be a bool"),
    ],
)
def test_invalid_values_name_option_and_rule(
    kwargs: dict[str, Any], error: type, words: str
) -> None:
    with pytest.raises(error) as info:
        poolkit.PoolOptions(**kwargs)
    assert words in str(info.value)
    assert "PoolOptions." in str(info.value)


def test_zero_max_size_means_no_limit() -> None:
    assert poolkit.PoolOptions(max_size=0, min_size=500).min_size == 500


def test_options_are_frozen() -> None:
    opts = poolkit.PoolOptions()
    with pytest.raises(AttributeError):
        opts.max_size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("db.example:27018", "db.example", 27018),
        ("[::1]:27019", "::1", 27019),
        ("/tmp/mongodb-27017.sock", "/tmp/mongodb-27017.sock", None),
        # Issue 24, defect 11: no port is no port (it was MongoDB's 27017 for every pool), and
        # a URL's scheme, user and path are not the host or the port
        ("db.example", "db.example", None),
        ("pool-3", "pool-3", None),
        ("redis://127.0.0.1:6379/0", "127.0.0.1", 6379),
        ("redis://bob:***@cache.example:6380/2?x=1", "cache.example", 6380),
        ("postgresql://app:***@db.example:5433/app", "db.example", 5433),
        ("postgresql://db.example/app", "db.example", None),
        ("tcp://[::1]:7000", "::1", 7000),
        ("127.0.0.1/test", "127.0.0.1", None),
        ("db.example:5433/test", "db.example", 5433),
        ("[::1]:5432/test", "::1", 5432),
        ("a.example:5432,b.example:5433/test", "a.example", 5432),
        ("user:***@db.example:5433", "db.example", 5433),
        ("::1", "::1", None),
    ],
)
def test_split_address(address: str, host: str, port: int | None) -> None:
    assert split_address(address) == (host, port)


def test_log_messages_match_the_spec_text() -> None:
    a = "h:1"
    cases = [
        (
            ev.PoolCreatedEvent(address=a, options={"maxPoolSize": 5, "minPoolSize": 1}),
            "Connection pool created",
            "Connection pool created for h:1 using options minPoolSize=1, maxPoolSize=5",
        ),
        (ev.PoolReadyEvent(address=a), "Connection pool ready", "Connection pool ready for h:1"),
        (ev.PoolClosedEvent(address=a), "Connection pool closed", "Connection pool closed for h:1"),
        (
            ev.ConnectionCreatedEvent(address=a, connection_id=3),
            "Connection created",
            "Connection created: address=h:1, driver-generated ID=3",
        ),
        (
            ev.ConnectionReadyEvent(address=a, connection_id=3, duration=0.25),
            "Connection ready",
            "Connection ready: address=h:1, driver-generated ID=3, established in=250.0 ms",
        ),
        (
            ev.ConnectionClosedEvent(address=a, connection_id=3, reason="idle"),
            "Connection closed",
            "Connection closed: address=h:1, driver-generated ID=3. Reason: Connection has been "
            "available but unused for longer than the configured max idle time. Error: None",
        ),
        (
            ev.ConnectionCheckOutStartedEvent(address=a),
            "Connection checkout started",
            "Checkout started for connection to h:1",
        ),
        (
            ev.ConnectionCheckOutFailedEvent(address=a, reason="timeout", duration=1.0),
            "Connection checkout failed",
            "Checkout failed for connection to h:1. Reason: Wait queue timeout elapsed without a "
            "connection becoming available. Error: None. Duration: 1000.0 ms",
        ),
        (
            ev.ConnectionCheckedOutEvent(address=a, connection_id=3, duration=0.001),
            "Connection checked out",
            "Connection checked out: address=h:1, driver-generated ID=3, duration=1.0 ms",
        ),
        (
            ev.ConnectionCheckedInEvent(address=a, connection_id=3),
            "Connection checked in",
            "Connection checked in: address=h:1, driver-generated ID=3",
        ),
    ]
    for event, message, text in cases:
        msg = build(event)
        assert msg.fields["message"] == message
        assert msg.fields["serverHost"] == "h" and msg.fields["serverPort"] == 1
        assert str(msg) == text


def test_pool_logs_cmap_messages_only_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    pool: poolkit.Pool[object] = poolkit.Pool(lambda ctx: object(), address="db:27017")
    assert caplog.records == []  # DEBUG is off: nothing built, nothing logged
    with caplog.at_level(logging.DEBUG, logger="poolkit.connection"):
        pool.ready()
        pool.checkout().release()
    # (the ignores: `cmap` is set on each record by the logger's extra=)
    messages = [r.cmap["message"] for r in caplog.records if r.name == "poolkit.connection"]  # type: ignore[attr-defined]
    assert messages == [
        "Connection pool ready",
        "Connection checkout started",
        "Connection created",
        "Connection ready",
        "Connection checked out",
        "Connection checked in",
    ]
    record = caplog.records[4]
    assert record.cmap["driverConnectionId"] == 1 and "durationMS" in record.cmap  # type: ignore[attr-defined]
    pool.close()


def _probe(connection: Any) -> None:  # pragma: no cover - never called
    pass


# (the ignores below: wrong types on purpose)
@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: poolkit.KeepAlive(0, _probe), ValueError, "KeepAlive.interval must be > 0"),
        (lambda: poolkit.KeepAlive(1, "ping"), TypeError, "KeepAlive.probe must be a function"),  # type: ignore[arg-type]
        (lambda: poolkit.KeepAlive(1, _probe, timeout=-1), ValueError, "KeepAlive.timeout"),
        (lambda: poolkit.Backoff(base=0), ValueError, "Backoff.base must be > 0"),
        (lambda: poolkit.Backoff(factor=0.5), ValueError, "Backoff.factor must be"),
        (lambda: poolkit.Backoff(max_delay=0.05), ValueError, "Backoff.max_delay (0.05) must be"),
        (lambda: poolkit.Backoff(jitter=0.9), ValueError, "Backoff.jitter must be a fraction"),
        (
            lambda: poolkit.Backoff(circuit_breaker_after=-1),
            ValueError,
            "Backoff.circuit_breaker_after",
        ),
        (lambda: poolkit.PoolOptions(keep_alive=5), TypeError, "PoolOptions.keep_alive must be"),  # type: ignore[arg-type]
        (
            lambda: poolkit.PoolOptions(connect_retry=True),  # type: ignore[arg-type]
            TypeError,
            "PoolOptions.connect_retry must be",
        ),
        (lambda: poolkit.PoolOptions(leak_timeout=0), ValueError, "PoolOptions.leak_timeout"),
    ],
)
def test_invalid_health_options_name_option_and_rule(make: Any, error: type, words: str) -> None:
    with pytest.raises(error) as info:
        make()
    assert words in str(info.value)


def test_backoff_delay_is_the_formula_capped_with_jitter_either_way() -> None:
    backoff = poolkit.Backoff()
    assert backoff.delay(1) == pytest.approx(0.1)
    assert backoff.delay(5) == pytest.approx(0.1 * 1.25**4)
    assert backoff.delay(29) == pytest.approx(0.1 * 1.25**28)  # 51.7 s
    assert backoff.delay(30) == 60.0 and backoff.delay(10**9) == 60.0  # capped
    assert backoff.delay(1, rand=0.0) == pytest.approx(0.097)
    assert backoff.delay(1, rand=1.0) == pytest.approx(0.103)


def test_poolkit_events_log_their_fields() -> None:
    event = ev.ConnectAttemptFailedEvent(
        address="db:27017", connection_id=3, error=OSError("refused"), failures=2, retry_in=0.125
    )
    message = build(event)
    assert message.fields["message"] == "ConnectAttemptFailedEvent"
    assert message.fields["driverConnectionId"] == 3
    assert message.fields["failures"] == 2 and message.fields["retry_in"] == 0.125
    assert "failures=2" in str(message) and "retry_in=0.125" in str(message)
    leak = build(
        ev.LeaseLeakedEvent(address="h:1", connection_id=1, held=2, stack="s", collected=False)
    )
    assert "stack" not in leak.fields  # in the warning, not in every debug line


def test_a_leak_is_a_warning_even_with_debug_off(caplog: pytest.LogCaptureFixture) -> None:
    from poolkit.log import log_event

    event = ev.LeaseLeakedEvent(
        address="h:1", connection_id=7, held=3.5, stack='  File "app.py", line 9\n', collected=False
    )
    with caplog.at_level(logging.WARNING, logger="poolkit"):
        log_event(event)
    (record,) = caplog.records
    assert record.name == "poolkit.pool" and record.levelno == logging.WARNING
    assert "connection 7 of h:1 has been out for 3.500 s" in record.getMessage()
    assert 'File "app.py", line 9' in record.getMessage()


# ------------------------------------------- every invalid value: named option and rule


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"soft_max_size": 5, "min_size": "x"}, TypeError, "PoolOptions.min_size must be an int"),
        ({"soft_max_size": 5, "max_size": "3"}, TypeError, "PoolOptions.max_size must be an int"),
        ({"soft_max_size": 5, "min_size": None}, TypeError, "PoolOptions.min_size must be an int"),
        ({"soft_max_size": 5, "min_size": 2.0}, TypeError, "PoolOptions.min_size must be an int"),
        ({"soft_max_size": 5, "max_size": True}, TypeError, "PoolOptions.max_size must be an int"),
        ({"soft_max_size": "5", "min_size": 2}, TypeError, "PoolOptions.soft_max_size must be"),
        ({"soft_max_size": 5, "min_size": -1}, ValueError, "PoolOptions.min_size must be"),
        (
            {"soft_max_size": 1, "min_size": 2, "max_size": 3},
            ValueError,
            "PoolOptions.soft_max_size (1) must be >= min_size (2) and <= max_size (3)",
        ),
        ({"min_size": "1", "max_size": 0}, TypeError, "PoolOptions.min_size must be an int"),
        ({"max_idle_time": 10**400}, ValueError, "PoolOptions.max_idle_time must be finite"),
        ({"max_idle_time": -(10**400)}, ValueError, "PoolOptions.max_idle_time must be > 0"),
        ({"max_lifetime_jitter": math.nan}, ValueError, "max_lifetime_jitter must be a fraction"),
        ({"max_lifetime_jitter": True}, TypeError, "max_lifetime_jitter must be a float"),
        ({"max_waiting": True}, TypeError, "PoolOptions.max_waiting must be an int"),
        ({"leak_timeout": math.inf}, ValueError, "PoolOptions.leak_timeout must be finite"),
        ({"background_interval": -math.inf}, ValueError, "background_interval must be > 0"),
        (
            {"wait_queue_timeout": timedelta(seconds=-1)},
            ValueError,
            "PoolOptions.wait_queue_timeout must be > 0 seconds",
        ),
    ],
)
def test_each_value_is_checked_before_options_are_compared(
    kwargs: dict[str, Any], error: type, words: str
) -> None:
    with pytest.raises(error) as info:
        poolkit.PoolOptions(**kwargs)
    assert words in str(info.value)
    assert type(info.value) is error  # not an internal error that happens to be a TypeError


def test_a_huge_background_interval_is_never() -> None:
    assert poolkit.PoolOptions(background_interval=10**400).background_interval == math.inf


# (the ignores below: wrong types on purpose)
@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: poolkit.KeepAlive(math.inf, _probe), ValueError, "KeepAlive.interval must be"),
        (lambda: poolkit.KeepAlive(None, _probe), TypeError, "KeepAlive.interval must be"),  # type: ignore[arg-type]
        (lambda: poolkit.KeepAlive(math.nan, _probe), ValueError, "KeepAlive.interval must be"),
        (lambda: poolkit.KeepAlive(True, _probe), TypeError, "KeepAlive.interval must be"),
        (lambda: poolkit.KeepAlive(1, _probe, timeout=math.inf), ValueError, "KeepAlive.timeout"),
        (lambda: poolkit.Backoff(base=math.inf), ValueError, "Backoff.base must be"),
        (lambda: poolkit.Backoff(max_delay=math.inf), ValueError, "Backoff.max_delay must be"),
        (lambda: poolkit.Backoff(max_delay=None), TypeError, "Backoff.max_delay must be"),  # type: ignore[arg-type]
        (lambda: poolkit.Backoff(factor=10**400), ValueError, "Backoff.factor must be"),
        (lambda: poolkit.Backoff(factor=math.nan), ValueError, "Backoff.factor must be"),
        (lambda: poolkit.Backoff(base="1", max_delay=0.5), TypeError, "Backoff.base must be"),  # type: ignore[arg-type]
        (
            lambda: poolkit.Backoff(circuit_breaker_after=math.inf),
            ValueError,
            "Backoff.circuit_breaker_after must be",
        ),
    ],
)
def test_health_options_name_option_and_rule_for_every_value(
    make: Any, error: type, words: str
) -> None:
    with pytest.raises(error) as info:
        make()
    assert type(info.value) is error and words in str(info.value)


#: each is called with any value, bad ones (None, inf) included
_DURATIONS: list[tuple[str, Callable[[Any], object]]] = [
    *(
        (f"PoolOptions.{name}", lambda v, name=name: poolkit.PoolOptions(**{name: v}))
        for name in (
            "max_idle_time",
            "wait_queue_timeout",
            "connect_timeout",
            "max_lifetime",
            "leak_timeout",
        )
    ),
    ("KeepAlive.interval", lambda v: poolkit.KeepAlive(v, _probe)),
    ("KeepAlive.timeout", lambda v: poolkit.KeepAlive(1, _probe, timeout=v)),
    ("Backoff.base", lambda v: poolkit.Backoff(base=v)),
    ("Backoff.max_delay", lambda v: poolkit.Backoff(max_delay=v)),
    ("Backoff.circuit_breaker_after", lambda v: poolkit.Backoff(circuit_breaker_after=v)),
]


@pytest.mark.parametrize(("name", "make"), _DURATIONS, ids=[n for n, _ in _DURATIONS])
def test_an_infinite_duration_is_refused_by_a_rule_that_holds(
    name: str, make: Callable[[Any], object]
) -> None:
    """Each message that rejects ``inf`` states the rule: finite seconds, and None only where
    None is accepted."""
    with pytest.raises(ValueError, match="must be finite") as info:
        make(math.inf)
    message = str(info.value)
    assert message.startswith(name)
    _, refused = _build(lambda: make(None))
    assert ("None" in message) == (refused is None), (message, refused)


def _build(make: Callable[[], Any]) -> tuple[Any, str | None]:
    """What ``make()`` returns, or the message of the ValueError / TypeError it raises."""
    try:
        return make(), None
    except (TypeError, ValueError) as exc:
        return None, str(exc)


_FIELDS = [f.name for f in dataclasses.fields(poolkit.PoolOptions)]
_ANY_VALUE = st.one_of(
    st.integers(),
    st.sampled_from([10**400, -(10**400), 0, 1, -1]),
    st.text(max_size=3),
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.timedeltas(),
    st.just(poolkit.KeepAlive(1.0, _probe)),
    st.just(poolkit.Backoff()),
)


@settings(derandomize=True, database=None, max_examples=1000, deadline=None)
@given(st.dictionaries(st.sampled_from(_FIELDS), _ANY_VALUE))
def test_any_values_make_options_or_an_error_naming_one_of_them(kwargs: dict[str, Any]) -> None:
    options, message = _build(lambda: poolkit.PoolOptions(**kwargs))
    if message is not None:
        assert any(f"PoolOptions.{name} " in message for name in kwargs), message
        return
    assert dataclasses.replace(options) == options  # what was accepted is accepted again
    if options.max_size:
        assert options.min_size <= options.soft_limit <= options.max_size


@settings(derandomize=True, database=None, max_examples=500, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["base", "factor", "max_delay", "jitter", "circuit_breaker_after"]),
        _ANY_VALUE,
    )
)
def test_any_values_make_a_backoff_or_an_error_naming_one_of_them(kwargs: dict[str, Any]) -> None:
    backoff, message = _build(lambda: poolkit.Backoff(**kwargs))
    if message is not None:
        assert any(f"Backoff.{name} " in message for name in kwargs), message
        return
    assert 0 < backoff.base <= backoff.max_delay < math.inf
    assert 1 <= backoff.factor < math.inf


@settings(derandomize=True, database=None, max_examples=300, deadline=None)
@given(_ANY_VALUE, st.one_of(_ANY_VALUE, st.just(_probe)), _ANY_VALUE)
def test_any_values_make_a_keep_alive_or_an_error_naming_one_of_them(
    interval: Any, probe: Any, timeout: Any
) -> None:
    keep_alive, message = _build(lambda: poolkit.KeepAlive(interval, probe, timeout))
    if message is not None:
        assert message.startswith(("KeepAlive.interval ", "KeepAlive.probe ", "KeepAlive.timeout "))
        return
    assert 0 < keep_alive.interval < math.inf


def test_a_pool_without_an_address_is_named_not_localhost() -> None:
    # Issue 24, defect 11: a pool built without address= reported "localhost" (and logged it as
    # localhost:27017); it is pool-N now, as psycopg_pool names its pools.
    first = poolkit.Pool(lambda ctx: object())
    second = poolkit.Pool(lambda ctx: object())
    n = int(first.address.removeprefix("pool-"))
    assert second.address == f"pool-{n + 1}"
    assert split_address(first.address) == (first.address, None)
    first.close()
    second.close()


@pytest.mark.parametrize("front", ["asyncio", "threads"])
def test_a_wait_queue_timeout_says_where_how_long_and_how_full(front: str) -> None:
    # Issue 24, defect 12: the error named no pool, wait or size. The CMAP sentence stays the
    # message (the spec tests compare it); the rest is a note under the traceback.
    async def scenario(f: Front) -> None:
        held = await f.lease()
        waiter = f.start(timeout=0.25)
        await f.advance(0.3)
        error = waiter.error
        assert isinstance(error, poolkit.WaitQueueTimeoutError)
        assert str(error) == "Timed out while checking out a connection from connection pool"
        (note,) = error.__notes__
        assert note.startswith("poolkit: no connection to db:1 after waiting 0.250 s: max_size=1")
        assert "1 in use, 0 available, 0 being made" in note
        assert "at its limit" in note
        held.release()

    drive(front, scenario, max_size=1)
