"""``--plot FILE.png``: a sweep's throughput and waits against the swept value, or one run's
throughput, connections (the adaptive limit) and times against time (matplotlib, the
``poolkit[plot]`` extra).

Rules of this module
--------------------
* Readable at a glance: both axes labelled with units, the recommendation marked on both
  panels and named in the title, the target and workload in the caption.
"""

from __future__ import annotations

from .display import describe
from .report import BenchResult

__all__ = ["plot_sweep", "plot_timeline"]


def plot_sweep(result: BenchResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    assert result.sweep is not None
    param = result.sweep.param
    points = sorted(result.points, key=lambda p: p.value(param))
    xs = [p.value(param) for p in points]
    rec = result.recommendation

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    top.plot(xs, [p.throughput for p in points], "o-", color="tab:blue", label="throughput")
    top.set_ylabel("throughput (operations/s)")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)

    ms = 1e3
    bottom.plot(
        xs,
        [p.tally.wait.quantile(0.99) * ms for p in points],
        "o-",
        color="tab:orange",
        label="checkout wait p99",
    )
    bottom.plot(
        xs,
        [p.tally.wait.max * ms for p in points],
        "s--",
        color="tab:red",
        alpha=0.6,
        label="checkout wait max",
    )
    bottom.plot(
        xs,
        [p.tally.latency.quantile(0.99) * ms for p in points],
        "^-",
        color="tab:green",
        label="operation time p99 (connection held)",
    )
    bottom.set_ylabel("time (ms)")
    bottom.set_xlabel(f"{param} (per pool)" if param != "concurrency" else "concurrency (tasks)")
    bottom.grid(alpha=0.3)
    bottom.set_ylim(bottom=0)
    if len(xs) > 1 and xs[0] > 0 and xs[-1] / xs[0] >= 8:
        bottom.set_xscale("log", base=2)
    bottom.set_xticks(xs)
    bottom.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))

    title = f"poolkit bench: throughput and waits by {param}"
    if rec is not None:
        for ax in (top, bottom):
            ax.axvline(rec.value, color="tab:green", linestyle=":", linewidth=2)
        top.annotate(
            f"recommended {param}={rec.value}\n{rec.throughput:,.0f} ops/s "
            f"({rec.throughput / rec.best_throughput:.0%} of best)",
            xy=(rec.value, rec.throughput),
            xytext=(0.62, 0.12),  # (below a rising curve, right: free on any sweep)
            textcoords="axes fraction",
            arrowprops={"arrowstyle": "->", "color": "tab:green"},
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "tab:green"},
            color="tab:green",
            fontsize=10,
            fontweight="bold",
        )
        title += f" — recommended {param}={rec.value}"
    top.legend(loc="upper left")
    bottom.legend(loc="upper left")
    fig.suptitle(title, fontsize=12, fontweight="bold")
    c = result.config
    fig.text(0.5, 0.005, describe(c, param), ha="center", va="bottom", fontsize=8, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(result: BenchResult, path: str) -> None:
    """One run against time (its timeline): throughput; the pools' connections, the server's
    count and the adaptive limit; checkout wait and operation time p99. The embedded server's
    scheduled changes are marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    point = result.points[0]
    line = list(point.timeline)
    if not line:
        raise ValueError("the run was too short to draw against time")
    ts = [p.t for p in line]
    measured = [p for p in line if p.measured]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    top.plot([p.t for p in measured], [p.throughput for p in measured], color="tab:blue")
    top.set_ylabel("throughput (operations/s)")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    top.set_ylim(bottom=0)

    middle.plot(ts, [p.connections for p in line], color="tab:green", label="pool connections")
    middle.plot(ts, [p.in_use for p in line], color="tab:olive", alpha=0.6, label="in use")
    if any(p.server is not None for p in line):
        middle.plot(
            ts,
            [p.server if p.server is not None else float("nan") for p in line],
            color="tab:gray",
            linestyle=":",
            label="server sees",
        )
    if point.adaptive:
        middle.step(
            ts,
            [p.limit if p.limit is not None else float("nan") for p in line],
            where="post",
            color="tab:red",
            linewidth=2,
            label="adaptive limit",
        )
    middle.set_ylabel("connections")
    middle.set_ylim(bottom=0)
    middle.legend(loc="upper right", fontsize="small")

    ms = 1e3
    bottom.plot(
        [p.t for p in measured],
        [p.op_p99 * ms for p in measured],
        color="tab:purple",
        label="operation p99",
    )
    bottom.plot(
        [p.t for p in measured],
        [p.wait_p99 * ms for p in measured],
        color="tab:orange",
        label="checkout wait p99",
    )
    bottom.set_ylabel("ms")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel(
        "seconds since the embedded server started"
        if result.config.target.sim is not None
        else "seconds since the run started"
    )
    bottom.legend(loc="upper right", fontsize="small")
    sim = result.config.target.sim
    for axis in (top, middle, bottom):
        axis.grid(alpha=0.3)
        if measured:
            axis.axvspan(ts[0], measured[0].t, color="0.9", zorder=0)  # (the warm-up)
        for change in sim.schedule if sim is not None else ():
            axis.axvline(change.at, color="black", linestyle="--", linewidth=0.8)
    title = "adaptive limit against time" if point.adaptive else "the run against time"
    fig.suptitle(f"poolkit bench: {title}")
    fig.text(0.01, 0.005, describe(result.config), fontsize=7)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
