"""The adaptive limit's controller (``poolkit._core.adaptive``, issue 28), against a model of the
embedded server: its cores' queue (``poolkit.testing.sim``'s own) with seeded exponential service
times, callers that always want a connection (a closed loop), and a pool that lets no more than
the limit be in use. Virtual time: the runs are exact and repeatable. What the issue asks of the
pool, in model form: the knee found, a change followed, an overload shed, a fleet held."""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from core_view import core_view, handout_of, state_of
from poolkit import Adaptive
from poolkit._core.adaptive import GAINS, AdaptiveLimit
from poolkit.testing.sim.server import _Cores


@dataclass
class Run:
    times: list[float]  #: when each operation ended
    limits: list[int]  #: the limit after it
    #: (when, how long) each checkout waited for a connection (the callers in a FIFO queue)
    waits: list[tuple[float, float]] = field(default_factory=list)
    #: the limits of the base rounds, when each began
    bases: list[tuple[float, int]] = field(default_factory=list)
    #: the base operation time at the end
    base: float | None = None

    def limits_between(self, start: float, end: float) -> list[int]:
        return [lim for t, lim in zip(self.times, self.limits, strict=True) if start <= t < end]

    def throughput(self, start: float, end: float) -> float:
        return sum(1 for t in self.times if start <= t < end) / (end - start)


@dataclass
class LoadMeter:
    """A client loop's load as a front end measures it (``ThreadLoad``): the part of each 0.1 s
    it was busy, told when its next answer begins (its busy time until then all in the past)."""

    busy: float = 0.0  #: the loop's busy time so far
    at: float = 0.0
    busy_at: float = 0.0

    def tell(self, controller: AdaptiveLimit, now: float, clock: float = 0.0) -> None:
        if now - self.at >= 0.1:
            controller.client_load((self.busy - self.busy_at) / (now - self.at), now + clock)
            self.at, self.busy_at = now, self.busy


def simulate(
    tasks: int,
    cores: int,
    service: float,
    duration: float,
    *,
    changes: tuple[tuple[float, int | None, float | None], ...] = (),
    ceiling: int = 64,
    seed: int = 7,
    exponential: bool = True,
    client: float = 0.0,
    lag: bool = True,
    load: bool = False,
    static: int | None = None,
) -> Run:
    """``tasks`` callers on a pool of at most ``ceiling`` connections over a server of ``cores``
    cores and ``service`` seconds a request (exponential; else each exactly that: a plain sleep);
    ``changes``: (at, cores, service). ``client``: the client spends this long on each answer,
    one at a time (its event loop), and tells the pool how long each waited for it (unless not
    ``lag``), and with ``load`` the part of every 0.1 s its loop was busy (``client_load``);
    ``static``: a pool of that many, no limit found."""
    rng = random.Random(seed)
    server = _Cores(cores)
    controller = AdaptiveLimit(1, ceiling, initial=2)
    pending = sorted(changes)
    ends: list[tuple[float, int, float]] = []  # (end, id, start)
    loop = 0.0  # (when the client's loop is free)
    meter = LoadMeter()
    answered: set[int] = set()  # (operations the server is done with, in the client's loop)
    callers = deque([0.0] * tasks)  # (since when each caller waiting has waited)
    in_use = 0
    now = 0.0
    ids = 0
    run = Run([], [])

    def start_more() -> None:
        nonlocal in_use, ids
        while in_use < min(tasks, controller.limit if static is None else static):
            run.waits.append((now, now - callers.popleft()))
            in_use += 1
            ids += 1
            took = rng.expovariate(1.0 / service) if exponential else service
            end = server.book(now, took)
            heapq.heappush(ends, (end, ids, now))

    start_more()
    while ends and now < duration:
        end, key, began = heapq.heappop(ends)
        while pending and pending[0][0] <= end:
            _, new_cores, new_service = pending.pop(0)
            if new_cores is not None:
                server.set_limit(new_cores)
            if new_service is not None:
                service = new_service
        now = end
        if client and key not in answered:
            server.finish()
            answered.add(key)
            start = max(end, loop)
            loop = start + client
            if lag:
                controller.client_lag(start - end, start)
            if load:
                meter.tell(controller, start)
            meter.busy += client
            heapq.heappush(ends, (loop, key, began))
            continue
        if client:
            answered.discard(key)
        else:
            server.finish()
        in_use -= 1
        # (callers waited for it; in use as it ended, it included)
        if static is None and controller.sample(end - began, end, tasks > in_use + 1, in_use + 1):
            est = controller.estimate
            if est is not None and est.gain == 0.0:
                run.bases.append((end, controller.limit))
        run.times.append(end)
        run.limits.append(controller.limit)
        callers.append(end)
        start_more()
    run.base = controller.base
    return run


