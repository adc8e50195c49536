"""A missing optional dependency is said with the ``pip install`` that provides it, in both forms
(from the package index, and from a checkout, where ``poolkit[extra]`` cannot work); the
dependency is hidden from a subprocess as if it were not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: run first in the subprocess: the named top-level packages cannot be imported, and
#: ``importlib.util.find_spec`` finds none of them (as when they are not installed)
HIDE = """\
import sys

for name in {hidden!r}:
    sys.modules[name] = None
"""


def run_without(hidden: set[str], code: str) -> subprocess.CompletedProcess[str]:
    script = HIDE.format(hidden=hidden) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )


def both_forms(extra: str) -> str:
    return f"pip install 'poolkit[{extra}]', or pip install '.[{extra}]' in a checkout"


def test_poolkit_bench_on_mongodb_without_pymongo_names_the_extra() -> None:
    ran = run_without(
        {"bson", "pymongo"},
        """
        from poolkit.bench.cli import main
        raise SystemExit(main(["bench", "mongodb://127.0.0.1:1/", "-d", "1"]))
        """,
    )
    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert "poolkit.mongodb's connections need pymongo's bson" in ran.stderr
    assert both_forms("mongodb") in ran.stderr


@pytest.mark.parametrize(
    "module", ["poolkit.mongodb.pools", "poolkit.mongodb.connection", "poolkit.mongodb.states"]
)
def test_any_mongodb_module_imported_first_names_the_extra(module: str) -> None:
    ran = run_without({"bson", "pymongo"}, f"import {module}")
    assert ran.returncode == 1
    said = "ImportError: poolkit.mongodb's connections need pymongo's bson: "
    assert said + both_forms("mongodb") in ran.stderr


@pytest.mark.parametrize(
    ("hidden", "module", "extra"),
    [
        ("asyncpg", "asyncpg", "asyncpg"),
        ("psycopg", "psycopg", "psycopg"),
        ("redis", "redis", "redis"),
        ("h2", "http2", "http2"),
        ("httpx", "http2", "http2"),
    ],
)
def test_a_backend_without_its_driver_names_both_forms(
    hidden: str, module: str, extra: str
) -> None:
    ran = run_without({hidden}, f"import poolkit.backends.{module}")
    assert ran.returncode == 1
    assert f"poolkit.backends.{module} needs {hidden}: {both_forms(extra)}" in ran.stderr


def test_metrics_without_their_libraries_name_both_forms() -> None:
    ran = run_without(
        {"prometheus_client", "opentelemetry"},
        """
        import poolkit, poolkit.metrics
        pool = poolkit.Pool(lambda ctx: object())
        for bind in (poolkit.metrics.prometheus_collector, poolkit.metrics.bind_opentelemetry):
            try:
                bind(pool)
            except ImportError as exc:
                print(exc)
        """,
    )
    assert ran.returncode == 0, ran.stderr
    assert both_forms("prometheus") in ran.stdout and both_forms("otel") in ran.stdout


def test_the_bench_display_and_plot_without_their_libraries_name_both_forms() -> None:
    ran = run_without(
        {"rich", "matplotlib"},
        """
        from poolkit.bench.cli import main
        plot = ["bench", "--sweep", "max_size=1,2", "--plot", "x.png"]
        print(main(["bench", "-d", "1"]), main(plot))
        """,
    )
    assert ran.stdout.strip() == "2 2", ran.stderr
    assert both_forms("bench") in ran.stderr and both_forms("plot") in ran.stderr
