"""What ``poolkit bench`` shows: a live view while it runs (rich, on stderr, only on a
terminal) and the summary tables at the end (stdout).

Rules of this module
--------------------
* Nothing here measures or decides: it renders :class:`~.runner.Live` and the results.
* The live view is transient (it disappears when a run ends); one line per finished run and
  the summary stay.
"""

from __future__ import annotations

import os
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live as RichLive
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .config import RunConfig
from .histogram import Histogram
from .report import BenchResult, PointResult
from .runner import Live
from .targets import hint

__all__ = ["Display", "print_summary"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def _waits(h: Histogram) -> str:
    return f"{_ms(h.quantile(0.5))} / {_ms(h.quantile(0.99))} / {_ms(h.max)} ms"


def _errors(errors: dict[str, int]) -> str:
    if not errors:
        return "none"
    return ", ".join(f"{kind} {n:,}" for kind, n in sorted(errors.items(), key=lambda kv: -kv[1]))


def describe(config: RunConfig, swept: str | None = None, target: bool = True) -> str:
    """The run in one line (``swept``: the parameter a sweep varies, left out)."""
    mode = f"{config.concurrency} threads" if config.threads else f"{config.concurrency} tasks"
    procs = f" in each of {config.processes} processes" if config.processes > 1 else ""
    sizes = " ".join(
        f"{name}={getattr(config, name)}"
        for name in ("max_size", "min_size", "max_connecting")
        if name != swept
    ) + (" adaptive" if config.adaptive else "")
    if swept == "concurrency":
        mode = "threads" if config.threads else "tasks"
    where = f"{config.target.shown}  " if target else ""
    return f"{where}{sizes}  {mode}{procs}{_server(config)}"


def _server(config: RunConfig) -> str:
    sim = config.target.sim
    if sim is None:
        return ""
    service = sim.service_time
    if isinstance(service, tuple):
        shown = f"{service[0]} " + "-".join(f"{v * 1e3:g} ms" for v in service[1:])
    else:
        shown = f"{service * 1e3:g} ms"
    cores = "no limit" if sim.concurrency is None else str(sim.concurrency)
    return f"  (server: service {shown}, concurrency {cores})"


class Display:
    """The live view on stderr (when it is a terminal) and a line per finished run."""

    def __init__(self, live: bool = True) -> None:
        self.err = Console(stderr=True, highlight=False)
        self.enabled = live and self.err.is_terminal
        self._live: RichLive | None = None
        self._progress = self._new_progress()
        self._task: Any = None

    def _new_progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=self.err,
        )

    def start_point(self, label: str, config: RunConfig) -> None:
        if not self.enabled:
            return
        self._progress = self._new_progress()
        self._task = self._progress.add_task(label, total=1.0)
        self._live = RichLive(
            self._render(None, config), console=self.err, refresh_per_second=4, transient=True
        )
        self._live.start()

    def update(self, live: Live) -> None:
        if self._live is None:
            return
        self._progress.update(self._task, completed=live.progress)
        self._live.update(self._render(live, live.config))

    def end_point(self, label: str, point: PointResult) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self.enabled:
            self.err.print(
                f"[bold]{label}[/]: {point.throughput:,.0f} ops/s, wait p99 "
                f"{_ms(point.tally.wait.quantile(0.99))} ms, errors {point.errors:,}"
                + ("  [yellow](interrupted)[/]" if point.interrupted else "")
            )

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render(self, live: Live | None, config: RunConfig) -> Group:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold cyan", justify="right")
        grid.add_column()
        phase = "connecting" if live is None else ("warming up" if live.warming else "measuring")
        grid.add_row("target", describe(config))
        grid.add_row("phase", phase)
        if live is not None:
            t = live.tally
            mean = t.ops / live.measured if live.measured > 0 else 0.0
            grid.add_row(
                "throughput",
                "(not counted while warming up)"
                if live.warming
                else f"{live.throughput_now:,.0f} ops/s now, {mean:,.0f} ops/s mean, {t.ops:,} ops",
            )
            grid.add_row("checkout wait", f"{_waits(t.wait)}  (p50 / p99 / max)")
            grid.add_row("operation", f"{_waits(t.latency)}  (p50 / p99 / max)")
            g = live.gauges
            server = (
                ""
                if live.server_connections is None
                else (f";  server sees {live.server_connections}")
            )
            grid.add_row(
                "connections",
                f"{g.total} total, {g.in_use} in use, {g.pending} pending, "
                f"{g.waiting} checkouts waiting{server}",
            )
            if config.adaptive:
                pools = f" (the {config.processes} pools' added up)" if config.processes > 1 else ""
                grid.add_row("adaptive limit", f"{g.limit} connections in use at most{pools}")
            grid.add_row("errors", Text(_errors(t.errors), style="red" if t.errors else ""))
        return Group(grid, self._progress)


