"""Export a pool's statistics to Prometheus (``poolkit[prometheus]``) or OpenTelemetry
(``poolkit[otel]``).

Both bindings read :meth:`~poolkit.Pool.stats` when the metrics are collected (a scrape, an
export), never on checkout: binding a pool costs its checkouts nothing.

>>> registry = prometheus_client.CollectorRegistry()
>>> poolkit.metrics.bind_prometheus(pool, registry=registry)       # doctest: +SKIP
>>> poolkit.metrics.bind_opentelemetry(pool, meter=meter_provider.get_meter("app"))  # +SKIP

Metric names (Prometheus; OpenTelemetry uses the same with dots: ``poolkit.connections``):

* gauges ``poolkit_connections{state=available|pending|in_use|backing_off|checking|resetting}``,
  ``poolkit_connections_by_role{role=kept|demand|overflow}``, ``poolkit_waiting``,
  ``poolkit_streams_in_use``, ``poolkit_stream_capacity``, ``poolkit_circuit_open``,
  ``poolkit_checkout_wait_max_seconds``; in an adaptive pool (``PoolOptions.adaptive``) also
  ``poolkit_adaptive_limit``, ``poolkit_adaptive_knee``, ``poolkit_adaptive_share``,
  ``poolkit_adaptive_op_time_seconds``, ``poolkit_adaptive_base_op_time_seconds`` and
  ``poolkit_adaptive_queued`` (see
  :class:`~poolkit.AdaptiveStats`);
* counters ``poolkit_connections_created_total``, ``poolkit_connections_closed_total{reason}``,
  ``poolkit_connect_attempts_total``, ``poolkit_connect_failures_total``,
  ``poolkit_checkouts_total``, ``poolkit_checkout_failures_total{reason}``,
  ``poolkit_checkout_waits_total``, ``poolkit_checkout_wait_seconds_total``,
  ``poolkit_checks_total``, ``poolkit_checks_failed_total``, ``poolkit_resets_total``,
  ``poolkit_resets_failed_total``.

Every series carries the pool's ``address`` and the extra labels (attributes) given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ._install import pip_install
from .asyncio import AsyncPool
from .stats import PoolStats
from .threaded import Pool

__all__ = ["bind_opentelemetry", "bind_prometheus", "prometheus_collector", "read_stats"]


def _adaptive(field: str) -> Callable[[PoolStats], Any]:
    """Reads ``stats.adaptive.<field>``: ``None`` (no series) for a pool that is not adaptive."""

    def read(stats: PoolStats) -> Any:
        return None if stats.adaptive is None else getattr(stats.adaptive, field)

    return read


#: (name, description, what to read, label name or None) of every gauge
_GAUGES: tuple[tuple[str, str, Callable[[PoolStats], Any], str | None], ...] = (
    (
        "connections",
        "Connections of the pool, by state",
        lambda s: {
            "available": s.available,
            "pending": s.pending,
            "in_use": s.in_use,
            "backing_off": s.backing_off,
            "checking": s.checking,
            "resetting": s.resetting,
        },
        "state",
    ),
    (
        "connections_by_role",
        "Connections of the pool, by role",
        lambda s: {"kept": s.kept, "demand": s.demand, "overflow": s.overflow},
        "role",
    ),
    ("waiting", "Checkouts waiting for a connection", lambda s: s.waiting, None),
    (
        "streams_in_use",
        "Leases out (and keep-alive probes running)",
        lambda s: s.streams_in_use,
        None,
    ),
    (
        "stream_capacity",
        "Leases the open connections can serve at once",
        lambda s: s.stream_capacity,
        None,
    ),
    (
        "circuit_open",
        "1 while connect_retry's circuit is open",
        lambda s: int(s.circuit_open),
        None,
    ),
    ("checkout_wait_max_seconds", "Longest wait of a checkout", lambda s: s.wait_time_max, None),
    *(
        (f"adaptive_{name}", doc, _adaptive(field), None)
        for name, field, doc in (
            (
                "limit",
                "limit",
                "Connections that may be in use at once, as the adaptive pool decided",
            ),
            (
                "knee",
                "knee",
                "Connections the adaptive pool finds worth holding, by the throughput's elasticity",
            ),
            (
                "share",
                "share",
                "The most connections the server's queueing lets the adaptive pool hold",
            ),
            (
                "op_time_seconds",
                "op_time",
                "The typical operation time of the adaptive pool's last rounds",
            ),
            (
                "base_op_time_seconds",
                "base_op_time",
                "The operation time on a server the adaptive pool left (its last base round)",
            ),
            (
                "queued",
                "queued",
                "Connections in use whose time the adaptive pool reads as queueing in the server",
            ),
        )
    ),
)

#: the same for every counter (Prometheus names without the ``_total`` suffix)
_COUNTERS: tuple[tuple[str, str, Callable[[PoolStats], Any], str | None], ...] = (
    ("connections_created", "Connections established", lambda s: s.connections_created, None),
    (
        "connections_closed",
        "Connections closed, by reason",
        lambda s: s.connections_closed,
        "reason",
    ),
    ("connect_attempts", "Connects started", lambda s: s.connect_attempts, None),
    ("connect_failures", "Connects that failed", lambda s: s.connect_failures, None),
    ("checkouts", "Checkouts served", lambda s: s.checkouts, None),
    ("checkout_failures", "Checkouts failed, by reason", lambda s: s.checkout_failures, "reason"),
    ("checkout_waits", "Checkouts that waited in the queue", lambda s: s.waits, None),
    (
        "checkout_wait_seconds",
        "Seconds checkouts waited, in all",
        lambda s: s.wait_time_total,
        None,
    ),
    ("checks", "Hooks.check runs ended", lambda s: s.checks, None),
    (
        "checks_failed",
        "Hooks.check runs that failed (closing their connection)",
        lambda s: s.checks_failed,
        None,
    ),
    ("resets", "Hooks.reset runs ended", lambda s: s.resets, None),
    (
        "resets_failed",
        "Hooks.reset runs that failed (closing their connection)",
        lambda s: s.resets_failed,
        None,
    ),
)


def read_stats(pool: AsyncPool[Any] | Pool[Any], timeout: float = 5.0) -> PoolStats:
    """``pool.stats()``, safe from any thread: an :class:`~poolkit.AsyncPool` running on a loop
    in another thread is read on its loop (waiting at most ``timeout`` seconds)."""
    if isinstance(pool, AsyncPool):
        loop = pool._loop
        if loop is not None and loop.is_running() and not loop.is_closed():
            try:
                current = asyncio.get_running_loop()
            except RuntimeError:
                current = None
            if current is not loop:
                future: concurrent.futures.Future[PoolStats] = concurrent.futures.Future()

                def read() -> None:
                    try:
                        future.set_result(pool.stats())
                    except BaseException as exc:  # pragma: no cover - stats() does not raise
                        future.set_exception(exc)

                loop.call_soon_threadsafe(read)
                return future.result(timeout)
    return pool.stats()


def _series(value: Any, label: str | None) -> Iterator[tuple[dict[str, str], float]]:
    if value is None:
        return  # (a figure this pool does not have: an adaptive one's in a static pool)
    if label is None:
        yield {}, float(value)
        return
    assert isinstance(value, Mapping)
    for key, count in sorted(value.items()):
        yield {label: str(key)}, float(count)


# ---------------------------------------------------------------------- Prometheus


def prometheus_collector(
    pool: AsyncPool[Any] | Pool[Any],
    *,
    prefix: str = "poolkit",
    labels: Mapping[str, str] | None = None,
) -> Any:
    """A ``prometheus_client`` collector of ``pool``'s statistics (register it yourself)."""
    try:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "poolkit.metrics.prometheus_collector needs prometheus_client: "
            + pip_install("prometheus")
        ) from exc
    const = {"address": pool.address, **(labels or {})}
    names = sorted(const)

    class PoolCollector(Collector):
        def collect(self) -> Iterable[Any]:
            stats = read_stats(pool)
            for family, table in ((GaugeMetricFamily, _GAUGES), (CounterMetricFamily, _COUNTERS)):
                for name, doc, read, label in table:
                    metric = family(
                        f"{prefix}_{name}", doc, labels=names + ([label] if label else [])
                    )
                    value = read(stats)
                    if value is None:
                        continue
                    for extra, count in _series(value, label):
                        metric.add_metric([const[k] for k in names] + list(extra.values()), count)
                    yield metric

    return PoolCollector()