def test_steady_load_finds_the_knee() -> None:
    """32 callers, 8 cores, 1 ms: the best throughput is 8,000 a second, from 8 connections on;
    the limit holds near 8 (at most 1.5 times it), not the 32 a static pool of 32 would hold."""
    run = simulate(32, 8, 0.001, 10.0)
    limits = run.limits_between(2.0, 10.0)
    assert 8 <= statistics.median(limits) <= 12, statistics.median(limits)
    assert max(limits) <= 16
    assert run.throughput(2.0, 10.0) >= 0.95 * 8000
    # (seeded draws: the same run each time; other seeds the same way)
    for seed in (1, 2, 3):
        other = simulate(32, 8, 0.001, 5.0, seed=seed)
        assert 7 <= statistics.median(other.limits_between(1.0, 5.0)) <= 12


@pytest.mark.parametrize("exponential", [True, False], ids=["exp", "sleep"])
def test_a_server_with_room_is_used_up_to_max_size(exponential: bool) -> None:
    """Issue 40, point 1: a server without a knee within ``max_size`` (64 cores, 2 ms; or a
    plain 2 ms sleep): the limit reaches ``max_size`` (32) within 10 s and the throughput is at
    least 0.9 x the static pool's of 32 (16,000 a second). The share held it at 13-17 before:
    Vegas's estimate multiplies the base's error by the connections in use (a base 6 % low reads
    as 2 queued at 32); and the level stayed a sixth short of the ceiling, capped at the noisy
    mean in use of probes no checkout waited through."""
    for seed in (1, 7):
        run = simulate(32, 64, 0.002, 20.0, ceiling=32, seed=seed, exponential=exponential)
        reached = next(t for t, lim in zip(run.times, run.limits, strict=True) if lim == 32)
        assert reached <= 10.0, reached
        assert statistics.median(run.limits_between(10.0, 20.0)) == 32
        assert run.throughput(10.0, 20.0) >= 0.9 * 16_000, run.throughput(10.0, 20.0)


def test_a_client_that_is_its_own_bottleneck_is_not_read_as_a_queueing_server() -> None:
    """Issue 40, point 4, in the model: a client that spends 0.15 ms on every answer, one at a
    time (an event loop: at most 6,667 a second), over the 8-core server (8,000 a second): the
    client is the bottleneck, and its operations slow as it holds more, as a queueing server's
    would. Told its loop's lag (``client_lag``), the pool reads the server's time as the
    operations' less the lag, and reaches 0.95 x the best static size's throughput; not told,
    Vegas's estimate reads the client's queue as the server's and the share holds it short."""
    best = max(
        simulate(32, 8, 0.001, 10.0, client=0.00015, static=size).throughput(2.0, 10.0)
        for size in (8, 12, 16, 24, 32)
    )
    assert best == pytest.approx(6_667, rel=0.01)
    told = simulate(32, 8, 0.001, 20.0, client=0.00015)
    blind = simulate(32, 8, 0.001, 20.0, client=0.00015, lag=False)
    assert told.throughput(5.0, 20.0) >= 0.95 * best, told.throughput(5.0, 20.0) / best
    assert blind.throughput(5.0, 20.0) < 0.95 * best  # (what the signal is for)
    assert statistics.median(told.limits_between(5.0, 20.0)) <= 24  # (not max_size: the knee)


