"""The adaptive limit (issue 28): how many connections may be in use at once, decided from the
operation times the pool is told (check-out to check-in) and the times they end, nothing else.

Two loops decide it, both on *rounds* (at least ``round_ops`` operations, and at least as many
as the limit: a round's rate and mean are then steady enough to compare).

**The knee: a hill climb on the throughput's elasticity.** The rounds run in a cycle of eight
(BBR's): one at 1.25 x the level (a *probe*), one at 0.75 x (a *drain*), six at it. A probe and
the drain after it measure how the throughput answers the connections in use: the elasticity
``e = ln(rate_probe / rate_drain) / ln(busy_probe / busy_drain)``, ``busy`` being the round's
mean connections in use (Little's law: the sum of its operation times over its length). Below
the server's knee the throughput grows as the connections do (``e`` near 1); past it, it does
not (``e`` near 0), each operation only waits longer inside the server. The level moves by
``exp(0.4 * (e - target))`` a cycle, ``e`` smoothed over about four cycles: it settles where one
more connection in ten brings ``target`` (0.1) of one in ten more throughput. On a server with a
hard knee (cores, each busy or not) that is about 1.2 x the knee; on a soft one (a client or a
network on the way, queues in several places) where the curve has flattened, which is where a
sweep's "smallest size within 5 % of the best throughput" lies. A probe whose limit the callers
did not fill (fewer want a connection) caps the level at what they used; a pair of rounds whose
operation times say the server changed between them (slower with fewer in use, or slower with
more than their number explains) is not a sample.

Why not BBR's own estimate (the window's most operations a second times its least mean
operation time): it settles where the elasticity is about 0.56, well short of a soft knee (on
PostgreSQL on this machine: 2 connections for a curve that flattens at 8); and a gradient on the
operation time (Netflix's Gradient2, Envoy's filter) creeps up with the limit in a closed loop,
where the operation time grows with the connections past the knee.

**The share: what a fleet may put on one server.** Every pool of a fleet (processes, hosts, each
with its pool, one database) sees the others only as a slower server; each one's probes take
throughput from the others, so each sees an elasticity of about ``1 - its share`` and the sum of
their limits climbs without end. What tells them apart from a server with more room is the operation
time against the server's own, unloaded: the *base*, measured every ``base_every`` seconds (10) in a
short *base round* (as long as 32 operations take one after another at the base's time, at least 4
measured) that holds half the connections the server serves the pool unqueued (``busy - queued``
below; the floor at least): the pools of a fleet together hold half the server's cores, which leaves
it unloaded as a round at the floor does, and the callers wait a fraction of what the floor made
them wait (BBR v2's ProbeRTT at half its window, not BBR's 4 packets: measured in the model, the
longest wait every 10 s from 31-45 ms to 12-18 ms). The rounds are aligned on the wall clock
(``epoch``: the front end gives its clock's offset) so that pools on one host, or on hosts whose
clocks NTP keeps within a few milliseconds, measure it together, on a server they all left; the base
is the median of the last five (a round that short is noisy; a few seconds of overload, everything
slower, are not the new normal, and a server slower for good is believed after three, some 30 s).
From the base, TCP Vegas's estimate: of the connections the pool has in use (the window's median),
the part whose time is spent queueing in the server, ``busy * (1 - base / op_time)`` (``op_time``
the window's median round mean). While it is more than ``queue`` (2), the *share* decays (``exp(-dt
/ 15 s)``); else it grows back (``exp(dt / 2 s)``), never far above the level. The limit holds
``min(level, share)``: an overload sheds a little; a fleet holds the sum of its connections in use
near the server's cores plus ``queue`` each, and fairly (as Vegas's flows: every pool sees the same
operation time, so each holds the same number in use at that point; a guard on the operation time
alone, the same for every pool, would keep whatever split they started from, one pool starved). Why
a queue and not a ratio of times: a client that is its own bottleneck (one event loop, PostgreSQL's
answers parsed in Python) makes its operations slower as it holds more, as a server queueing does; a
ratio held near 1 (1.3 x) keeps it at 2 or 3 connections where its throughput grows to 6 or 8, and a
ratio loose enough for it lets a fleet pile up, where a queue of 2 does both.

**Room and heavier work (issue 40).** Vegas's estimate multiplies the base's error by the
connections in use (at 32, a base 6 % low reads as 2 queued): on a server with room it held a pool
at 13-17 of 32. The share now falls only while the typical operation also takes more than 1.5 x
the base (a fleet held at the cores plus ``queue`` each runs at twice the base or more). Heavier
work (every operation 5 x slower, the server not loaded) read as queueing until three base rounds
had measured it (30 s): a typical throughput 1.5 x below the one at the last base round now asks
for a *check* at the next tick of a tenth of ``base_every`` (on the wall clock, as the base
rounds): a base round whose mean is not a base (one pool of a fleet the others joined measures
alone, on a server they load) but tells whether halving the connections made the operations 1.5 x
faster. Not (not queueing), the share holds through the base period; and two rounds a tick or a
period apart, one of them a base round, that find the server slower than 1.5 x the base and not
queueing make the lower of them the base, its history restarted (one round alone, at the floor,
can be a fifth off). A probe no checkout waited through caps the level at the most in use at a
check-in (the front end tells it): the round's mean in use, the cap before, read 21-36 for 32
callers each always holding one of 32, and held the level a sixth short of ``max_size``.
A client that is its own bottleneck (one event loop) slows its operations as it holds more, as a
queueing server does: where the front end tells its loop's lag (``client_lag``, with ``now``),
the typical operation time is the rounds' less their mean lag (in the model, a client of 6,667
answers a second over an 8,000-a-second server: 97.9 % of the best static size told, 93.1 % not).
A loop's lag, measured as a callback made ready waits, misses a loop busy with its tasks' own work
(parsing answers): where the front end tells the client's *load* (``client_load``: the part of the
time its thread ran or waited for a processor) and the rounds' median is 0.9 or more, the client is
its own bottleneck and the share does not fall: the elasticity alone holds the level (a client that
cannot go faster gains nothing from more connections, and its probes say so); and its cycle is
twice as long, the same probe and drain then fourteen cruise rounds (each drain costs such a
client throughput, and the server its probes ask about has room).

Rules of this module
--------------------
* Pure: samples and ``now`` come from the caller; no I/O, no clock, no randomness.
* ``limit`` changes only at a round's end; it is a whole number within ``[floor, ceiling]``.
* The base moves only at a base round's end: the median of the last five, or (issue 40) the
  lower of two confirming a slower server; a check's mean is never a base alone.
* A change is *reported* (:meth:`AdaptiveLimit.take_report`: the pool's event and log line) when
  a cruise round's limit (gain 1: the probe and the drain are the cycle's own excursions, and
  the base round is the base's measure) differs from the one last reported by more than
  ``report_change`` of it.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

from ..options import Adaptive
from ..stats import AdaptiveStats

#: the gain of each round, in turn (BBR's ProbeBW cycle)
GAINS: Final = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
_PROBE: Final = 0
_DRAIN: Final = 1
#: the level's step a cycle, per unit of elasticity off target; the elasticity's smoothing
_STEP: Final = 0.4
_SMOOTH: Final = 0.25
#: the share's decay (while the server queues) and growth (while it does not), seconds
_SHARE_DOWN: Final = 15.0
_SHARE_UP: Final = 2.0
#: the most the share's growth is a power of e at once (``math.exp`` overflows past 709: a round
#: ending after half an hour idle would raise)
_GROW_MOST: Final = 30.0
#: a base round lasts as long as this many operations take one after another at the base's
#: time (its callers wait through it: short; shorter, and its mean is too noisy to hold a fleet,
#: the median of five rounds notwithstanding; a time, not a count, so that the rounds of a
#: fleet's pools, which begin a round apart, overlap however many connections each holds)
_BASE_OPS: Final = 32
#: ... and measures this many at least (slower operations, an overload: its callers wait no
#: longer than a round on the base's server)
_BASE_LEAST: Final = 4
#: a base round holds this part of the connections the pool has in use unqueued (Vegas's
#: estimate: ``busy - queued``, the server's cores a pool of a fleet gets), the floor at least:
#: the pools of a fleet, together, hold half the server's cores, unloaded (a base inflated by
#: queueing would take twice the cores to feed itself); its callers wait a fraction of what a
#: round at the floor made them (BBR v2's ProbeRTT, at half the estimated window, not 4 packets)
_BASE_GAIN: Final = 0.5
#: the base is the median of the last this many base rounds' (a base round is short, and its
#: mean noisy; a server slower for good is believed after half of them, some 30 s; an overload
#: of a few seconds, never)
_BASES: Final = 5
#: two rounds whose operation times differ by more than this (beyond what their connections in
#: use explain) ran on a changed server: no elasticity sample
_SAME_SERVER: Final = 1.5
#: the share falls only while the typical operation takes more than this times the base (issue
#: 40): Vegas's estimate multiplies the base's error by the connections in use (at 32, a base 6 %
#: low reads as 2 queued), so on a server with room it held a pool at 13-17 of 32; a fleet's
#: pools held at the cores plus ``queue`` each run at twice the base or more on 8 cores
_QUEUEING: Final = 1.5
#: two rounds a tick or a period apart (a check, below, and a base round, either first) that
#: read this far above the base and found the server not queueing make the lower of them the
#: base, its history restarted: heavier work (every operation 5 x slower, the server not loaded)
#: is believed within a base period, not after three base rounds (30 s)
_MOVED: Final = 1.5
#: a typical throughput ``_MOVED`` times below the one at the last base round asks for an early
#: *check*, at the next tick of ``base_every`` times this (on the wall clock as the base rounds):
#: a base round whose reading is not the base's (a pool of a fleet the others joined measures
#: alone, on a server they load) but tells whether halving the connections in use made the
#: operations faster: not ``_QUEUEING`` times faster, the server is not queueing them (heavier
#: work), and the share holds until the next base round measures the base anew
_EARLY: Final = 0.1
#: a client whose own thread (its event loop) ran or waited to run this part of the time, the
#: rounds' median (``client_load``), is its own bottleneck: its operations slow as it holds more
#: because their answers wait for it, not for the server, and the share does not fall (issue 40:
#: measured on this machine, the embedded server's client at 0.55 of its time with 4
#: connections and 0.97-0.98 from 12 on, where its throughput still rose by a quarter to 24; a
#: fleet of four such clients on one 8-core server, 0.66 each, the server the bottleneck)
_SATURATED: Final = 0.9
#: ... and such a client's cycle is this many times as long (its probe and drain the same, its
#: cruise longer): on a client-bound curve the drain to 0.75 x runs at 0.8 x the throughput (the
#: 32-core server at 1 ms here: 24 connections 18,455 a second, 16 13,272), a loss of a few per
#: cent over a cycle of eight, and the server the probes ask about has room; measured here, the
#: adaptive pool 1.025 x itself with the cycle of eight (8 rounds in turns, 0.91-1.13)
_LONGER: Final = 2


class AdaptiveLimit:
    """The limit on connections in use, decided round by round."""

    __slots__ = (
        "_at",
        "_base_period",
        "_base_round",
        "_bases",
        "_busies",
        "_check",
        "_decided_at",
        "_due",
        "_early",
        "_elasticity",
        "_every",
        "_held",
        "_lag_n",
        "_lag_sum",
        "_lags",
        "_least",
        "_load_n",
        "_load_sum",
        "_loads",
        "_most",
        "_op_sum",
        "_ops",
        "_probe",
        "_queue_max",
        "_rate_at_base",
        "_rates",
        "_report_change",
        "_round_ops",
        "_round_start",
        "_skip",
        "_suspect",
        "_target",
        "_times",
        "_waited",
        "base",
        "ceiling",
        "changes",
        "epoch",
        "estimate",
        "floor",
        "level",
        "limit",
        "reported",
        "share",
    )

    def __init__(
        self,
        floor: int,
        ceiling: int,
        options: Adaptive | None = None,
        *,
        initial: int | None = None,
    ) -> None:
        """Between ``floor`` and ``ceiling``, as ``options`` say (checked there; their defaults
        when None), from ``initial`` (the floor when None)."""
        if not 1 <= floor <= ceiling:
            raise ValueError(f"AdaptiveLimit: 1 <= floor <= ceiling, got {floor}, {ceiling}")
        if options is None:
            options = Adaptive()
        window = options.window
        self.floor = floor
        self.ceiling = ceiling
        #: connections that may be in use at once
        self.limit = floor if initial is None else min(max(initial, floor), ceiling)
        self.level = float(self.limit)
        self.share = float(ceiling)
        self.base: float | None = None
        #: the last round's decision and what it was made from (``stats()``; None before one)
        self.estimate: AdaptiveStats | None = None
        #: the limit last reported (at first, the initial one), and how many reports were made
        self.reported = self.limit
        self.changes = 0
        self._report_change = options.report_change
        self._target = options.target
        self._queue_max = options.queue
        self._every = options.base_every
        #: the wall clock's reading at this clock's zero (the front end's): the base rounds align
        #: on the wall clock, so that pools on different hosts (their clocks kept by NTP, their
        #: monotonic clocks apart) measure together; 0.0: on this clock
        self.epoch = 0.0
        self._due: int | None = None
        self._rates: deque[float] = deque(maxlen=window)
        self._times: deque[float] = deque(maxlen=window)
        self._busies: deque[float] = deque(maxlen=window)
        self._round_ops = options.round_ops
        #: the least operations the round under way takes (set with each decision: ``_decide``)
        self._least = max(self.limit, self._round_ops)
        self._at = 2  # (the first rounds cruise: a probe needs a level to probe from)
        self._round_start: float | None = None
        self._ops = 0
        self._op_sum = 0.0
        self._skip = 0
        self._probe: tuple[float, float, bool, float, int] | None = None
        self._waited = 0
        self._most = 0
        #: the client's own delay (``client_lag``): this round's, and the window's rounds' means
        self._lag_sum = 0.0
        self._lag_n = 0
        self._lags: deque[float] = deque(maxlen=window)
        #: the client's own load (``client_load``): this round's, and the window's rounds' means
        self._load_sum = 0.0
        self._load_n = 0
        self._loads: deque[float] = deque(maxlen=window)
        self._elasticity: float | None = None
        self._decided_at: float | None = None
        self._base_period: int | None = None
        self._base_round = False
        self._bases: deque[float] = deque(maxlen=_BASES)
        #: the typical throughput when the last base round ended (the first round's, before)
        self._rate_at_base: float | None = None
        #: the early tick a check waits for (a throughput fallen asked for it), or None; whether
        #: the base round under way is a check; the base period through which the share holds
        self._early: int | None = None
        self._check = False
        self._held: int | None = None
        #: a base round that found the server slower and not queueing (its mean, and whether it
        #: was a fleet's base round, not a check), until another confirms it
        self._suspect: tuple[float, bool] | None = None

    def client_lag(self, lag: float, now: float) -> None:
        """The front end's measure of the client's own delay at ``now``: how late a callback
        due then ran (its event loop's lag, seconds). An operation's time, check-out to
        check-in, includes it: where the client is its own bottleneck, its operations slow as
        it holds more, as a server queueing makes them (issue 40). The typical operation time
        Vegas's estimate and the share read is the rounds' less their mean lag: the server's
        queue, not the client's (a base round, at few connections, has little). A sample from
        before the round under way (late) is not the round's."""
        start = self._round_start
        if lag >= 0.0 and (start is None or now >= start):
            self._lag_sum += lag
            self._lag_n += 1

    def client_load(self, load: float, now: float) -> None:
        """The front end's measure of the client's own saturation over the interval ending at
        ``now``: the part of it its thread (the event loop's) ran or waited for a processor to
        run, 0 to 1. Where the rounds' median is ``_SATURATED`` or more, the client is its own
        bottleneck: its operations slow as it holds more connections because their answers wait
        for it, as a queueing server's would, and the share does not fall (the throughput's
        elasticity alone holds the level: a client that cannot go faster gains nothing from
        more). A pool of a fleet whose clients have room to spare (the server is the bottleneck)
        is held by the share as before. A sample from before the round under way is not its."""
        start = self._round_start
        if load >= 0.0 and (start is None or now >= start):
            self._load_sum += load
            self._load_n += 1

    def sample(self, op_time: float, now: float, queued: bool = True, in_use: int = 0) -> bool:
        """An operation that took ``op_time`` seconds ended at ``now``; ``queued``: checkouts
        were waiting for a connection then (the callers want more than the limit); ``in_use``:
        the connections in use as it ended, its own included (0: not told). Returns whether a
        round ended (``limit`` was decided anew: the same, or another)."""
        start = self._round_start
        if start is None:
            start = self._round_start = now - op_time  # (the first round began with it)
        if not op_time >= 0.0:
            return False
        if self._skip:
            # (the operations a change of limit leaves over from before it are not the round's)
            self._skip -= 1
            if not self._skip:
                self._round_start = now
            return False
        # (the path of every check-in of an adaptive pool: what a round's end needs, counted,
        # and nothing else before the least operations a round takes, ``_least``)
        ops = self._ops = self._ops + 1
        self._op_sum += op_time
        if queued:
            self._waited += 1
        if in_use > self._most:
            self._most = in_use
        if ops < self._least:
            return False
        elapsed = now - start
        if self._base_round:
            # (as long as _BASE_OPS operations take one after another on the base's server,
            # whatever it holds: the rounds of a fleet's pools, which end a round apart,
            # overlap; at least _BASE_LEAST measured)
            base = self.base
            assert base is not None  # (set at the first round's end, before any base round)
            if elapsed < min(self._round_ops, _BASE_OPS) * base:
                return False
        if elapsed <= 0.0:
            return False
        rate = ops / elapsed
        mean = self._op_sum / ops
        busy = self._op_sum / elapsed  # (the round's mean connections in use: Little's law)
        wanted = self._waited * 2 >= ops  # (checkouts waited at half its check-ins)
        self._rates.append(rate)
        self._times.append(mean)
        if not self._base_round:
            self._busies.append(busy)
        self._round_start = now
        self._ops = 0
        self._op_sum = 0.0
        self._waited = 0
        most, self._most = self._most, 0
        lag = self._lag_sum / self._lag_n if self._lag_n else 0.0
        self._lag_sum, self._lag_n = 0.0, 0
        load = self._load_sum / self._load_n if self._load_n else None
        self._load_sum, self._load_n = 0.0, 0
        self._decide(rate, mean, busy, wanted, now, most, lag, load)
        return True

    def _decide(
        self,
        rate: float,
        mean: float,
        busy: float,
        wanted: bool,
        now: float,
        most: int,
        lag: float,
        load: float | None,
    ) -> None:
        ran = self.limit
        measured = self._base_round
        checked = measured and self._check
        if not measured:
            self._lags.append(lag)
            if load is not None:
                self._loads.append(load)
        loads = sorted(self._loads)
        # (the client its own bottleneck: its operations' slowing is its own, not the server's)
        saturated = bool(loads) and loads[len(loads) // 2] >= _SATURATED
        if not measured:
            if self.base is None:
                self.base = mean  # (until the first base rounds: the first round's)
                self._bases.append(mean)
            if self._at == _PROBE:
                self._probe = (busy, rate, wanted, mean, most)
            elif self._at == _DRAIN and self._probe is not None:
                self._climb(busy, rate, mean)
        lags = sorted(self._lags)
        times = sorted(self._times)
        # (the server's: less the client's own delay, where the front end measures it)
        typical = max(times[len(times) // 2] - (lags[len(lags) // 2] if lags else 0.0), 0.0)
        busies = sorted(self._busies)
        wall = now + self.epoch
        period = math.floor(wall / self._every)
        tick = math.floor(wall / (self._every * _EARLY))
        if self._base_period is None:
            self._base_period = period
        if measured:
            self._base_round = self._check = False
            self._measured(mean, typical, checked, period, tick)
        base = self.base
        assert base is not None
        held = self._held == period  # (a base round found the server not queueing)
        # (Vegas: of the connections in use, the part whose time is queueing in the server; none
        # where the clock did not see the operations take any time)
        queued = 0.0
        if busies and typical > 0.0:
            queued = busies[len(busies) // 2] * max(1.0 - base / typical, 0.0)
        if self._decided_at is not None:
            dt = now - self._decided_at
            if queued > self._queue_max and typical > _QUEUEING * base and not saturated:
                if not held:
                    self.share *= math.exp(-dt / _SHARE_DOWN)
            else:
                # (a pool idle for long grows it back at most this much: clamped below anyway)
                self.share *= math.exp(min(dt / _SHARE_UP, _GROW_MOST))
        self._decided_at = now
        floor, ceiling = self.floor, self.ceiling
        level = min(max(self.level, floor), ceiling)
        self.share = min(max(self.share, floor), level * GAINS[_PROBE] + 1.0, ceiling)
        self.level = level = min(level, self.share * GAINS[_PROBE])  # (no run-away above it)
        hold = min(level, self.share)
        rates = sorted(self._rates)
        rate_now = rates[len(rates) // 2]
        then = self._rate_at_base
        if then is None or measured:
            self._rate_at_base = rate_now  # (a base round just ended: what it is measured by)
        elif self._early is None and not held and rate_now * _MOVED < then:
            self._early = tick  # (the server slowed, or is shared anew: a check at the next tick)
        regular = period != self._base_period
        if regular or (self._early is not None and tick != self._early):
            self._check = not regular
            self._base_period = period
            self._early = None
            self._base_round = True
            gain = 0.0
            # (BBR v2's ProbeRTT: not the floor but half of what the server serves unqueued)
            served = busies[len(busies) // 2] - queued if busies else 0.0
            limit = min(max(math.floor(_BASE_GAIN * served), floor), ceiling)
        else:
            # (a client its own bottleneck cruises twice as long between a probe and the next:
            # each drain costs it throughput, and its server has room)
            self._at = (self._at + 1) % (len(GAINS) * (_LONGER if saturated else 1))
            gain = GAINS[self._at] if self._at < len(GAINS) else 1.0
            limit = round(hold * gain)
            if self._at == _PROBE:
                limit = max(limit, round(hold) + 1)  # (a probe tries one more at least)
            elif self._at == _DRAIN:
                limit = min(limit, round(hold) - 1)
            limit = min(max(limit, floor), ceiling)
        self._skip = max(ran - limit, 0)
        self.limit = limit
        # (a base round: at least _BASE_LEAST, and as long as _BASE_OPS take at the base's time;
        # another: at least round_ops, and as many as the limit)
        self._least = _BASE_LEAST if self._base_round else max(limit, self._round_ops)
        reported = self.reported
        if gain == 1.0 and abs(limit - reported) > self._report_change * reported:
            self._due = reported
            self.reported = limit
            self.changes += 1
        self.estimate = AdaptiveStats(
            limit=limit,
            floor=floor,
            ceiling=ceiling,
            knee=level,
            elasticity=self._elasticity,
            share=self.share,
            rate_max=max(self._rates),
            op_min=times[0],
            op_time=typical,
            base_op_time=base,
            queued=queued,
            client_load=loads[len(loads) // 2] if loads else None,
            gain=gain,
            rounds=1 if self.estimate is None else self.estimate.rounds + 1,
            changes=self.changes,
        )

    def _measured(self, mean: float, typical: float, checked: bool, period: int, tick: int) -> None:
        """A base round (or a ``checked`` one, early) ended, ``mean`` its mean operation time:
        the base, the share held, a check asked for."""
        base = self.base
        assert base is not None  # (set at the first round's end, before any base round)
        calm = mean * _QUEUEING > typical  # (halving them did not make them 1.5 x faster)
        slower = mean > _MOVED * base
        if calm and (checked or slower):
            self._held = period  # (the server is not queueing them: the share holds)
        suspect = self._suspect
        if calm and slower and suspect is not None and (suspect[1] or not checked):
            # (two rounds a tick or a period apart, one of them a fleet's base round, found the
            # server slower and not queueing: it is, unloaded; the base is the lower of them)
            self._bases.clear()
            self._bases.append(min(mean, suspect[0]))
            self._suspect = None
        elif calm and slower:
            # (one round, one pool's check or a single connection's noise, is not believed
            # alone: another at the next tick, or the next base round, confirms it)
            self._suspect = (mean, not checked)
            if not checked:
                self._early = tick
        else:
            self._suspect = None
            if not checked:
                self._bases.append(mean)
        bases = sorted(self._bases)
        self.base = bases[(len(bases) - 1) // 2]  # (of two, the lower)

    def _climb(self, busy: float, rate: float, mean: float) -> None:
        """A drain round (``busy``, ``rate``, ``mean``) ended after a probe: the level climbs or
        descends by the elasticity between them; a probe no checkout waited through caps it."""
        assert self._probe is not None
        busy_p, rate_p, wanted, mean_p, most = self._probe
        self._probe = None
        self._elastic(busy_p, rate_p, mean_p, busy, rate, mean)
        if not wanted:
            # (the callers want no more than they used: the most in use at a check-in, when
            # told; the round's mean, Little's law's, is noisy: 21-36 for 32 callers each always
            # holding one of 32, and a cap at it, with no climb after, held the level at the
            # least reading, a sixth short of max_size: issue 40. The elasticity is measured all
            # the same)
            used = float(most) if most else busy_p
            self.level = min(self.level, max(used, float(self.floor)))

    def _elastic(
        self, busy_p: float, rate_p: float, mean_p: float, busy: float, rate: float, mean: float
    ) -> None:
        """The level moves by the elasticity of a probe against the drain after it, when they
        are a sample (more in use in the probe, on the same server)."""
        if busy <= 0.0 or busy_p <= 1.05 * busy or rate <= 0.0:
            return  # (no more in use in the probe, or a clock that saw no time pass in them)
        same = mean <= _SAME_SERVER * mean_p and mean_p <= _SAME_SERVER * mean * busy_p / busy
        if not same:
            return
        e = math.log(rate_p / rate) / math.log(busy_p / busy)
        e = min(max(e, -0.5), 1.5)  # (one pair's noise moves the level a step at most)
        smooth = self._elasticity
        smooth = e if smooth is None else smooth + _SMOOTH * (e - smooth)
        self._elasticity = smooth
        self.level *= math.exp(_STEP * (smooth - self._target))

    def take_report(self) -> int | None:
        """The limit reported before, if a change is due to be reported (then no longer)."""
        due, self._due = self._due, None
        return due

    def stats(self) -> AdaptiveStats:
        """The limit and what it was decided from, now (the limit changes only at a round's
        end: the last decision's record, or before the first the initial limit)."""
        if self.estimate is not None:
            return self.estimate
        return AdaptiveStats(
            limit=self.limit,
            floor=self.floor,
            ceiling=self.ceiling,
            knee=self.level,
            share=self.share,
            changes=self.changes,
        )

    def __repr__(self) -> str:
        return f"<AdaptiveLimit {self.limit} in [{self.floor}, {self.ceiling}] {self.estimate}>"