def bind_prometheus(
    pool: AsyncPool[Any] | Pool[Any],
    *,
    registry: Any = None,
    prefix: str = "poolkit",
    labels: Mapping[str, str] | None = None,
) -> Any:
    """Register a collector of ``pool``'s statistics with ``registry`` (default: the global
    ``prometheus_client.REGISTRY``); returns it (``registry.unregister`` it when done)."""
    collector = prometheus_collector(pool, prefix=prefix, labels=labels)
    if registry is None:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    registry.register(collector)
    return collector


# ---------------------------------------------------------------------- OpenTelemetry


def bind_opentelemetry(
    pool: AsyncPool[Any] | Pool[Any],
    *,
    meter: Any = None,
    prefix: str = "poolkit",
    attributes: Mapping[str, str] | None = None,
) -> list[Any]:
    """Create observable instruments reporting ``pool``'s statistics on ``meter`` (default: the
    global meter provider's ``poolkit`` meter); returns them."""
    try:
        from opentelemetry import metrics as otel
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "poolkit.metrics.bind_opentelemetry needs opentelemetry-api: " + pip_install("otel")
        ) from exc
    if meter is None:
        meter = otel.get_meter("poolkit")
    const = {"address": pool.address, **(attributes or {})}

    def observe(read: Callable[[PoolStats], Any], label: str | None) -> Callable[[Any], Any]:
        def callback(options: Any) -> Iterator[Any]:
            stats = read_stats(pool)
            for extra, value in _series(read(stats), label):
                yield otel.Observation(value, {**const, **extra})

        return callback

    instruments = []
    for create, table in (
        (meter.create_observable_gauge, _GAUGES),
        (meter.create_observable_counter, _COUNTERS),
    ):
        for name, doc, read, label in table:
            unit = "s" if name.endswith("seconds") else "1"
            callbacks = [observe(read, label)]
            instruments.append(
                create(f"{prefix}.{name}", callbacks=callbacks, unit=unit, description=doc)
            )
    return instruments