def test_a_client_busy_with_its_own_work_is_told_by_its_load() -> None:
    """Issue 40, point 4: a loop's lag, as a front end measures it (a callback made ready),
    misses a loop busy with its tasks' own work; its load (the part of the time its thread ran)
    does not. The same client as above, told its load and no lag: at 0.9 or more the share no
    longer reads its operations' slowing as the server queueing, the elasticity alone holds the
    level, and the pool reaches 0.95 x the best static size's throughput."""
    best = 6_667.0  # (the client's own limit, which the static sizes above reach)
    told = simulate(32, 8, 0.001, 20.0, client=0.00015, lag=False, load=True)
    assert told.throughput(5.0, 20.0) >= 0.95 * best, told.throughput(5.0, 20.0) / best
    assert statistics.median(told.limits_between(5.0, 20.0)) <= 24


@pytest.mark.parametrize("load", [0.95, 0.5, None], ids=["saturated", "room", "untold"])
def test_a_client_its_own_bottleneck_probes_half_as_often(load: float | None) -> None:
    """A client whose load is 0.9 or more (its own bottleneck) runs a cycle twice as long: the
    same probe and drain, then fourteen cruise rounds, not six (each drain costs it
    throughput, and the server the probes ask about has room); any other, one in eight."""
    controller = AdaptiveLimit(1, 64, initial=16)
    now = 0.0
    gains: list[float] = []
    for i in range(40_000):
        now += 0.0001
        if load is not None and i % 1000 == 0:
            controller.client_load(load, now)
        if controller.sample(0.0016, now, True, controller.limit):
            assert controller.estimate is not None
            gains.append(controller.estimate.gain)
    cycle = 16 if load == 0.95 else 8
    late = gains[len(gains) // 2 :]
    probes = [i for i, gain in enumerate(late) if gain == GAINS[0]]
    assert len(probes) >= 4
    assert {b - a for a, b in itertools.pairwise(probes)} == {cycle}
    assert all(late[i + 1] == GAINS[1] for i in probes if i + 1 < len(late))


@pytest.mark.parametrize("clients", ["", "lag", "load"])
def test_a_fleet_of_clients_told_their_lag_still_shares_the_server(clients: str) -> None:
    """Four pools, each with a client of its own (0.15 ms an answer: 6,667 a second each) on
    one 8-core server (8,000 a second): the server is the bottleneck, and the clients' lag,
    small, or load (a third of their time), does not free the pools from the share: the sum
    held as without clients."""
    samples = fleet(
        4, 32, 8, 0.001, 60.0, client=0.00015 if clients else 0.0, load=clients == "load"
    )
    late = [limits for t, limits in samples if t >= 30.0]
    total = statistics.median(sum(limits) for limits in late)
    assert 8 <= total <= 16 + 2, total


@pytest.mark.parametrize("at", [10.05, 15.0, 19.0])
def test_heavier_work_is_not_overload(at: float) -> None:
    """Issue 40, point 2: every operation turns from 2 ms to 10 ms, the server (64 cores) not
    loaded. The base (the median of five base rounds) read that as queueing for 30 s, and the
    limit fell to 5-9 of 32; now a check (a base round at the next second, when the throughput
    fell by 1.5 x) finds that halving the connections did not make the operations faster, the
    share holds, and the next base round (or check) confirms the slower base. The change is
    tried just after a base round (10.05 s, the longest wait for the next), mid-period, and just
    before one. From a second after the change, every second's throughput is at least 0.8 x the
    static pool's of 32 (3,200 a second; the model: 0.79-0.87 at the worst second)."""
    for seed in (1, 7):
        run = simulate(
            32, 64, 0.002, at + 15.0, ceiling=32, changes=((at, None, 0.010),), seed=seed
        )
        seconds = [run.throughput(at + a, at + a + 1.0) / 3_200 for a in range(1, 15)]
        assert min(seconds) >= 0.75, [round(x, 2) for x in seconds]
        assert run.throughput(at + 1.0, at + 11.0) >= 0.85 * 3_200, seconds
        assert statistics.median(run.limits_between(at + 1.0, at + 15.0)) >= 28
        assert run.base is not None and run.base >= 0.008, run.base  # (the server's, unloaded)


def test_a_base_round_holds_half_the_connections_the_server_serves_unqueued() -> None:
    """A base round (every 10 s) holds half of what the pool has in use less its queue (8 cores
    unqueued: about 4), not the floor: the server is left unloaded all the same, and its
    callers wait a fraction of what they did. At the floor, 31 callers waited for 32 operations
    one by one: the longest wait 31-45 ms every 10 s, 7-9 x the wait p99 (4.5-5.2 ms) in these
    runs; now 12-18 ms, at most 3.4 x."""
    for seed in (1, 2, 7):
        run = simulate(32, 8, 0.001, 31.0, seed=seed)
        assert len(run.bases) == 3
        assert all(2 <= limit <= 5 for _, limit in run.bases), run.bases
        waits = sorted(wait for t, wait in run.waits if t >= 2.0)
        p99 = waits[int(0.99 * len(waits))]
        assert waits[-1] <= 4.0 * p99, (waits[-1], p99)


def test_a_change_of_cores_is_followed_within_a_second_each_way() -> None:
    run = simulate(32, 8, 0.001, 30.0, changes=((10.0, 4, None), (20.0, 8, None)))
    assert 8 <= statistics.median(run.limits_between(5.0, 10.0)) <= 12
    after_drop = run.limits_between(11.0, 20.0)
    assert 4 <= statistics.median(after_drop) <= 6, statistics.median(after_drop)
    assert statistics.median(run.limits_between(21.0, 23.0)) >= 7  # (back within 3 s)
    assert run.throughput(11.0, 20.0) >= 0.95 * 4000
    back = run.limits_between(21.0, 30.0)
    assert 8 <= statistics.median(back) <= 12, statistics.median(back)
    # (one round in eight drains to 3/4 of the knee, and the model's server has no slack above
    # its cores: at least 93 % here; the 95 % is measured on the embedded server)
    assert run.throughput(21.0, 30.0) >= 0.93 * 8000


def test_an_overload_sheds_connections_rather_than_adding_them() -> None:
    """The service time times 5 for 5 s: the pool holds no more connections than before, fewer
    as it goes on (operations take more than 1.3 x the base: the share decays); back after."""
    run = simulate(32, 8, 0.001, 20.0, changes=((10.0, None, 0.005), (15.0, None, 0.001)))
    before = statistics.median(run.limits_between(5.0, 10.0))
    during = run.limits_between(10.0, 15.0)
    assert statistics.median(during) <= before
    assert min(during) < before  # (shed at once: the window still holds the fast times)
    assert max(during) <= round(before * GAINS[0]) + 1  # (no more than a probe above it)
    assert 8 <= statistics.median(run.limits_between(17.0, 20.0)) <= 12


def fleet(
    pools: int,
    tasks: int,
    cores: int,
    service: float,
    duration: float,
    *,
    stagger: float = 0.0,
    clocks: tuple[float, ...] = (),
    aligned: bool = True,
    client: float = 0.0,
    load: bool = False,
) -> list[tuple[float, list[int]]]:
    """``pools`` pools (the ``i``-th from ``i * stagger`` s) of ``tasks`` callers each, on one
    server of ``cores`` cores; every pool's limit, sampled every 0.5 s. ``clocks``: each pool's
    clock reads the time plus this (pools on different hosts); ``aligned``: each is told its
    offset from the wall clock (the time), as a front end does (``align_to_wall``). ``client``:
    each pool's client spends this long on every operation's answer, one at a time (its event
    loop), and tells its pool how long each waited for it (``client_lag``), with ``load`` its
    loop's load too (``client_load``)."""
    rng = random.Random(11)
    server = _Cores(cores)
    controllers = [AdaptiveLimit(1, 64, initial=2) for _ in range(pools)]
    clocks = clocks or (0.0,) * pools
    for controller, clock in zip(controllers, clocks, strict=True):
        controller.epoch = -clock if aligned else 0.0
    in_use = [0] * pools
    ends: list[tuple[float, int, float, int]] = []  # (end, id, start, pool; -1: it starts)
    loops = [0.0] * pools  # (when each client's loop is free)
    meters = [LoadMeter() for _ in range(pools)]
    answered: set[int] = set()  # (operations the server is done with, in their client's loop)
    ids = 0
    now = 0.0
    samples: list[tuple[float, list[int]]] = []

    def start_more(i: int) -> None:
        nonlocal ids
        while in_use[i] < min(tasks, controllers[i].limit):
            in_use[i] += 1
            ids += 1
            heapq.heappush(ends, (server.book(now, rng.expovariate(1.0 / service)), ids, now, i))

    start_more(0)
    for i in range(1, pools):
        heapq.heappush(ends, (i * stagger, -i, 0.0, -1))
    while ends and now < duration:
        end, key, began, i = heapq.heappop(ends)
        now = end
        if i < 0:
            start_more(-key)
            continue
        if client and key not in answered:
            server.finish()
            answered.add(key)
            start = max(end, loops[i])
            loops[i] = start + client
            controllers[i].client_lag(start - end, start + clocks[i])
            if load:
                meters[i].tell(controllers[i], start, clocks[i])
            meters[i].busy += client
            heapq.heappush(ends, (loops[i], key, began, i))
            continue
        if client:
            answered.discard(key)
        else:
            server.finish()
        in_use[i] -= 1
        controllers[i].sample(end - began, end + clocks[i], tasks > in_use[i] + 1, in_use[i] + 1)
        if not samples or now - samples[-1][0] >= 0.5:
            samples.append((now, [c.limit for c in controllers]))
        start_more(i)
    return samples


@pytest.mark.parametrize("stagger", [0.0, 5.0])
def test_a_fleet_shares_the_server_instead_of_piling_up(stagger: float) -> None:
    """Four pools of 32 callers on one server of 8 cores (together, or joining 5 s apart): each
    one's probes take throughput from the others, so each alone would climb without end. The
    share holds each pool's queue in the server near ``Adaptive.queue`` (2): the sum of their
    connections in use near the cores and 4 x 2 more, 16 (twice the knee, 8), and their limits,
    whole numbers at or above what is in use, a connection above it; the server busy. Each pool
    queues as much as the others (Vegas's fairness): none is starved."""
    samples = fleet(4, 32, 8, 0.001, 90.0, stagger=stagger)
    late = [limits for t, limits in samples if t >= 30.0]
    total = statistics.median(sum(limits) for limits in late)
    assert 8 <= total <= 16 + 2, total
    each = [statistics.median(limits[i] for limits in late) for i in range(4)]
    assert min(each) >= max(each) / 2, each


def test_pools_on_hosts_whose_clocks_differ_measure_their_base_together() -> None:
    """Four pools whose monotonic clocks are far apart (four hosts): told their clocks' offsets
    from the wall clock (NTP's, shared), their base rounds fall together, on a server they all
    left, and the fleet is held as on one host; on their own clocks, each measures its base on a
    server the others load, reads less of its operations' time as queueing, and holds more."""
    clocks = (0.0, 1234.567, 98765.4321, 3.3)
    on_wall = fleet(4, 32, 8, 0.001, 90.0, clocks=clocks)
    apart = fleet(4, 32, 8, 0.001, 90.0, clocks=clocks, aligned=False)
    held = statistics.median(sum(limits) for t, limits in on_wall if t >= 30.0)
    drifted = statistics.median(sum(limits) for t, limits in apart if t >= 30.0)
    assert 8 <= held <= 16 + 2, held
    assert drifted > held, (drifted, held)


def test_few_callers_keep_a_small_limit() -> None:
    """4 callers on 8 cores: the server could take more, the callers do not need it."""
    run = simulate(4, 8, 0.001, 5.0)
    assert max(run.limits_between(1.0, 5.0)) <= 6


def base_round_length(op_time: float) -> int:
    """Operations of ``op_time`` (one at a time: the floor) until the first base round ends,
    after rounds of 1 ms ones; those a round left over from the limit before it included."""
    controller = AdaptiveLimit(1, 64, Adaptive(base_every=1.0), initial=8)
    now = 0.0
    while controller.estimate is None or controller.estimate.gain != 0.0:
        now += 0.001 / controller.limit  # (limit at once, each 1 ms)
        controller.sample(0.001, now)
    ops = 1
    while not controller.sample(op_time, now + ops * op_time):
        ops += 1
    return ops


def test_a_base_round_is_cut_short_when_operations_are_slow() -> None:
    """A base round (its callers wait for it) lasts as long as 32 operations one after another
    take at the base's time, 4 at least: when they are slower than the base (an overload), 5 ms
    ones (here one at a time) end it after 7 (35 ms), not after 32 (160 ms)."""
    normal = base_round_length(0.001)
    slow = base_round_length(0.005)
    left_over = normal - 32
    assert 0 <= left_over < 64  # (the limit before it, less the floor)
    assert slow == left_over + 7
    assert base_round_length(0.1) == left_over + 4  # (4 at least: a sample of the base)


def test_operations_a_coarse_clock_sees_take_no_time_are_no_queue() -> None:
    """A clock too coarse to see an operation (Windows' event loop ticks every 15.6 ms) reports
    op times of 0: rounds still end on the time that passes between them, nothing divides by
    the zero, and the server is not read as queueing."""
    controller = AdaptiveLimit(1, 16, Adaptive(round_ops=8, base_every=1.0), initial=4)
    for i in range(1, 2000):
        controller.sample(0.0, i * 0.0156)  # (the clock moves between operations, not in them)
        assert 1 <= controller.limit <= 16
    est = controller.estimate
    assert est is not None and est.rounds > 100 and est.queued == 0.0 and est.op_time == 0.0


def test_a_pool_idle_for_hours_takes_up_its_rounds_again() -> None:
    """The share grows back with the time since the last round: after hours idle (a night),
    the next round's growth is bounded (``math.exp`` overflows past 709) and the limit is
    decided as before."""
    controller = AdaptiveLimit(1, 16, Adaptive(round_ops=8), initial=4)
    now = 0.0
    for _ in range(500):
        now += 0.001
        controller.sample(0.001, now)
    rounds = controller.estimate.rounds if controller.estimate else 0
    now += 8 * 3600.0
    for _ in range(500):
        now += 0.001
        controller.sample(0.001, now)
        assert 1 <= controller.limit <= 16
    assert controller.estimate is not None and controller.estimate.rounds > rounds + 10


def test_the_limit_stays_within_its_bounds_and_probes_in_a_cycle() -> None:
    controller = AdaptiveLimit(2, 5, initial=99)
    assert controller.limit == 5
    for i in range(1, 400):
        controller.sample(0.001, i * 0.0001)  # (as fast as anything: the ceiling)
        assert 2 <= controller.limit <= 5
    assert controller.estimate is not None and controller.estimate.gain in GAINS
    with pytest.raises(ValueError, match="floor <= ceiling"):
        AdaptiveLimit(3, 2)
    with pytest.raises(ValueError, match=r"Adaptive\.window must be an int >= 1"):
        AdaptiveLimit(1, 2, Adaptive(window=0))


def test_changes_are_reported_from_cruise_rounds_beyond_a_fraction() -> None:
    """A report (the pool's event and log line) is due when a round at gain 1 decides a limit
    more than ``report_change`` away from the one last reported: never for the probe's and the
    drain's excursions, never twice for one change."""
    controller = AdaptiveLimit(1, 64, Adaptive(round_ops=8, report_change=0.2), initial=2)
    server = _Cores(8)
    rng = random.Random(5)
    ends: list[tuple[float, int, float]] = []
    now, ids, in_use, reports = 0.0, 0, 0, 0
    while now < 3.0:
        while in_use < controller.limit:
            in_use += 1
            ids += 1
            heapq.heappush(ends, (server.book(now, rng.expovariate(1000.0)), ids, now))
        end, _, began = heapq.heappop(ends)
        now = end
        server.finish()
        in_use -= 1
        reported = controller.reported
        if not controller.sample(end - began, end):
            assert controller.take_report() is None  # (only a round's end decides)
            continue
        previous = controller.take_report()
        assert controller.take_report() is None
        est = controller.estimate
        assert est is not None
        if previous is None:
            assert est.gain != 1.0 or abs(controller.limit - reported) <= 0.2 * reported
            continue
        reports += 1
        assert est.gain == 1.0 and previous == reported and controller.reported == controller.limit
        assert abs(controller.limit - previous) > 0.2 * previous
    assert controller.estimate is not None
    assert 1 <= reports == controller.changes < controller.estimate.rounds / 10
    stats = controller.stats()
    assert (stats.limit, stats.rounds, stats.changes) == (
        controller.limit,
        controller.estimate.rounds,
        reports,
    )
    assert stats.knee == controller.estimate.knee and stats.share == controller.estimate.share
    with pytest.raises(ValueError, match=r"Adaptive\.report_change must be a number >= 0"):
        AdaptiveLimit(1, 2, Adaptive(report_change=-1.0))


# ---------------------------------------------------------------------------------------------
# in the pool's core: the limit holds checkouts back, and check-ins feed it


from poolkit import PoolOptions  # noqa: E402
from poolkit._core import PoolCore, Request, RequestState, StartConnect  # noqa: E402


def _core(**options: object) -> PoolCore:
    core = PoolCore(
        PoolOptions(background_interval=float("inf"), connect_timeout=None, **options),  # type: ignore[arg-type]  # (test options)
        "adaptive",
    )
    core.ready(0.0)
    core.take()
    return core


def _checkout(core: PoolCore, now: float) -> Request:
    req = Request(started=now, deadline=None)
    core.fast.request(req, now)
    for action in core.take()[0]:
        if isinstance(action, StartConnect):
            core.connected(action.conn, now, object())
    core.take()
    return req


def _state(req: Request) -> RequestState:
    return req.state  # (read anew: the core changed it since the last assert)


def test_an_adaptive_pool_lets_no_more_than_its_limit_be_in_use() -> None:
    """The limit starts at ``max_connecting`` (2): a third checkout waits in the queue though
    ``max_size`` has room, and no connect starts for it; a check-in hands it the connection."""
    core = _core(max_size=10, max_connecting=2, adaptive=Adaptive(round_ops=1000))
    view = core_view(core)
    shared = state_of(core)
    assert shared.adaptive is not None and shared.adaptive.limit == 2
    first, second, third = (_checkout(core, 0.0) for _ in range(3))
    assert first.state is second.state is RequestState.SERVED
    assert third.state is RequestState.WAITING and view.total == 2 and view.in_use == 2
    assert core.fast.lease_idle(0.0) is None  # (the fast path too: at the limit)
    assert first.conn is not None
    core.release(first.conn, 0.5)
    core.take()
    assert _state(third) is RequestState.SERVED and third.conn is first.conn
    assert view.in_use == 2


def test_an_adaptive_pool_takes_no_fast_path_and_learns_from_check_ins() -> None:
    """Every check-in is a sample; a round (here 4 operations) measures the throughput and the
    operation time (2 at a time, each 1 s: 2 a second, 1 s); the first rounds cruise at the
    initial limit, and a third checkout waits for a check-in."""
    core = _core(max_size=10, max_connecting=2, adaptive=Adaptive(round_ops=4))
    assert (handout_of(core)._lease_gen, handout_of(core)._release_gen) == (-1, -1)
    adaptive = state_of(core).adaptive
    assert adaptive is not None
    now = 0.0
    reqs = [_checkout(core, now) for _ in range(2)]
    for _ in range(2):
        now += 1.0
        for req in reqs:
            assert req.conn is not None
            assert core.fast.release_idle(req.conn) is False  # (no fast check-in)
            core.release(req.conn, now)
            core.take()
        reqs = [_checkout(core, now) for _ in range(2)]
    assert adaptive.estimate is not None and adaptive.estimate.rounds == 1
    assert adaptive.estimate.op_min == 1.0 and adaptive.estimate.rate_max == 2.0
    assert adaptive.limit == 2 and adaptive.estimate.gain == 1.0  # (cruising first)
    third = _checkout(core, now)
    assert third.state is RequestState.WAITING
    assert reqs[0].conn is not None
    core.release(reqs[0].conn, now + 1.0)
    core.take()
    assert _state(third) is RequestState.SERVED


def test_connections_beyond_the_next_probe_are_closed_once_idle_for_shed_after() -> None:
    """Six in use at first, then one at a time: the first probe (a round at 2 or more) finds
    the callers use one, and the knee falls to 1: the connections beyond what the next probe
    could use (ceil(1 x 1.25) + 1 = 3) are closed once available for ``shed_after`` (1 s),
    longest parked first, at a round's end; not before."""
    core = _core(
        max_size=10, max_connecting=6, adaptive=Adaptive(window=1, round_ops=4, shed_after=1.0)
    )
    reqs = [_checkout(core, 0.0) for _ in range(6)]
    for req in reqs:
        assert req.conn is not None
        core.release(req.conn, 0.1)
        core.take()
    now = 0.1
    totals = []
    while now < 6.0:
        req = _checkout(core, now)
        assert req.conn is not None
        now = round(now + 0.1, 6)
        core.release(req.conn, now)
        core.take()
        totals.append((now, core.stats().total))
    assert [n for t, n in totals if t <= 1.0] == [6] * 9  # (none idle for 1 s yet)
    assert totals[-1][1] == 3 and core.stats().connections_closed == {"idle": 3}
    adaptive = core.stats().adaptive
    assert adaptive is not None and adaptive.knee == pytest.approx(1.0)


def test_adaptive_needs_max_size_and_is_checked() -> None:
    with pytest.raises(ValueError, match="adaptive needs max_size"):
        PoolOptions(max_size=0, adaptive=Adaptive())
    with pytest.raises(TypeError, match=r"PoolOptions\.adaptive must be a poolkit\.Adaptive"):
        PoolOptions(adaptive=True)  # type: ignore[arg-type]  # (the wrong type on purpose)
    with pytest.raises(ValueError, match=r"Adaptive\.round_ops must be an int >= 1"):
        Adaptive(round_ops=0)
    with pytest.raises(ValueError, match=r"Adaptive\.report_change must be a number >= 0"):
        Adaptive(report_change=-0.1)
    with pytest.raises(ValueError, match=r"Adaptive\.shed_after must be >= 0 seconds or None"):
        Adaptive(shed_after=-1)
    with pytest.raises(ValueError, match=r"Adaptive\.base_every must be > 0 seconds, got 0"):
        Adaptive(base_every=0)
    with pytest.raises(TypeError, match=r"Adaptive\.base_every must be seconds as a float or a"):
        Adaptive(base_every="10s")  # type: ignore[arg-type]  # (the wrong type on purpose)
    with pytest.raises(ValueError, match=r"Adaptive\.queue must be a number in \(0, inf\)"):
        Adaptive(queue=0)
    # (durations as the other options take them: seconds, or a timedelta; read as float)
    adaptive = Adaptive(base_every=timedelta(seconds=5), shed_after=timedelta(milliseconds=500))
    assert (adaptive.base_every, adaptive.shed_after) == (5.0, 0.5)
    assert Adaptive(shed_after=None).shed_after is None
