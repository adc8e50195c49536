"""The generic pool on both front ends, driven by fake time: roles and limits (kept, demand,
overflow), multiplexed connections, will-close, lifetime, bounded waiting."""

from __future__ import annotations

import traceback
from typing import cast

import pytest

import poolkit
from frontends import Front, drive
from poolkit import events as ev

# ---------------------------------------------------------------------- roles and limits


def test_min_size_made_on_ready_and_replaced_after_will_close(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        assert f.pool.stats().total == 3 and f.created() == 3
        assert f.pool.connection_will_close(1) is True
        await f.settle()
        assert f.close_reasons() == {1: "willClose"}
        assert f.pool.stats().total == 3 and f.created() == 4
        # every connection drops at once: all replaced
        for conn_id in (2, 3, 4):
            f.pool.connection_will_close(conn_id)
        await f.settle()
        assert f.pool.stats().total == 3 and f.created() == 7
        assert f.pool.connection_will_close(99) is False

    drive(front_kind, scenario, min_size=3, max_size=5)


def test_demand_connections_idle_close_kept_ones_do_not(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(4)]  # 2 kept + 2 demand
        assert f.pool.stats().total == 4
        for lease in leases:
            lease.release()
        await f.advance(9.0)
        assert f.closed() == []
        await f.advance(1.0)  # exactly max_idle_time after the check-ins
        assert sorted(f.closed()) == [3, 4]
        assert set(f.close_reasons().values()) == {"idle"}
        await f.advance(100.0)
        assert f.pool.stats().total == 2 and len(f.closed()) == 2

    drive(front_kind, scenario, min_size=2, max_size=10, max_idle_time=10.0)


def test_kept_connection_closing_promotes_a_demand_one(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(2)]  # 1 kept (id 1) + 1 demand (id 2)
        for lease in leases:
            lease.release()
        await f.advance(5.0)
        f.pool.connection_will_close(1)  # the kept one goes: the demand one takes its role
        await f.settle()
        assert f.created() == 2, "no new connection while a demand one can take the role"
        await f.advance(100.0)
        assert f.closed() == [1] and f.pool.stats().total == 1

    drive(front_kind, scenario, min_size=1, max_size=10, max_idle_time=10.0)


def test_overflow_connections_close_as_soon_as_idle(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(4)]  # 2 demand + 2 overflow
        assert f.pool.stats().total == 4
        leases[3].release()
        await f.settle()
        assert f.closed() == [4] and f.close_reasons()[4] == "idle"
        leases[0].release()  # a demand one stays
        await f.settle()
        assert f.closed() == [4] and f.pool.stats().available == 1
        # the overflow one still out is handed to a waiter rather than closed
        waiter = f.start()
        await f.settle()
        assert not waiter.done or waiter.lease is not None
        leases[2].release()
        await f.settle()
        assert waiter.done and waiter.lease is not None
        waiter.lease.release()
        leases[1].release()
        await f.settle()
        assert f.pool.stats().total == 2

    drive(front_kind, scenario, max_size=4, soft_max_size=2)


def test_overflow_takes_a_demand_place_when_one_frees(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(3)]  # 2 demand + overflow (id 3)
        leases[0].discard()  # a demand connection dies: the overflow one becomes demand
        await f.settle()
        leases[2].release()
        await f.settle()
        assert f.closed() == [1], "the promoted connection is kept while idle"
        leases[1].release()

    drive(front_kind, scenario, max_size=3, soft_max_size=2)


def test_hard_limit_and_max_connecting_hold_while_the_queue_grows(front_kind: str) -> None:
    # 10,000 concurrent checkouts as tasks (asyncio, trio); as threads (one OS thread each) 300
    n = 10_000 if front_kind != "threads" else 300

    async def scenario(f: Front) -> None:
        f.connect_delay = 1.0
        pending = [f.start() for _ in range(n)]
        await f.settle()
        peak_total = peak_pending = 0
        while not all(p.done for p in pending):
            stats = f.pool.stats()
            peak_total = max(peak_total, stats.total)
            peak_pending = max(peak_pending, stats.pending)
            for p in pending:
                if p.done and p.lease is not None:
                    p.lease.release()
                    p.lease = None
            await f.advance(0.5)
        assert all(p.error is None for p in pending)
        assert peak_total <= 7 and peak_pending <= 3
        assert f.created() == 7

    drive(front_kind, scenario, max_size=7, max_connecting=3)


# ---------------------------------------------------------------------- multiplexed connections


def test_ten_leases_multiplexed_on_one_ten_stream_connection(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(10)]
        assert {lease.connection_id for lease in leases} == {1}
        assert f.created() == 1
        outs = [e for e in f.events if isinstance(e, ev.ConnectionCheckedOutEvent)]
        assert len(outs) == 10, "CMAP events are per lease"
        eleventh = f.start()
        await f.settle()
        assert eleventh.done and eleventh.lease is not None
        assert eleventh.lease.connection_id == 2
        for lease in [*leases, eleventh.lease]:
            lease.release()
        await f.settle()
        assert f.pool.stats().available == 2

    drive(front_kind, scenario, streams=10, max_size=2)


def test_stream_limit_increase_serves_waiters_at_once(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(2)]
        waiters = [f.start() for _ in range(5)]
        await f.settle()
        assert not any(w.done for w in waiters)
        assert f.pool.set_max_streams(1, 5) is True  # three more streams: three waiters served
        await f.settle()
        (changed,) = [e for e in f.events if isinstance(e, ev.MaxStreamsChangedEvent)]
        assert (changed.connection_id, changed.max_streams, changed.previous) == (1, 5, 2)
        assert [w.done for w in waiters] == [True, True, True, False, False]
        assert f.pool.stats().waiting == 2
        for w in waiters[:3]:
            assert w.lease is not None
            w.lease.release()
        await f.settle()
        assert all(w.done for w in waiters)
        for w in waiters[3:]:
            assert w.lease is not None
            w.lease.release()
        for lease in leases:
            lease.release()

    drive(front_kind, scenario, streams=2, max_size=1)


def test_stream_limit_decrease_blocks_until_use_falls_below(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(4)]
        assert f.pool.set_max_streams(1, 2) is True
        waiter = f.start()
        await f.settle()
        leases[0].release()  # 3 in use, limit 2: nothing new
        await f.settle()
        assert not waiter.done
        leases[1].release()  # 2 in use: still at the limit
        await f.settle()
        assert not waiter.done
        leases[2].release()  # 1 in use: a stream is free
        await f.settle()
        # (the cast: mypy keeps `waiter.done` narrowed to False by the assert above)
        assert (
            cast(bool, waiter.done) and waiter.lease is not None and waiter.lease.connection_id == 1
        )
        waiter.lease.release()
        leases[3].release()
        with pytest.raises(ValueError, match="max_streams"):
            f.pool.set_max_streams(1, 0)
        assert f.pool.set_max_streams(42, 3) is False

    drive(front_kind, scenario, streams=4, max_size=1)


# ---------------------------------------------------------------------- will close


def test_will_close_on_a_leased_connection_drains_it(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        a, b = await f.lease(), await f.lease()
        assert a.connection_id == b.connection_id == 1
        assert f.pool.connection_will_close(1) is True
        await f.settle()
        (draining,) = [e for e in f.events if isinstance(e, ev.ConnectionDrainingEvent)]
        assert draining.connection_id == 1 and draining.streams_in_use == 2
        c = await f.lease()  # a draining connection takes no new lease
        assert c.connection_id == 2
        a.release()
        await f.settle()
        assert f.closed() == []
        assert f.pool.stats().in_use == 2
        b.release()  # its last lease: now it closes
        await f.settle()
        assert f.closed() == [1] and f.close_reasons()[1] == "willClose"
        c.release()

    drive(front_kind, scenario, streams=4, max_size=2)


# ---------------------------------------------------------------------- lifetime


def test_max_lifetime_retires_at_checkout_checkin_and_background(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        spare = await f.lease()
        spare.release()
        await f.advance(30.0)
        held.release()  # at check-in: too old
        await f.settle()
        assert f.close_reasons().get(1) == "lifetime"
        await f.advance(1.0)  # background run: the idle one retires too
        assert f.close_reasons().get(2) == "lifetime"
        fresh = await f.lease()
        assert fresh.connection_id == 3
        fresh.release()

    drive(front_kind, scenario, max_lifetime=30.0, max_lifetime_jitter=0.0, background_interval=1.0)


def test_max_lifetime_jitter_retires_connections_apart(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        leases = [await f.lease() for _ in range(10)]
        for lease in leases:
            lease.release()
        retired_at: dict[int, float] = {}
        for _ in range(500):  # 125 s of fake time
            if len(retired_at) == 10:
                break
            await f.advance(0.25)
            for conn_id in f.closed():
                retired_at.setdefault(conn_id, f.now())
        assert len(retired_at) == 10, f"retired after 125 s: {retired_at}"
        times = sorted(retired_at.values())
        assert times[0] >= 90.0 - 0.25 and times[-1] <= 100.0 + 0.25
        assert len(set(times)) > 1, "all ten retired at the same instant"

    drive(
        front_kind,
        scenario,
        max_lifetime=100.0,
        max_lifetime_jitter=0.1,
        background_interval=0.25,
        max_size=10,
    )


# ---------------------------------------------------------------------- bounded waiting


def test_max_waiting_fails_the_next_checkout_at_once(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        waiters = [f.start() for _ in range(2)]
        await f.settle()
        extra = f.start()
        await f.settle()
        assert extra.done and isinstance(extra.error, poolkit.TooManyWaitersError)
        assert extra.error.max_waiting == 2 and extra.error.retryable
        failed = [e for e in f.events if isinstance(e, ev.ConnectionCheckOutFailedEvent)]
        assert [e.reason for e in failed] == ["tooManyWaiters"]
        held.release()
        await f.settle()
        assert waiters[0].done and waiters[0].lease is not None
        waiters[0].lease.release()
        await f.settle()
        assert waiters[1].lease is not None
        waiters[1].lease.release()

    drive(front_kind, scenario, max_size=1, max_waiting=2)


def test_leases_after_close_fail(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        await f.close()
        with pytest.raises(poolkit.PoolClosedError):
            await f.lease()
        held.release()
        await f.settle()
        assert f.closed() == [1]

    drive(front_kind, scenario, streams=3)


# ---------------------------------------------------------------------- paused pools


def _shown(error: BaseException) -> str:
    """What a user sees of ``error``: its traceback, notes included."""
    return "".join(traceback.format_exception(error))


def test_a_pool_never_made_ready_says_how_to_make_it_ready(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        with pytest.raises(poolkit.PoolClearedError) as info:
            await f.lease()
        error = info.value
        assert str(error) == "Connection pool for db:1 is paused"  # the message stays as it was
        assert error.retryable and error.cause is None
        (note,) = error.__notes__
        assert note in _shown(error)
        assert "call pool.ready(), or use it as `with pool:` / `async with pool:`" in note
        f.pool.ready()
        (await f.lease()).release()

    drive(front_kind, scenario, ready=False)


def test_a_pool_cleared_after_an_error_says_its_owner_makes_it_ready_again(
    front_kind: str,
) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        waiting = f.start()
        await f.settle()
        f.pool.clear(cause=OSError("connection reset"))
        await f.settle()
        with pytest.raises(poolkit.PoolClearedError) as info:
            await f.lease()
        for error in (waiting.error, info.value):  # failed while waiting, and when checking out
            assert isinstance(error, poolkit.PoolClearedError)
            assert str(error) == (
                "Connection pool for db:1 was cleared because another operation failed with: "
                "connection reset"
            )
            (note,) = error.__notes__
            assert note in _shown(error)
            assert "owner cleared it" in note and "makes it ready again with pool.ready()" in note
        held.release()
        f.pool.ready()
        (await f.lease()).release()

    drive(front_kind, scenario, max_size=1)


# ---------------------------------------------------------------------- request objects


class Req:
    """A client library's request object: an id and a completion callback."""

    def __init__(self, rid: object) -> None:
        self.id = rid
        self.results: list[object] = []

    def complete(self, result: object) -> None:
        self.results.append(result)

    @property
    def lease(self) -> poolkit.Lease[object]:
        assert len(self.results) == 1 and isinstance(self.results[0], poolkit.Lease), self.results
        return self.results[0]


def test_batch_lease_is_served_in_order_sharing_the_queue_with_checkouts(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        reqs = [Req(i) for i in range(4)]
        f.pool.lease_requests(reqs[:2])
        await f.settle()
        assert all(len(r.results) == 1 for r in reqs[:2])
        f.pool.lease_request(reqs[2])
        checkout = f.start()  # an awaitable checkout queues behind the request
        await f.settle()
        f.pool.lease_request(reqs[3])
        assert f.pool.stats().waiting == 3
        reqs[0].lease.release()
        await f.settle()
        assert len(reqs[2].results) == 1 and not checkout.done and reqs[3].results == []
        reqs[1].lease.release()
        await f.settle()
        # (the cast: mypy keeps `checkout.done` narrowed to False by the assert above)
        assert cast(bool, checkout.done) and checkout.lease is not None and reqs[3].results == []
        checkout.lease.release()
        await f.settle()
        assert len(reqs[3].results) == 1
        reqs[2].lease.release()
        reqs[3].lease.release()
        assert all(len(r.results) == 1 for r in reqs), "completed exactly once"

    drive(front_kind, scenario, max_size=2)


def test_cancelled_request_is_completed_once_and_never_served(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        a, b = Req("a"), Req("b")
        f.pool.lease_requests([a, b])
        assert f.pool.cancel_request("a") is True
        assert len(a.results) == 1 and isinstance(a.results[0], poolkit.RequestCancelledError)
        assert a.results[0].request_id == "a"
        assert f.pool.cancel_request("a") is False
        held.release()
        await f.settle()
        assert len(a.results) == 1, "a cancelled request is never served"
        assert f.pool.cancel_request("b") is False, "already served"
        b.lease.release()
        # the id is free again once its request completed
        again = Req("a")
        f.pool.lease_request(again)
        await f.settle()
        again.lease.release()
        reasons = [e.reason for e in f.events if isinstance(e, ev.ConnectionCheckOutFailedEvent)]
        assert reasons == ["cancelled"]

    drive(front_kind, scenario, max_size=1)


def test_timed_out_request_fails_and_is_never_served(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        r = Req(1)
        f.pool.lease_request(r)
        await f.advance(2.0)
        assert len(r.results) == 1 and isinstance(r.results[0], poolkit.WaitQueueTimeoutError)
        held.release()
        await f.settle()
        assert len(r.results) == 1 and f.pool.stats().available == 1

    drive(front_kind, scenario, max_size=1, wait_queue_timeout=2.0)


def test_bad_requests_raise_before_anything_is_queued(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        waiting = Req("w")
        f.pool.lease_request(waiting)
        before = f.pool.stats()
        with pytest.raises(ValueError, match="already waiting"):
            f.pool.lease_requests([Req("x"), Req("w")])
        with pytest.raises(ValueError, match="twice"):
            f.pool.lease_requests([Req("y"), Req("y")])
        with pytest.raises(TypeError, match="complete"):
            f.pool.lease_requests([Req("z"), object()])
        with pytest.raises(TypeError, match="hashable"):
            f.pool.lease_request(Req(["unhashable"]))
        assert f.pool.stats() == before
        held.release()
        await f.settle()
        waiting.lease.release()

    drive(front_kind, scenario, max_size=1)


def test_a_queued_batch_is_served_in_the_order_given(front_kind: str) -> None:
    async def scenario(f: Front) -> None:
        held = await f.lease()
        reqs = [Req(i) for i in range(3)]
        f.pool.lease_requests(reqs)
        order = []
        held.release()
        for _ in reqs:
            await f.settle()
            served = [r for r in reqs if r.results and r.id not in order]
            assert len(served) == 1
            order.append(served[0].id)
            served[0].lease.release()
        assert order == [0, 1, 2]

    drive(front_kind, scenario, max_size=1)
