"""A run against time: what the parent samples every :data:`INTERVAL` seconds (the pools' limit
and connections, the server's count, throughput, the interval's waits and operation times), for
``--adaptive``'s summary, ``--plot`` and the JSON document.

Rules of this module
--------------------
* ``t`` is seconds since the embedded server started (its ``--sim-schedule`` is counted from
  there), else since the run's processes were told to go.
* An interval's quantiles come from the difference of the run's histograms at its two ends:
  within a bucket's width (~1 %) as the run's own; its ``max`` is the top bucket's value.
* Warm-up intervals carry the pools' gauges and no throughput or times (nothing is counted
  while warming up).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from .histogram import Histogram
from .measure import Gauges, Tally

__all__ = ["INTERVAL", "Timeline", "TimelinePoint", "limit_summary", "pool_limits"]

#: seconds between two samples
INTERVAL = 0.25


@dataclasses.dataclass(frozen=True, slots=True)
class TimelinePoint:
    """One interval, ending at ``t``. ``limit``: the adaptive pools' limits added up (``None``
    without ``--adaptive``), ``limits``: each one's, by process (a fleet's share of the server);
    ``connections``, ``in_use``, ``waiting``: the pools' (added up) at
    its end; ``server``: the run's connections the server counts (``None``: it cannot say);
    ``throughput``: operations a second over it; times in seconds."""

    t: float
    measured: bool
    limit: int | None
    limits: tuple[int, ...] | None
    connections: int
    in_use: int
    waiting: int
    server: int | None
    throughput: float
    wait_p99: float
    wait_max: float
    op_p50: float
    op_p99: float
    #: the time a caller spent, checkout wait and operation added up
    total_p99: float = 0.0
    total_max: float = 0.0

    def to_json(self) -> dict[str, Any]:
        ms = 1e3
        return {
            "t": round(self.t, 3),
            "measured": self.measured,
            "limit": self.limit,
            "limits": None if self.limits is None else list(self.limits),
            "connections": self.connections,
            "in_use": self.in_use,
            "waiting": self.waiting,
            "server": self.server,
            "throughput": round(self.throughput, 1),
            "wait_p99_ms": round(self.wait_p99 * ms, 3),
            "wait_max_ms": round(self.wait_max * ms, 3),
            "op_p50_ms": round(self.op_p50 * ms, 3),
            "op_p99_ms": round(self.op_p99 * ms, 3),
            "total_p99_ms": round(self.total_p99 * ms, 3),
            "total_max_ms": round(self.total_max * ms, 3),
        }


class Timeline:
    """Samples a run as its reports come in (:meth:`sample` at every report; it keeps one an
    interval)."""

    def __init__(self, origin: float, adaptive: bool) -> None:
        self.origin = origin  # (perf_counter of t = 0)
        self.adaptive = adaptive
        self.points: list[TimelinePoint] = []
        self._last_at: float | None = None
        self._last_ops = 0
        self._last_measured = 0.0
        self._wait = Histogram()
        self._op = Histogram()
        self._total = Histogram()

    def sample(
        self,
        now: float,
        warming: bool,
        tally: Tally,
        gauges: Gauges,
        server: int | None,
        measured: float,
        limits: tuple[int, ...] = (),
    ) -> None:
        """The run at ``now`` (``measured``: the workers' measured seconds, the clock their
        counts are on: a rate over the parent's own would jump with the reports' arrival;
        ``limits``: each process's pool's, in process order)."""
        if self._last_at is not None and now - self._last_at < INTERVAL:
            return
        elapsed = measured - self._last_measured
        if elapsed <= 0.0:
            elapsed = 0.0 if self._last_at is None else now - self._last_at
        wait = tally.wait.since(self._wait)
        op = tally.latency.since(self._op)
        total = tally.total.since(self._total)
        ops = tally.ops - self._last_ops
        self.points.append(
            TimelinePoint(
                t=now - self.origin,
                measured=not warming,
                limit=gauges.limit if self.adaptive else None,
                limits=limits if self.adaptive else None,
                connections=gauges.total,
                in_use=gauges.in_use,
                waiting=gauges.waiting,
                server=server,
                throughput=ops / elapsed if elapsed > 0 else 0.0,
                wait_p99=wait.quantile(0.99),
                wait_max=wait.max if wait.count else 0.0,
                op_p50=op.quantile(0.5),
                op_p99=op.quantile(0.99),
                total_p99=total.quantile(0.99),
                total_max=total.max if total.count else 0.0,
            )
        )
        self._last_at = now
        self._last_measured = measured
        self._last_ops = tally.ops
        self._wait = tally.wait.copy()
        self._op = tally.latency.copy()
        self._total = tally.total.copy()


def pool_limits(points: list[TimelinePoint]) -> list[float]:
    """Each process's pool's limit, the median over the measured intervals, in process order
    (empty without ``--adaptive``): how a fleet shares the server."""
    rows = [p.limits for p in points if p.measured and p.limits]
    if not rows:
        return []
    pools = max(len(row) for row in rows)
    return [statistics.median(row[i] for row in rows if len(row) > i) for i in range(pools)]


def limit_summary(points: list[TimelinePoint]) -> tuple[float, int, int, int] | None:
    """(median, least, most, last) of the limit over the measured intervals; ``None`` without
    one."""
    limits = [p.limit for p in points if p.measured and p.limit is not None]
    if not limits:
        return None
    return statistics.median(limits), min(limits), max(limits), limits[-1]
