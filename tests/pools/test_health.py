"""Keep-alive probes, connect retries with backoff and the circuit breaker: the generic pool's
scenarios, each run on both front ends with time driven by a fake clock."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, cast

import pytest

import poolkit
from doubles import Conn
from frontends import Front, drive
from poolkit import events as ev
from poolkit.testing import FakeClock, run


def _poolkit_frames(stack: str) -> list[str]:
    """The files of ``stack``'s frames that are poolkit's own modules (wherever it is cloned)."""
    package = {
        os.path.abspath(module.__file__)
        for name, module in list(sys.modules.items())
        if (name == "poolkit" or name.startswith("poolkit.")) and module.__file__
    }
    files = re.findall(r'^  File "(.+)", line \d+', stack, re.MULTILINE)
    assert files, stack
    return [file for file in files if os.path.abspath(file) in package]


def _replaced(connection: Any) -> None:  # pragma: no cover - the front end puts its own probe
    raise AssertionError("the test front end replaces this probe")


def keep_alive(interval: float, timeout: float | None = None) -> poolkit.KeepAlive:
    return poolkit.KeepAlive(interval, _replaced, timeout)


# ---------------------------------------------------------------------- keep-alive


def test_idle_connections_are_probed_at_exact_instants(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        t0 = f.now()
        assert f.pool.stats().total == 2
        await f.advance(9.999)
        assert f.probes == []
        await f.advance(0.001)
        assert sorted(f.probes) == [(t0 + 10, 1), (t0 + 10, 2)]
        succeeded = [e.connection_id for e in f.of(ev.KeepAliveSucceededEvent)]
        # (trio runs the tasks made ready together in an order of its own)
        assert (sorted(succeeded) if f.name == "trio" else succeeded) == [1, 2]
        await f.advance(5)
        lease = await f.lease()  # leased: not probed while out
        await f.advance(5)
        assert f.probes[2:] == [(t0 + 20, 3 - lease.connection_id)]
        await f.advance(2)
        lease.release()  # parked at 22: next probe one interval later
        await f.advance(7.9)
        assert len(f.probes) == 3
        await f.advance(0.1)
        assert f.probes[3:] == [(t0 + 30, 3 - lease.connection_id)]
        await f.advance(1.9)
        assert len(f.probes) == 4
        await f.advance(0.1)
        assert f.probes[4:] == [(t0 + 32, lease.connection_id)]
        assert f.close_reasons() == {}

    drive(front_kind, scenario, min_size=2, max_size=2, keep_alive=keep_alive(10))


def test_failed_probe_closes_and_min_size_is_refilled(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        t0 = f.now()
        f.probe_errors.append(ConnectionResetError("gone"))
        await f.advance(10)
        assert f.close_reasons() == {1: "error"}
        (failed,) = f.of(ev.KeepAliveFailedEvent)
        assert failed.connection_id == 1 and isinstance(failed.error, ConnectionResetError)
        assert f.pool.stats().total == 1 and f.created() == 2  # the replacement
        await f.advance(10)
        assert f.probes == [(t0 + 10, 1), (t0 + 20, 2)]
        assert f.close_reasons() == {1: "error"}

    drive(front_kind, scenario, min_size=1, max_size=3, keep_alive=keep_alive(10))


def test_a_probe_holds_the_connection_a_lease_waits_or_takes_another(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.probe_delay = 5.0
        first = await f.lease()  # connection 1, made on demand
        first.release()
        await f.advance(11)  # probe of 1 runs from 10 to 15
        assert f.pool.stats().in_use == 1
        other = await f.lease()  # max_size 2: another connection, made for it
        assert other.connection_id == 2
        waiting = f.start()  # the pool is full: waits for the probe
        await f.settle()
        assert not waiting.done
        await f.advance(4)
        # (the cast: mypy keeps `waiting.done` narrowed to False by the assert above)
        assert (
            cast(bool, waiting.done)
            and waiting.lease is not None
            and waiting.lease.connection_id == 1
        )
        waiting.lease.release()
        other.release()

    drive(front_kind, scenario, max_size=2, keep_alive=keep_alive(10))


def test_idle_timer_firing_while_a_request_waits_is_rescheduled(front_kind: str) -> None:
    # PostgresNIO's race: soft = hard = 1, keep-alive running, a lease queued, the idle timer
    # fires: the connection is not closed; when the probe ends the queued lease gets it.
    async def scenario(f: Front) -> None:
        f.probe_delay = 5.0
        lease = await f.lease()
        lease.release()
        await f.advance(11)  # probe from 10 to 15
        waiting = f.start()
        await f.advance(2)  # 13: past the 12 s idle deadline
        assert not waiting.done and f.close_reasons() == {}
        await f.advance(2)  # 15: the probe returns
        # (the cast: mypy keeps `waiting.done` narrowed to False by the assert above)
        assert (
            cast(bool, waiting.done)
            and waiting.lease is not None
            and waiting.lease.connection_id == 1
        )
        assert f.close_reasons() == {}
        waiting.lease.release()  # idle since 15 now: closes at 27
        f.probe_delay = 0.0
        await f.advance(11.9)
        assert f.probes[-1] == (f.now() - 1.9, 1)  # probed at 25: a probe is not use
        assert f.close_reasons() == {}
        await f.advance(0.1)
        assert f.close_reasons() == {1: "idle"}

    drive(front_kind, scenario, max_size=1, max_idle_time=12, keep_alive=keep_alive(10))


def test_a_probe_takes_one_stream_of_a_multiplexed_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.probe_delay = 5.0
        (await f.lease()).release()
        await f.advance(11)  # probe from 10 to 15 on one of the two streams
        lease = await f.lease()
        assert lease.connection_id == 1
        waiting = f.start()  # both streams taken
        await f.settle()
        assert not waiting.done
        await f.advance(4)
        # (the cast: mypy keeps `waiting.done` narrowed to False by the assert above)
        assert (
            cast(bool, waiting.done)
            and waiting.lease is not None
            and waiting.lease.connection_id == 1
        )
        for held in (lease, waiting.lease):
            held.release()

    drive(front_kind, scenario, streams=2, max_size=1, keep_alive=keep_alive(10))


def test_a_probe_that_hangs_past_its_timeout_closes_the_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.probe_delay = 100.0
        await f.advance(12.9)
        assert f.close_reasons() == {}
        await f.advance(0.1)
        assert f.close_reasons() == {1: "error"}
        (failed,) = f.of(ev.KeepAliveFailedEvent)
        assert isinstance(failed.error, poolkit.KeepAliveTimeoutError)
        assert failed.error.timeout == 3.0 and failed.duration == pytest.approx(3.0)
        assert f.pool.stats().total == 1  # refilled
        f.probe_delay = 0.0
        await f.advance(100)  # the hung probe returns at last: ignored
        assert f.close_reasons() == {1: "error"}
        assert len(f.of(ev.KeepAliveSucceededEvent)) == 10  # connection 2, every 10 s

    drive(front_kind, scenario, min_size=1, keep_alive=keep_alive(10, timeout=3.0))


def test_close_during_a_probe_closes_the_probed_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        f.probe_delay = 5.0
        await f.advance(11)
        assert f.pool.stats().in_use == 1
        await f.close()
        assert f.close_reasons() == {1: "poolClosed"}
        assert f.pool.stats().total == 0
        await f.advance(10)  # the probe's end changes nothing
        assert f.close_reasons() == {1: "poolClosed"}

    drive(front_kind, scenario, min_size=1, keep_alive=keep_alive(10))


# ---------------------------------------------------------------------- connect retries


def test_backoff_delays_follow_the_formula(front_kind: str) -> None:
    retry = poolkit.Backoff(jitter=0.0, circuit_breaker_after=None)

    async def scenario(f: Front) -> None:
        t0 = f.now()
        f.connect_errors.extend(ConnectionRefusedError(n) for n in range(6))
        waiting = f.start()
        await f.advance(60)
        assert waiting.done and waiting.lease is not None and waiting.error is None
        delays = [e.retry_in for e in f.of(ev.ConnectAttemptFailedEvent)]
        assert delays == pytest.approx([0.1 * 1.25 ** (n - 1) for n in range(1, 7)])
        assert [e.failures for e in f.of(ev.ConnectAttemptFailedEvent)] == [1, 2, 3, 4, 5, 6]
        starts = [t - t0 for t in f.at(ev.ConnectionCreatedEvent)]
        expected = [0.0]
        for delay in delays:
            expected.append(expected[-1] + delay)
        assert starts == pytest.approx(expected)
        assert f.pool.stats().total == 1  # one attempt at a time, no slot left over
        waiting.lease.release()

    drive(front_kind, scenario, max_size=4, connect_retry=retry)


def test_backoff_jitter_stays_within_its_fraction(front_kind: str) -> None:
    retry = poolkit.Backoff(base=1.0, factor=2.0, max_delay=8.0, circuit_breaker_after=None)

    async def scenario(f: Front) -> None:
        f.connect_errors.extend(OSError(n) for n in range(8))
        waiting = f.start()
        await f.advance(100)
        delays = [e.retry_in for e in f.of(ev.ConnectAttemptFailedEvent)]
        formula = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]  # capped at max_delay
        assert len(delays) == 8
        for delay, exact in zip(delays, formula, strict=True):
            assert exact * 0.97 <= delay <= exact * 1.03
        assert waiting.lease is not None
        waiting.lease.release()

    drive(front_kind, scenario, connect_retry=retry)


def test_waiters_keep_waiting_until_their_own_deadline(front_kind: str) -> None:
    retry = poolkit.Backoff(jitter=0.0, circuit_breaker_after=None)

    async def scenario(f: Front) -> None:
        f.connect_errors.extend(OSError(n) for n in range(100))
        waiting = f.start(timeout=0.5)
        await f.advance(0.49)
        assert not waiting.done
        await f.advance(0.01)
        assert isinstance(waiting.error, poolkit.WaitQueueTimeoutError)
        assert [e.reason for e in f.of(ev.ConnectionCheckOutFailedEvent)] == ["timeout"]

    drive(front_kind, scenario, connect_retry=retry)


def test_circuit_breaker_trips_and_recovers(front_kind: str) -> None:
    retry = poolkit.Backoff(
        base=1.0, factor=2.0, max_delay=8.0, jitter=0.0, circuit_breaker_after=5.0
    )

    async def scenario(f: Front) -> None:
        t0 = f.now()
        f.connect_errors.extend(OSError(n) for n in range(4))  # fail at 0, 1, 3, 7
        waiting = f.start()
        await f.advance(6.9)
        assert not waiting.done and f.of(ev.CircuitOpenedEvent) == []
        await f.advance(0.1)  # 7: failing for 7 s with no connection open
        assert isinstance(waiting.error, poolkit.CircuitOpenError)
        assert waiting.error.failures == 4 and waiting.error.retryable
        (opened,) = f.of(ev.CircuitOpenedEvent)
        assert opened.failing_for == pytest.approx(7.0) and opened.failures == 4
        assert f.of(ev.ConnectionCheckOutFailedEvent)[-1].reason == "circuitOpen"
        await f.advance(1)
        with pytest.raises(poolkit.CircuitOpenError):
            await f.lease()  # at once, without waiting
        await f.advance(7)  # 15: the retry (after 8 s) succeeds
        (closed,) = f.of(ev.CircuitClosedEvent)
        assert closed.failing_for == pytest.approx(15.0)
        assert [t - t0 for t in f.at(ev.CircuitClosedEvent)] == pytest.approx([15.0])
        lease = await f.lease()
        assert lease.connection_id == 5
        lease.release()

    drive(front_kind, scenario, connect_retry=retry)


def test_close_with_backing_off_connecting_and_leased_connections(front_kind: str) -> None:
    retry = poolkit.Backoff(jitter=0.0, circuit_breaker_after=None)

    async def scenario(f: Front) -> None:
        held = await f.lease()  # connection 1, leased
        f.connect_delay = 5.0
        slow = f.start()  # connection 2: connecting for 5 s
        await f.settle()
        f.connect_delay = 0.0
        f.connect_errors.append(OSError("refused"))
        failed = f.start()  # connection 3 fails at once: a slot backs off
        await f.settle()
        stats = f.pool.stats()
        assert (stats.in_use, stats.pending, stats.backing_off) == (1, 1, 1)
        await f.close()
        for pending in (slow, failed):
            assert isinstance(pending.error, poolkit.PoolClosedError)
        assert f.pool.stats().total == 1  # only the leased one, closed when it comes back
        created = f.created()
        await f.advance(10)
        assert f.created() == created  # no retry after close
        # the abandoned connect: cancelled (asyncio), or what it returns is closed (threads)
        late = [conn.closed for conn in f.made if conn.id == 2]
        assert late == ([] if f.name in ("asyncio", "trio") else [1])
        held.release()
        assert f.close_reasons() == {3: "error", 2: "poolClosed", 1: "poolClosed"}
        assert f.pool.stats().total == 0

    drive(front_kind, scenario, max_size=3, connect_retry=retry)


# ---------------------------------------------------------------------- statistics


def test_stats_count_roles_streams_and_totals(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(3)]  # kept (made on ready), demand, overflow
        stats = f.pool.stats()
        assert (stats.kept, stats.demand, stats.overflow) == (1, 1, 1)
        assert (stats.streams_in_use, stats.stream_capacity, stats.in_use) == (3, 3, 3)
        late = f.start(timeout=2.0)
        await f.advance(2.0)
        assert isinstance(late.error, poolkit.WaitQueueTimeoutError)
        leases.pop().release()  # the overflow connection closes as soon as it is idle
        stats = f.pool.stats()
        assert stats.total == 2 and stats.overflow == 0
        assert dict(stats.connections_closed) == {"idle": 1}
        assert dict(stats.checkout_failures) == {"timeout": 1}
        assert (stats.checkouts, stats.connect_attempts, stats.connections_created) == (3, 3, 3)
        assert stats.connect_failures == 0 and not stats.circuit_open
        assert stats.waits == 3  # the two that waited for their connect, and the one timed out
        assert stats.wait_time_max == pytest.approx(2.0)
        assert stats.wait_time_total == pytest.approx(2.0)
        for lease in leases:
            lease.release()

    drive(front_kind, scenario, min_size=1, soft_max_size=2, max_size=3)


def test_stats_streams_of_a_multiplexed_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(2)]
        stats = f.pool.stats()
        assert (stats.total, stats.streams_in_use, stats.stream_capacity) == (1, 2, 4)
        for lease in leases:
            lease.release()
        assert f.pool.stats().streams_in_use == 0

    drive(front_kind, scenario, streams=4, max_size=1)


def test_stats_wait_of_a_hand_off_on_the_fast_check_in_asyncio() -> None:
    # No listener and DEBUG off: the check-in takes the fast path and times the hand-off itself.
    async def main() -> poolkit.PoolStats:
        async def connect(ctx: poolkit.ConnectContext) -> Conn:
            return Conn(ctx.connection_id)

        options = poolkit.PoolOptions(max_size=1)
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(connect, address="db:1", options=options)
        async with pool:
            held = await pool.checkout()
            waiter = asyncio.ensure_future(pool.checkout())
            await asyncio.sleep(3.0)
            held.release()
            (await waiter).release()
            return pool.stats()

    stats = run(main())
    assert stats.wait_time_max == pytest.approx(3.0) and stats.waits == 2
    assert stats.wait_time_total == pytest.approx(3.0, abs=0.01)  # (the connect's: no time)
    assert stats.checkouts == 2


def test_stats_wait_of_a_hand_off_on_the_fast_check_in_threads() -> None:
    clock = FakeClock()
    options = poolkit.PoolOptions(max_size=1)
    pool: poolkit.Pool[Conn] = poolkit.Pool(
        lambda ctx: Conn(ctx.connection_id), address="db:1", options=options, clock=clock
    )
    with pool:
        held = pool.checkout()
        got: list[poolkit.Lease[Conn]] = []
        clock.start_thread(lambda: got.append(pool.checkout()))
        clock.settle()
        clock.advance(3.0)
        held.release()
        clock.settle()
        got[0].release()
        stats = pool.stats()
    assert clock.errors == []
    assert stats.wait_time_max == pytest.approx(3.0) and stats.waits == 2  # its connect, too
    assert stats.wait_time_total == pytest.approx(3.0)  # (the connect's took no time)
    assert stats.checkouts == 2


def test_stats_count_failed_connects_and_the_open_circuit(front_kind: str) -> None:
    retry = poolkit.Backoff(base=1.0, factor=1.0, jitter=0.0, circuit_breaker_after=2.0)

    async def scenario(f: Front) -> None:
        f.connect_errors.extend(OSError(n) for n in range(3))
        waiting = f.start()
        await f.advance(2.0)  # failures at 0, 1, 2: the third trips the circuit
        assert isinstance(waiting.error, poolkit.CircuitOpenError)
        stats = f.pool.stats()
        assert stats.circuit_open and stats.backing_off == 1
        assert (stats.connect_attempts, stats.connect_failures) == (3, 3)
        assert dict(stats.connections_closed) == {"error": 3}
        assert dict(stats.checkout_failures) == {"circuitOpen": 1}
        await f.advance(1.0)
        assert not f.pool.stats().circuit_open and f.pool.stats().available == 1

    drive(front_kind, scenario, connect_retry=retry)


# ---------------------------------------------------------------------- leaked leases


def test_a_lease_held_past_leak_timeout_is_reported_once(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(f: Front) -> None:
        lease = await f.lease()  # the checkout whose stack the report shows
        await f.advance(4.9)
        assert f.of(ev.LeaseLeakedEvent) == []
        await f.advance(0.1)
        (leak,) = f.of(ev.LeaseLeakedEvent)
        assert leak.connection_id == lease.connection_id and not leak.collected
        assert leak.held == pytest.approx(5.0)
        assert "in scenario" in leak.stack and "lease = await f.lease()" in leak.stack
        assert _poolkit_frames(leak.stack) == []  # poolkit's own frames cut
        await f.advance(100)
        assert len(f.of(ev.LeaseLeakedEvent)) == 1  # once
        lease.release()  # still a valid lease
        assert f.pool.stats().available == 1

    with caplog.at_level("WARNING", logger="poolkit.pool"):
        drive(front_kind, scenario, leak_timeout=5.0, background_interval=math.inf)
    (record,) = [r for r in caplog.records if r.name == "poolkit.pool"]
    assert record.levelname == "WARNING" and "has been out for 5.000 s" in record.getMessage()


def test_a_caller_in_a_folder_named_poolkit_keeps_its_frames(
    front_kind: str, tmp_path: Path
) -> None:
    """Only the package's own frames are cut from a checkout's stack, not every file with
    ``poolkit`` in its path (a clone in a folder named ``poolkit``, an app of that name)."""
    app_file = tmp_path / "poolkit" / "tests" / "app.py"
    app_file.parent.mkdir(parents=True)
    app_file.write_text("async def check_out(f):\n    return await f.lease()\n")
    spec = importlib.util.spec_from_file_location("poolkit_named_app", app_file)
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)

    async def scenario(f: Front) -> None:
        lease = await app.check_out(f)
        await f.advance(5.0)
        (leak,) = f.of(ev.LeaseLeakedEvent)
        assert f'File "{app_file}", line 2, in check_out' in leak.stack
        assert "in scenario" in leak.stack and _poolkit_frames(leak.stack) == []
        lease.release()

    drive(front_kind, scenario, leak_timeout=5.0, background_interval=math.inf)


def test_a_lease_given_back_in_time_is_not_reported(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        first = await f.lease()
        second = await f.lease()
        await f.advance(4.0)
        first.release()
        second.discard()
        await f.advance(10.0)
        assert f.of(ev.LeaseLeakedEvent) == []

    drive(front_kind, scenario, leak_timeout=5.0, background_interval=math.inf)


async def lose_a_lease(f: Front) -> int:
    """Check out a lease and drop it without giving it back; the id of its connection."""
    lease = await f.lease()
    conn_id: int = lease.connection_id
    del lease
    gc.collect()
    return conn_id


def test_a_garbage_collected_lease_is_reported_and_its_connection_closed(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(f: Front) -> None:
        conn_id = await lose_a_lease(f)
        await f.advance(1.0)
        assert f.of(ev.LeaseLeakedEvent) == []  # noticed at the pool's next step
        again = await f.lease()
        (leak,) = f.of(ev.LeaseLeakedEvent)
        assert leak.collected and leak.connection_id == conn_id
        assert f.close_reasons() == {conn_id: "error"}  # closed, not lost
        assert again.connection_id != conn_id
        again.release()
        stats = f.pool.stats()
        assert (stats.total, stats.in_use, stats.available) == (1, 0, 1)

    with caplog.at_level("WARNING", logger="poolkit.pool"):
        drive(front_kind, scenario, leak_timeout=60.0, background_interval=math.inf)
    assert any("garbage-collected" in r.getMessage() for r in caplog.records)


def test_a_garbage_collected_lease_is_reported_by_its_leak_timer(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        await lose_a_lease(f)
        await f.advance(5.0)  # no other call into the pool: the leak timer finds it
        (leak,) = f.of(ev.LeaseLeakedEvent)
        assert leak.collected
        assert f.pool.stats().total == 0

    drive(front_kind, scenario, leak_timeout=5.0, background_interval=math.inf)


def test_an_unwatched_lease_lost_to_the_garbage_collector_is_reclaimed(
    front_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # No leak_timeout: the lease is not watched, but its connection is still not lost.
    async def scenario(f: Front) -> None:
        conn_id = await lose_a_lease(f)
        again = await f.lease()  # the pool is full: this checkout's wait reclaims it
        (leak,) = f.of(ev.LeaseLeakedEvent)
        assert leak.collected and leak.connection_id == conn_id
        assert leak.held is None and leak.stack == ""
        assert f.close_reasons() == {conn_id: "error"}
        assert again.connection_id != conn_id
        again.release()
        assert f.pool.stats().total == 1

    with caplog.at_level("WARNING", logger="poolkit.pool"):
        drive(front_kind, scenario, max_size=1, background_interval=math.inf)
    (record,) = [r for r in caplog.records if r.name == "poolkit.pool"]
    assert "set PoolOptions.leak_timeout to see where" in record.getMessage()
