"""The results of ``poolkit bench``: per run (a sweep's point), the recommendation, and the JSON
document (schema in ``docs/bench.md``; its version is :data:`SCHEMA`).

Rules of this module
--------------------
* Times in results are milliseconds, rates operations per second.
* The recommendation weighs throughput and checkout waits, as a person sizing a pool does:
  among the runs with at most :data:`ERROR_BUDGET` errors whose throughput is within
  :data:`WITHIN` of the best, the smallest value whose callers wait no longer for a connection
  than they hold one (median checkout wait <= median operation time, or under
  :data:`WAIT_FLOOR`); if none does, the one whose callers wait least. It always says why.
* A ``max_size`` sweep never recommends a size its pools could not use: every size from the
  connections a pool could have in use (see :func:`_ceiling`) up is one pool, counted as that
  size (their differences are noise).
* Why waits: with a fixed number of callers, a pool too small for them can reach the same
  throughput (each operation is quicker when fewer run at once), but its callers queue in the
  pool: every request pays the wait, one slow operation holds up all the callers behind it,
  and a burst above the measured load meets ``wait_queue_timeout``. Past the size where the
  wait falls below the operation time, more connections only move the queue to the server.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .config import RunConfig, Sweep
from .histogram import Histogram
from .measure import Tally
from .timeline import TimelinePoint, limit_summary, pool_limits

__all__ = ["SCHEMA", "BenchResult", "PointResult", "Recommendation", "recommend"]

SCHEMA = "poolkit.bench/1"
WITHIN = 0.05
ERROR_BUDGET = 0.01
#: a median checkout wait this short (seconds) never counts against a run: the pool's own
#: hand-off costs about that much
WAIT_FLOOR = 1e-4


def _ms(h: Histogram) -> dict[str, float]:
    return {
        "p50": round(h.quantile(0.50) * 1e3, 3),
        "p99": round(h.quantile(0.99) * 1e3, 3),
        "max": round(h.max * 1e3, 3),
        "mean": round(h.mean * 1e3, 3),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class PointResult:
    """One measured run."""

    max_size: int
    min_size: int
    max_connecting: int
    concurrency: int
    processes: int
    seconds: float
    tally: Tally
    client_connections_peak: int
    #: the most connections one pool had (the largest of the processes' pools)
    pool_peak: int
    server_connections_peak: int | None
    connections_created: int
    left_open: int
    server_left_open: int | None
    interrupted: bool
    #: the pools found their limit (``--adaptive``)
    adaptive: bool = False
    #: the run against time (see ``timeline``)
    timeline: tuple[TimelinePoint, ...] = ()

    @property
    def ops(self) -> int:
        return self.tally.ops

    @property
    def errors(self) -> int:
        return sum(self.tally.errors.values())

    @property
    def throughput(self) -> float:
        return self.tally.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def error_fraction(self) -> float:
        done = self.ops + self.errors
        return self.errors / done if done else 0.0

    def value(self, param: str) -> int:
        return int(getattr(self, param))

    def limit(self) -> tuple[float, int, int, int] | None:
        """The adaptive limit over the measured phase (the pools' added up): (median, least,
        most, last); ``None`` without ``--adaptive``."""
        return limit_summary(list(self.timeline)) if self.adaptive else None

    def pool_limits(self) -> list[float]:
        """Each process's pool's adaptive limit, its median over the measured phase, in process
        order (empty without ``--adaptive``)."""
        return pool_limits(list(self.timeline)) if self.adaptive else []

    def to_json(self) -> dict[str, Any]:
        return {
            "max_size": self.max_size,
            "min_size": self.min_size,
            "max_connecting": self.max_connecting,
            "concurrency": self.concurrency,
            "processes": self.processes,
            "seconds": round(self.seconds, 3),
            "ops": self.ops,
            "throughput": round(self.throughput, 1),
            "errors": dict(sorted(self.tally.errors.items())),
            "wait_ms": _ms(self.tally.wait),
            "latency_ms": _ms(self.tally.latency),
            "total_ms": _ms(self.tally.total),
            "connections": {
                "client_peak": self.client_connections_peak,
                "pool_peak": self.pool_peak,
                "server_peak": self.server_connections_peak,
                "created": self.connections_created,
                "left_open": self.left_open,
                "server_left_open": self.server_left_open,
            },
            "interrupted": self.interrupted,
            "adaptive": self._limit_json(),
            "timeline": [p.to_json() for p in self.timeline],
        }

    def _limit_json(self) -> dict[str, Any] | None:
        if not self.adaptive:
            return None
        median, least, most, last = self.limit() or (None, None, None, None)
        pools = self.pool_limits()
        return {"median": median, "min": least, "max": most, "last": last, "pools": pools}


@dataclasses.dataclass(frozen=True, slots=True)
class Recommendation:
    param: str
    value: int
    throughput: float
    best_value: int
    best_throughput: float
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "value": self.value,
            "throughput": round(self.throughput, 1),
            "best_value": self.best_value,
            "best_throughput": round(self.best_throughput, 1),
            "reason": self.reason,
        }


def _waits(p: PointResult) -> tuple[float, float]:
    """Median checkout wait and median operation time, seconds."""
    return p.tally.wait.quantile(0.5), p.tally.latency.quantile(0.5)


def _calm(p: PointResult) -> bool:
    """Its callers wait no longer for a connection than they hold one (see the module rules)."""
    wait, held = _waits(p)
    return wait <= max(held, WAIT_FLOOR)


@dataclasses.dataclass(frozen=True, slots=True)
class _Ceiling:
    """In a ``max_size`` sweep, the size from which every larger one is the same pool."""

    size: int
    why: str

    def clamp(self, value: int) -> int:
        return min(value, self.size)


def _ceiling(param: str, points: list[PointResult]) -> _Ceiling | None:
    """A pool has no more connections in use than its tasks (``--concurrency``, per process:
    each has its own pool), nor more than it had in a run its ``max_size`` did not hold back
    (the pool never filled, or its limit was at least its tasks): every ``max_size`` from the
    smaller of the two up is the same pool. (A pool's connections stay open while it runs, so
    its count sampled every 0.2 s reaches its peak.) Never below ``min_size``, which the pool
    keeps open whatever its tasks do."""
    if param != "max_size" or not points:
        return None
    tasks = max(p.concurrency for p in points)
    free = [p for p in points if p.max_size >= tasks or p.pool_peak < p.max_size]
    used = max((p.pool_peak for p in free), default=0)
    if 0 < used < tasks:
        size, why = used, f"the {used} it had at most when its limit did not hold it back"
    else:
        per = " per process, each with its own pool" if max(p.processes for p in points) > 1 else ""
        size, why = tasks, f"its {tasks} tasks (--concurrency{per})"
    floor = max(p.min_size for p in points)
    if floor > size:
        size, why = floor, f"its min_size, {floor} (its tasks use no more)"
    return _Ceiling(size, why)


def _values(values: list[int]) -> str:
    return ", ".join(map(str, values)) if len(values) <= 3 else f"{values[0]} to {values[-1]}"


def recommend(
    param: str, points: list[PointResult], partial: bool = False
) -> Recommendation | None:
    """The smallest ``param`` within 5 % of the best throughput whose callers wait no longer
    for a connection than they hold one (see the module rules)."""
    done = [p for p in points if not p.interrupted and p.seconds > 0]
    clean = [p for p in done if p.error_fraction <= ERROR_BUDGET] or done
    if not clean:
        return None
    ceiling = _ceiling(param, clean)

    def value(p: PointResult) -> int:
        return p.value(param) if ceiling is None else ceiling.clamp(p.value(param))

    def label(p: PointResult) -> str:
        ran = "" if value(p) == p.value(param) else f" (the run at {p.value(param)})"
        return f"{param}={value(p)}{ran}"

    best = max(clean, key=lambda p: p.throughput)
    if best.throughput <= 0:
        return None
    fast = sorted(
        (p for p in clean if p.throughput >= (1 - WITHIN) * best.throughput),
        key=lambda p: (value(p), p.value(param)),
    )
    calm = [p for p in fast if _calm(p)]
    chosen = calm[0] if calm else min(fast, key=lambda p: (_waits(p)[0], value(p)))
    share = chosen.throughput / best.throughput
    wait, held = (t * 1e3 for t in _waits(chosen))
    if calm:
        reason = (
            f"{param}={value(chosen)} is the smallest value within {WITHIN:.0%} of the "
            f"best throughput whose callers wait no longer for a connection than they hold one: "
        )
    else:
        larger_helps = ceiling is None or value(chosen) < ceiling.size
        reason = (
            f"{param}={value(chosen)} is, within {WITHIN:.0%} of the best throughput, the "
            f"value whose callers wait least for a connection (none waits less than it holds "
            f"one{': try larger values' if larger_helps else ''}): "
        )
    measured = (
        f" (the run at {chosen.value(param)})" if value(chosen) != chosen.value(param) else ""
    )
    reason += (
        f"{chosen.throughput:,.0f} ops/s{measured}, {share:.0%} of {best.throughput:,.0f} ops/s "
        f"at {label(best)}; checkout wait p50 {wait:.2f} ms, operation p50 {held:.2f} ms"
    )
    queued = [p for p in fast if value(p) < value(chosen) and not _calm(p)]
    if queued:
        first = queued[0]
        q_wait, q_held = (t * 1e3 for t in _waits(first))
        reason += (
            f"; {param}={first.value(param)} reaches that throughput too, but its callers queue "
            f"in the pool (wait p50 {q_wait:.2f} ms against {q_held:.2f} ms with the "
            "connection): every request pays the wait and one slow operation holds up the rest"
        )
    larger = [p for p in clean if value(p) > value(chosen)]
    if larger:
        top = max(larger, key=lambda p: (value(p), p.value(param)))
        costs = []
        if _peak(top) != _peak(chosen):
            costs.append(f"connections (server peak {_peak(top)} vs {_peak(chosen)})")
        p99_top, p99_chosen = (p.tally.latency.quantile(0.99) * 1e3 for p in (top, chosen))
        if p99_top > p99_chosen:
            costs.append(f"time per operation (p99 {p99_top:.2f} ms vs {p99_chosen:.2f} ms)")
        gain = top.throughput / chosen.throughput - 1 if chosen.throughput else 0.0
        adds = "adds no throughput" if gain < WITHIN else f"adds {gain:.0%} throughput"
        reason += f"; more ({label(top)}) {adds}" + (
            f", and costs {' and '.join(costs)}" if costs else ""
        )
    if ceiling is not None:
        above = sorted({p.value(param) for p in clean if p.value(param) > ceiling.size})
        if above:
            peaks = sorted({p.pool_peak for p in clean if p.value(param) > ceiling.size})
            reason += (
                f"; a pool has no more connections in use than {ceiling.why}, so every "
                f"{param} from {ceiling.size} up is the same pool: the runs at {param}="
                f"{_values(above)} (which peaked at {_values(peaks)} connections a pool) count "
                f"as {param}={ceiling.size}, their differences are noise, and no value above "
                f"{ceiling.size} is recommended"
            )
    if len(clean) < len(done):
        reason += f"; runs with more than {ERROR_BUDGET:.0%} errors were left out"
    if partial:
        reason += "; from the runs finished before the interruption only"
    return Recommendation(
        param, value(chosen), chosen.throughput, value(best), best.throughput, reason
    )


def _peak(p: PointResult) -> str:
    n = (
        p.server_connections_peak
        if p.server_connections_peak is not None
        else (p.client_connections_peak)
    )
    return str(n)


@dataclasses.dataclass(frozen=True, slots=True)
class BenchResult:
    config: RunConfig
    mode: str
    driver: str | None
    sweep: Sweep | None
    points: list[PointResult]
    interrupted: bool
    recommendation: Recommendation | None

    def to_json(self) -> dict[str, Any]:
        c = self.config
        sim = dataclasses.asdict(c.target.sim) if c.target.sim is not None else None
        return {
            "schema": SCHEMA,
            "target": c.target.shown,
            "kind": c.target.kind,
            "mode": self.mode,
            "driver": self.driver,
            "settings": {
                "concurrency": c.concurrency,
                "processes": c.processes,
                "duration": c.duration,
                "ops": c.ops,
                "warmup": c.warmup,
                "think": c.think,
                "max_size": c.max_size,
                "min_size": c.min_size,
                "max_connecting": c.max_connecting,
                "wait_queue_timeout": c.wait_queue_timeout,
                "connect_timeout": c.connect_timeout,
                "hooks": c.hooks,
                "adaptive": c.adaptive,
                "sim": sim,
            },
            "sweep": (
                {"param": self.sweep.param, "values": list(self.sweep.values)}
                if self.sweep is not None
                else None
            ),
            "results": [p.to_json() for p in self.points],
            "recommendation": (
                self.recommendation.to_json() if self.recommendation is not None else None
            ),
            "interrupted": self.interrupted,
        }
