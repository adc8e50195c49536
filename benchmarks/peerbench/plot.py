"""``--plot PATH``: a PNG of the headline workloads' ratios to the floor (median, with the
min-max of the per-round ratios as error bars), one group of bars per workload (matplotlib,
``poolkit[plot]``)."""

from __future__ import annotations

from typing import Any

from .report import Summary

COLORS = {"poolkit": "#1f77b4", "peer": "#ff7f0e", "floor": "#7f7f7f", "dedicated": "#bcbd22"}


def plot(summaries: list[Summary], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [s for s in summaries if s["headline"] and not s["skipped"]]
    if not shown:
        raise ValueError("--plot: no headline workload ran (select one of H1..H5)")
    fig, axes = plt.subplots(
        len(shown),
        1,
        figsize=(10, 1.0 + 0.42 * sum(len(s["contenders"]) for s in shown)),
        squeeze=False,
    )
    for ax, s in zip((row[0] for row in axes), shown, strict=True):
        _bars(ax, s)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _bars(ax: Any, s: Summary) -> None:
    labels, values, lows, highs, colors = [], [], [], [], []
    for c in s["contenders"]:
        ratio = c["vs_floor"]
        if c["skipped"] or not ratio or ratio["median"] != ratio["median"]:
            continue
        labels.append(c["label"])
        values.append(ratio["median"])
        lows.append(ratio["median"] - ratio["min"])
        highs.append(ratio["max"] - ratio["median"])
        colors.append(COLORS.get(c["role"], "#333333"))
    y = list(range(len(labels)))
    ax.barh(y, values, xerr=[lows, highs], color=colors, capsize=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(f"{s['key']}: {s['title']}", fontsize=9)
    ax.set_xlabel(f"{s['metric']} / the minimal FIFO pool's (1.0), same round", fontsize=8)
    for i, (v, up) in enumerate(zip(values, highs, strict=True)):
        ax.text(v + up, i, f"  {v:.2f}\u00d7", va="center", fontsize=7)
