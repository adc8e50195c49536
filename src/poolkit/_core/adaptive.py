"""The adaptive limit (issue 28): how many connections may be in use at once, decided from the
operation times the pool is told (check-out to check-in) and the time they end, nothing else.

The estimate is BBR's (TCP's "bottleneck bandwidth and round-trip time"), for a pool: the most
operations the server completes per second (``rate_max``, the highest of the last rounds') times
the time an operation takes when nothing queues (``op_min``, the lowest of the last rounds' mean
operation times) is how many operations the server works on at once: its knee. Fewer in use and
it idles; more and they queue inside it, each slower, for no more throughput. The limit is that
product, scaled each round by a gain that cycles: one round at 1.25 (probe: does more go
faster?), one at 0.75 (drain what the probe queued), six at 1. A round ends once as many
operations as the limit completed, and at least ``round_ops``: a round's mean and rate are then
steady enough that the window's extremes are not its noise (the mean of 64 exponential draws
varies by an eighth).

Why this and not a gradient on the operation time (Netflix's Gradient2, Envoy's filter): with
callers waiting, a pool is a closed loop, where the operation time grows with the limit past
the knee; an average of it drifts up with the limit and the limit creeps up with it. A minimum
of single operation times (Vegas) fails on servers whose times vary (the minimum of many draws
of an exponential is near 0). Rounds' means and rates are robust to both, and over the same
window (``window`` rounds, a whole gain cycle and more) the low bias of the least mean and the
high one of the most rate cancel. The window lets a server that changes (fewer cores, a slower
query) be seen: what is older is forgotten.

Rules of this module
--------------------
* Pure: samples and ``now`` come from the caller; no I/O, no clock, no randomness.
* ``limit`` changes only at a round's end; it is a whole number within ``[floor, ceiling]``.
* A change is *reported* (:meth:`AdaptiveLimit.take_report`: the pool's event and log line) when
  a cruise round's limit (gain 1: the probe and the drain are the cycle's own excursions, a
  quarter either way each cycle) differs from the one last reported by more than
  ``report_change`` of it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from ..stats import AdaptiveStats

#: the gain of each round, in turn (BBR's ProbeBW cycle): the drain at 0.75 takes the pool below
#: the knee for a round, where the operation time is the server's own, unqueued (a drain that
#: stays above the knee lets the least mean, and then the limit, creep up)
GAINS: Final = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class Estimate:
    """What the last round's decision was made from."""

    rate_max: float  #: operations a second, the most of the window's rounds
    op_min: float  #: seconds, the least of the window's rounds' mean operation times
    gain: float  #: this round's gain
    rounds: int  #: rounds ended so far

    @property
    def knee(self) -> float:
        """Operations the server works on at once, estimated: ``rate_max * op_min``."""
        return self.rate_max * self.op_min


class AdaptiveLimit:
    """The limit on connections in use, decided round by round."""

    __slots__ = (
        "_due",
        "_gain_at",
        "_op_sum",
        "_ops",
        "_rates",
        "_report_change",
        "_round_ops",
        "_round_start",
        "_times",
        "ceiling",
        "changes",
        "estimate",
        "floor",
        "limit",
        "reported",
    )

    def __init__(
        self,
        floor: int,
        ceiling: int,
        *,
        initial: int | None = None,
        window: int = 10,
        round_ops: int = 64,
        report_change: float = 0.2,
    ) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError(f"AdaptiveLimit: 1 <= floor <= ceiling, got {floor}, {ceiling}")
        if window < 1 or round_ops < 1:
            raise ValueError("AdaptiveLimit: the window and a round hold at least one")
        if not report_change >= 0.0:
            raise ValueError(f"AdaptiveLimit: report_change >= 0, got {report_change!r}")
        self.floor = floor
        self.ceiling = ceiling
        #: connections that may be in use at once
        self.limit = floor if initial is None else min(max(initial, floor), ceiling)
        self.estimate: Estimate | None = None
        #: the limit last reported (at first, the initial one), and how many reports were made
        self.reported = self.limit
        self.changes = 0
        self._report_change = report_change
        self._due: int | None = None
        self._rates: deque[float] = deque(maxlen=window)
        self._times: deque[float] = deque(maxlen=window)
        self._round_ops = round_ops
        self._gain_at = 0
        self._round_start: float | None = None
        self._ops = 0
        self._op_sum = 0.0

    def sample(self, op_time: float, now: float) -> bool:
        """An operation that took ``op_time`` seconds ended at ``now``. Returns whether a round
        ended (``limit`` was decided anew: the same, or another)."""
        if self._round_start is None:
            self._round_start = now - op_time  # (the first round began with this operation)
        if not op_time >= 0.0:
            return False
        self._ops += 1
        self._op_sum += op_time
        elapsed = now - self._round_start
        if self._ops < max(self.limit, self._round_ops) or elapsed <= 0.0:
            return False
        self._rates.append(self._ops / elapsed)
        self._times.append(self._op_sum / self._ops)
        self._round_start = now
        self._ops = 0
        self._op_sum = 0.0
        self._decide()
        return True

    def _decide(self) -> None:
        rate_max = max(self._rates)
        op_min = min(self._times)
        gain = GAINS[self._gain_at]
        self._gain_at = (self._gain_at + 1) % len(GAINS)
        rounds = 1 if self.estimate is None else self.estimate.rounds + 1
        self.estimate = Estimate(rate_max, op_min, gain, rounds)
        knee = rate_max * op_min
        limit = min(max(round(knee * gain), self.floor), self.ceiling)
        if gain > 1.0 and limit == round(knee):
            limit = min(limit + 1, self.ceiling)  # (a probe tries one more at least)
        self.limit = limit
        reported = self.reported
        if gain == 1.0 and abs(limit - reported) > self._report_change * reported:
            self._due = reported
            self.reported = limit
            self.changes += 1

    def take_report(self) -> int | None:
        """The limit reported before, if a change is due to be reported (then no longer)."""
        due, self._due = self._due, None
        return due

    def stats(self) -> AdaptiveStats:
        """The limit and what it was decided from, now."""
        est = self.estimate
        if est is None:
            return AdaptiveStats(
                limit=self.limit, floor=self.floor, ceiling=self.ceiling, changes=self.changes
            )
        return AdaptiveStats(
            limit=self.limit,
            floor=self.floor,
            ceiling=self.ceiling,
            knee=est.knee,
            rate_max=est.rate_max,
            op_min=est.op_min,
            gain=est.gain,
            rounds=est.rounds,
            changes=self.changes,
        )

    def __repr__(self) -> str:
        return f"<AdaptiveLimit {self.limit} in [{self.floor}, {self.ceiling}] {self.estimate}>"
