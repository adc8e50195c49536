"""poolkit.metrics: a pool's statistics as Prometheus and OpenTelemetry metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import poolkit
import poolkit.metrics
from doubles import Conn

prometheus_client = pytest.importorskip("prometheus_client")
sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
sdk_export = pytest.importorskip("opentelemetry.sdk.metrics.export")


def busy_pool() -> poolkit.Pool[Conn]:
    """A threaded pool with some history: 2 checkouts, one connection discarded, one idle."""
    pool: poolkit.Pool[Conn] = poolkit.Pool(
        lambda ctx: Conn(ctx.connection_id),
        address="db:1",
        options=poolkit.PoolOptions(max_size=2, background_interval=float("inf")),
    )
    pool.ready()
    first = pool.checkout()
    second = pool.checkout()
    first.discard(OSError("broken"))
    second.release()
    return pool


def test_prometheus_collector_reports_the_stats() -> None:
    pool = busy_pool()
    registry = prometheus_client.CollectorRegistry()
    poolkit.metrics.bind_prometheus(pool, registry=registry, labels={"service": "orders"})
    labels = {"address": "db:1", "service": "orders"}

    def value(name: str, **extra: str) -> float | None:
        return registry.get_sample_value(name, {**labels, **extra})  # type: ignore[no-any-return]

    assert value("poolkit_checkouts_total") == 2
    assert value("poolkit_connections_created_total") == 2
    assert value("poolkit_connections_closed_total", reason="error") == 1
    assert value("poolkit_connections", state="available") == 1
    assert value("poolkit_connections", state="in_use") == 0
    assert value("poolkit_connections_by_role", role="demand") == 1
    assert value("poolkit_stream_capacity") == 1
    assert value("poolkit_circuit_open") == 0
    assert value("poolkit_checkout_failures_total", reason="timeout") is None  # none yet
    held = [pool.checkout(), pool.checkout()]
    with pytest.raises(poolkit.WaitQueueTimeoutError):
        pool.checkout(timeout=0)
    for lease in held:
        lease.release()
    assert value("poolkit_checkout_failures_total", reason="timeout") == 1  # read at scrape
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE poolkit_checkouts_total counter" in text
    pool.close()


def test_binding_metrics_keeps_the_fast_paths() -> None:
    pool = busy_pool()
    poolkit.metrics.bind_prometheus(pool, registry=prometheus_client.CollectorRegistry())
    poolkit.metrics.bind_opentelemetry(pool, meter=sdk_metrics.MeterProvider().get_meter("t"))
    assert pool._quick and pool._sink.listeners == ()  # no listener: nothing runs on checkout
    pool.close()


def test_an_async_pool_is_scraped_safely_from_another_thread() -> None:
    async def connect(ctx: poolkit.ConnectContext) -> Conn:
        return Conn(ctx.connection_id)

    async def main() -> str:
        registry = prometheus_client.CollectorRegistry()
        pool: poolkit.AsyncPool[Conn] = poolkit.AsyncPool(connect, address="db:2")
        async with pool:
            poolkit.metrics.bind_prometheus(pool, registry=registry)
            async with pool.connection():
                # the scrape runs in a worker thread; the stats are read on the pool's loop
                text: str = (
                    await asyncio.to_thread(prometheus_client.generate_latest, registry)
                ).decode()
        return text

    text = asyncio.run(main())
    assert 'poolkit_connections{address="db:2",state="in_use"} 1.0' in text
    assert 'poolkit_checkouts_total{address="db:2"} 1.0' in text


def test_opentelemetry_instruments_report_the_stats() -> None:
    pool = busy_pool()
    reader = sdk_export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    poolkit.metrics.bind_opentelemetry(
        pool, meter=provider.get_meter("test"), attributes={"service": "orders"}
    )
    data = reader.get_metrics_data()
    points: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points[(metric.name, tuple(sorted(point.attributes.items())))] = point.value
    base = (("address", "db:1"), ("service", "orders"))
    assert points[("poolkit.checkouts", base)] == 2
    closed = tuple(sorted((*base, ("reason", "error"))))
    assert points[("poolkit.connections_closed", closed)] == 1
    by_state = tuple(sorted((*base, ("state", "available"))))
    assert points[("poolkit.connections", by_state)] == 1
    provider.shutdown()
    pool.close()


def test_an_adaptive_pool_publishes_its_limit() -> None:
    """``poolkit_adaptive_*`` only for an adaptive pool: the limit, and the knee it was decided
    from (the initial limit until the first rounds ended; the operation times 0 until then)."""
    pool: poolkit.Pool[Conn] = poolkit.Pool(
        lambda ctx: Conn(ctx.connection_id),
        address="db:3",
        options=poolkit.PoolOptions(
            max_size=8, max_connecting=3, adaptive=poolkit.Adaptive(), background_interval=60.0
        ),
    )
    static = busy_pool()
    registry = prometheus_client.CollectorRegistry()
    poolkit.metrics.bind_prometheus(pool, registry=registry)
    poolkit.metrics.bind_prometheus(static, registry=registry)
    assert registry.get_sample_value("poolkit_adaptive_limit", {"address": "db:3"}) == 3
    assert registry.get_sample_value("poolkit_adaptive_knee", {"address": "db:3"}) == 3
    assert registry.get_sample_value("poolkit_adaptive_queued", {"address": "db:3"}) == 0
    assert registry.get_sample_value("poolkit_adaptive_limit", {"address": "db:1"}) is None
    text = prometheus_client.generate_latest(registry).decode()
    assert text.count("# TYPE poolkit_adaptive_limit gauge") == 1  # (none for the static pool)
    reader = sdk_export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    poolkit.metrics.bind_opentelemetry(pool, meter=provider.get_meter("test"))
    poolkit.metrics.bind_opentelemetry(static, meter=provider.get_meter("test"))
    points = {
        (metric.name, point.attributes["address"]): point.value
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    assert points[("poolkit.adaptive_limit", "db:3")] == 3
    assert points[("poolkit.adaptive_op_time_seconds", "db:3")] == 0
    assert ("poolkit.adaptive_limit", "db:1") not in points
    provider.shutdown()
    pool.close()
    static.close()