def _point_table(points: list[PointResult], param: str | None, chosen: int | None) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 0, 0, 1),
        caption="ms; wait: checkout wait; op: the operation (the connection held); conns: the "
        "pools' connections at peak; server: what the server saw at peak",
        caption_justify="left",
    )
    if param is not None:
        table.add_column(param, justify="right", style="bold", no_wrap=True, min_width=len(param))
    # (two-line headers: the table fits 80 columns)
    names = [
        "ops/s",
        "wait\np50",
        "wait\np99",
        "wait\nmax",
        "op\np50",
        "op\np99",
        "conns",
        "server",
    ]
    for name in names:
        width = max(len(line) for line in name.splitlines())
        table.add_column(name, justify="right", no_wrap=True, min_width=width)
    table.add_column("errors", justify="right", no_wrap=True, min_width=6)
    for p in points:
        server = "?" if p.server_connections_peak is None else str(p.server_connections_peak)
        row = [
            f"{p.throughput:,.0f}",
            _ms(p.tally.wait.quantile(0.5)),
            _ms(p.tally.wait.quantile(0.99)),
            _ms(p.tally.wait.max),
            _ms(p.tally.latency.quantile(0.5)),
            _ms(p.tally.latency.quantile(0.99)),
            str(p.client_connections_peak),
            server,
            f"{p.errors:,}",
        ]
        if param is None:
            table.add_row(*row)
            continue
        value = p.value(param)
        style = "bold green" if value == chosen else None
        table.add_row(f"{'◀ ' if value == chosen else ''}{value}", *row, style=style)
    return table


def print_summary(result: BenchResult, console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 120  # (a pipe or a file: no terminal to fit, and 80 would cut the table)
    c = result.config
    mode = result.mode + (f", {result.driver}" if result.driver else "")
    out.print(f"[bold]poolkit bench[/] {c.target.shown} ({mode})")
    out.print(describe(c, result.sweep.param if result.sweep else None, target=False))
    if result.interrupted:
        out.print("[yellow]interrupted: partial results[/]")
    if not result.points:
        out.print("no run finished")
        return
    rec = result.recommendation
    param = result.sweep.param if result.sweep is not None else None
    out.print(_point_table(result.points, param, rec.value if rec else None))
    if result.sweep is None:
        p = result.points[0]
        out.print(
            f"{p.ops:,} operations in {p.seconds:.1f} s; errors: {_errors(p.tally.errors)}; "
            f"connections made {p.connections_created}, left open {p.left_open}"
        )
    for p in result.points:
        found = p.limit()
        if found is not None:
            median, least, most, last = found
            where = f"{p.value(param)}: " if param is not None else ""
            pools = p.pool_limits() if p.processes > 1 else []
            each = f"; by pool {', '.join(f'{x:g}' for x in pools)}" if pools else ""
            out.print(
                f"{where}adaptive limit {median:g} (median; {least}..{most}, last {last}) "
                f"connections in use, of max_size {p.max_size * p.processes}{each}"
            )
    if rec is not None:
        out.print(f"[bold green]recommended: {rec.param}={rec.value}[/] — {rec.reason}")
    advice = hint(c, {kind for p in result.points for kind in p.tally.errors})
    if advice is not None:
        out.print(f"[yellow]{advice}[/]")
    for p in result.points:
        if p.server_left_open:
            out.print(f"[red]the server still saw {p.server_left_open} connections after close[/]")
