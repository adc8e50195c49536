"""A mergeable latency histogram: log-spaced buckets, about 1 % wide.

Rules of this module
--------------------
* Values are seconds (>= 0); a bucket is ``floor(log(ns) * SCALE)``, so two histograms from
  different processes merge by adding counts, and a quantile is within a bucket's width (~1 %).
* ``min`` and ``max`` are exact; quantiles report a bucket's midpoint (clamped to min..max).
"""

from __future__ import annotations

import math

__all__ = ["Histogram"]

SCALE = 100.0  # buckets per factor e: each about 1 % wide


def _at(key: int, within: float) -> float:
    """Seconds at ``within`` (0: its low edge, 1: its high one) of bucket ``key`` (0: values
    of a nanosecond or less)."""
    return math.exp((key + within) / SCALE) / 1e9 if key else 0.0


class Histogram:
    """Counts of values by bucket; picklable (sent from a worker process to the parent)."""

    __slots__ = ("buckets", "count", "max", "min", "total")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = 0.0

    def record(self, seconds: float) -> None:
        ns = seconds * 1e9
        key = int(math.log(ns) * SCALE) if ns > 1.0 else 0
        buckets = self.buckets
        buckets[key] = buckets.get(key, 0) + 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds
        if seconds < self.min:
            self.min = seconds

    def merge(self, other: Histogram) -> None:
        for key, n in other.buckets.items():
            self.buckets[key] = self.buckets.get(key, 0) + n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def copy(self) -> Histogram:
        out = Histogram()
        out.merge(self)
        return out

    def since(self, earlier: Histogram) -> Histogram:
        """The values recorded after ``earlier`` (a copy of this histogram) was taken: ``min``
        and ``max`` are then its lowest and highest buckets' edges (``max`` at most this one's)."""
        out = Histogram()
        for key, n in self.buckets.items():
            left = n - earlier.buckets.get(key, 0)
            if left > 0:
                out.buckets[key] = left
                out.count += left
        out.total = max(self.total - earlier.total, 0.0)
        if out.count:
            out.min = _at(min(out.buckets), 0.0)
            out.max = min(_at(max(out.buckets), 1.0), self.max)
        return out

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def quantile(self, q: float) -> float:
        """The value below which a fraction ``q`` of the values lie (0 when empty)."""
        if not self.count:
            return 0.0
        if q >= 1.0:
            return self.max
        rank = q * self.count
        seen = 0
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen >= rank:
                return min(max(_at(key, 0.5), self.min), self.max)
        return self.max

    def __getstate__(self) -> tuple[dict[int, int], int, float, float, float]:
        return (self.buckets, self.count, self.total, self.min, self.max)

    def __setstate__(self, state: tuple[dict[int, int], int, float, float, float]) -> None:
        self.buckets, self.count, self.total, self.min, self.max = state
