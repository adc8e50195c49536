"""The report: what the rounds gave, summarized (a JSON-able dict), and shown as text tables
or as a dated markdown file for ``benchmarks/results/``.

For each contender: every figure's median and min-max over the rounds; its ratio to the floor
(``vs_floor``) and to the reference pool (``vs_reference``: the driver's own pool as shipped, or
the contender named in its ``versus``), each taken in the same round, then median and min-max;
the fairness of its worst round; its errors.
"""

from __future__ import annotations

import math
from typing import Any

from .core import NAN, Spread, ratios
from .runner import Outcome

Summary = dict[str, Any]
DASH = "\u2013"  # (an en dash: 1,200\u20131,300)
TIMES = "\u00d7"  # (a multiplication sign: 0.99\u00d7)


def summarize(outcome: Outcome) -> Summary:
    """``outcome`` as a JSON-able dict (see the module's docstring)."""
    w = outcome.workload
    out: Summary = {
        "key": w.key,
        "group": w.group,
        "title": w.title,
        "metric": w.metric,
        "higher_is_better": w.higher,
        "floor": w.floor,
        "reference": w.reference,
        "server": w.server,
        "headline": w.headline,
        "note": w.note,
        "columns": [{"key": c.key, "label": c.label, "digits": c.digits} for c in w.columns],
        "skipped": outcome.skipped_workload,
        "seconds": round(outcome.seconds, 2),
        "contenders": [],
    }
    for contender in w.contenders:
        label = contender.label
        rounds = outcome.runs.get(label, [])
        entry: Summary = {
            "label": label,
            "name": contender.name,
            "variant": contender.variant,
            "role": contender.role,
            "note": contender.note,
            "skipped": outcome.skipped.get(label, ""),
            "errors": outcome.errors.get(label, []),
            "log_records": outcome.logs.get(label, {}),
            "rounds": rounds,
            "figures": {},
            "vs_floor": None,
            "vs_reference": None,
        }
        keys = sorted({k for r in rounds if r for k in r})
        for key in keys:
            values = [r.get(key, NAN) if r else NAN for r in rounds]
            entry["figures"][key] = Spread.of(values).as_dict()
        if "fairness" in keys:
            entry["figures"]["fairness_worst"] = min(
                (r["fairness"] for r in rounds if r and r["fairness"] == r["fairness"]),
                default=NAN,
            )
        floor, versus = w.floor_of(contender), w.versus_of(contender)
        if rounds and floor and floor != label and floor in outcome.runs:
            entry["vs_floor"] = Spread.of(ratios(rounds, outcome.runs[floor], w.metric)).as_dict()
        if rounds and versus and versus != label and versus in outcome.runs:
            entry["vs_reference"] = Spread.of(
                ratios(rounds, outcome.runs[versus], w.metric)
            ).as_dict()
            entry["reference"] = versus
        out["contenders"].append(entry)
    return out


# ---------------------------------------------------------------------- formatting


def number(value: float, digits: int = 0) -> str:
    if value != value or value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    if digits == 0 or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def spread(s: dict[str, float] | None, digits: int = 0, suffix: str = "") -> str:
    """``median (min-max)``; just the median when there was one round."""
    if not s or s["median"] != s["median"]:
        return "n/a"
    mid = number(s["median"], digits) + suffix
    if s["n"] <= 1:
        return mid
    return f"{mid} ({number(s['min'], digits)}{DASH}{number(s['max'], digits)})"


def ratio(s: dict[str, float] | None) -> str:
    return spread(s, 2, TIMES) if s else ""


def _rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """The table of a workload: headings and one row per contender."""
    columns = summary["columns"]
    metric = summary["metric"]
    head = ["pool", "variant", _label(columns, metric), f"{TIMES} floor", f"{TIMES} reference"]
    head += [c["label"] for c in columns if c["key"] != metric]
    rows = []
    for c in summary["contenders"]:
        if c["skipped"]:
            rows.append([c["name"], c["variant"], f"skipped: {c['skipped']}"])
            continue
        figures = c["figures"]
        row = [c["name"], c["variant"], spread(figures.get(metric), _digits(columns, metric))]
        row += [ratio(c["vs_floor"]), ratio(c["vs_reference"])]
        for col in columns:
            if col["key"] == metric:
                continue
            s = figures.get(col["key"])
            row.append(number(s["median"], col["digits"]) if s else "")
        if c["errors"]:
            row[-1] += f" ({len(c['errors'])} errors)"
        rows.append(row)
    full = [r for r in rows if len(r) == len(head)]
    keep = [i for i in range(len(head)) if i < 3 or any(r[i] for r in full)]
    return [head[i] for i in keep], [[r[i] for i in keep if i < len(r)] for r in rows]


def _label(columns: list[dict[str, Any]], key: str) -> str:
    return next((c["label"] for c in columns if c["key"] == key), key)


def _digits(columns: list[dict[str, Any]], key: str) -> int:
    return int(next((c["digits"] for c in columns if c["key"] == key), 0))


def text(summaries: list[Summary], rounds: int) -> str:
    """The report as plain text tables."""
    out = []
    for s in summaries:
        out.append(f"\n{s['key']}  {s['title']}")
        if s["skipped"]:
            out.append(f"  skipped: {s['skipped']}")
            continue
        better = "higher" if s["higher_is_better"] else "lower"
        out.append(f"  median (min{DASH}max) of {rounds} interleaved rounds; ratios taken in each "
                   f"round; {s['metric']}: {better} is better")  # fmt: skip
        head, rows = _rows(s)
        widths = [max(len(r[i]) if i < len(r) else 0 for r in [head, *rows]) for i in
                  range(len(head))]  # fmt: skip
        for row in [head, *rows]:
            out.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)))
        for c in s["contenders"]:
            for error in c["errors"][:3]:
                out.append(f"  ! {c['label']}: {error}")
            if c["log_records"]:
                out.append(f"  ~ {c['label']} logged: {_records(c['log_records'])}")
    return "\n".join(out)


def _records(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in sorted(counts.items()))


def markdown_tables(summaries: list[Summary]) -> str:
    out = []
    for s in summaries:
        out.append(f"### {s['key']}: {s['title']}\n")
        if s["skipped"]:
            out.append(f"Skipped: {s['skipped']}\n")
            continue
        if s["note"]:
            out.append(s["note"] + "\n")
        better = "higher" if s["higher_is_better"] else "lower"
        out.append(f"`{s['metric']}`: {better} is better. Ratios: the pool's `{s['metric']}` "
                   "over the floor's (the reference's) in the same round.\n")  # fmt: skip
        head, rows = _rows(s)
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for row in rows:
            out.append("| " + " | ".join(row + [""] * (len(head) - len(row))) + " |")
        notes = [f"{c['label']}: {c['note']}" for c in s["contenders"] if c["note"]]
        errors = [f"{c['label']}: {e}" for c in s["contenders"] for e in c["errors"]]
        if notes:
            out.append("\n" + "; ".join(notes) + ".")
        for error in errors[:10]:
            out.append(f"\n- error: {error}")
        for c in s["contenders"]:
            if c["log_records"]:
                out.append(f"\n- {c['label']} logged: {_records(c['log_records'])}")
        out.append("")
    return "\n".join(out)


def headline(summaries: list[Summary]) -> list[list[str]]:
    """Per headline workload: poolkit's first pool and the driver's own (the reference), their
    ops/s, poolkit's ratio to it, and for each the max wait over p99 and the operations per
    worker, min-max (medians over the rounds)."""
    rows = []
    for s in summaries:
        if not s["headline"] or s["skipped"]:
            continue
        ours = next(
            (c for c in s["contenders"] if c["role"] == "poolkit" and not c["skipped"]), None
        )
        theirs = next((c for c in s["contenders"] if c["label"] == s["reference"]), None)
        if ours is None or theirs is None or theirs["skipped"]:
            continue
        metric = s["metric"]
        rows.append([
            s["key"] + ": " + s["title"],
            ours["name"],
            spread(ours["figures"].get(metric)),
            theirs["name"],
            spread(theirs["figures"].get(metric)),
            ratio(ours["vs_reference"]),
            f"{_tail(ours)} / {_tail(theirs)}",
            f"{_fair(ours)} / {_fair(theirs)}",
        ])  # fmt: skip
    return rows


HEADLINE = (
    "workload",
    "poolkit",
    "ops/s",
    "the driver's own pool",
    "ops/s",
    "poolkit / driver's",
    "max wait / p99: poolkit / driver's",
    "ops per worker min-max: poolkit / driver's",
)


def headline_text(summaries: list[Summary]) -> str:
    rows = headline(summaries)
    if not rows:
        return ""
    lines = ["", "Headline: poolkit against the driver's own pool, as shipped"]
    for row in rows:
        lines.append(f"  {row[0]}")
        lines.append(f"    {row[1]} {row[2]} ops/s; {row[3]} {row[4]} ops/s: {row[5]}")
        lines.append(f"    max wait / p99 {row[6]}; ops per worker {row[7]}")
    return "\n".join(lines)


def _tail(c: Summary) -> str:
    figures = c["figures"]
    if "wait_max_us" not in figures or not figures["wait_p99_us"]["median"]:
        return "n/a"
    return f"{figures['wait_max_us']['median'] / figures['wait_p99_us']['median']:,.1f}{TIMES}"


def _fair(c: Summary) -> str:
    figures = c["figures"]
    if "ops_worker_min" not in figures:
        return "n/a"
    low, high = figures["ops_worker_min"]["median"], figures["ops_worker_max"]["median"]
    return f"{number(low)}{DASH}{number(high)}"


def markdown(summaries: list[Summary], meta: dict[str, Any]) -> str:
    """The dated results file: the machine, the command, the headline table, every table."""
    lines = [f"# poolkit and its peers: {meta['date']}", ""]
    lines.append(f"Command: `{meta['command']}`")
    lines.append("")
    lines.append(f"{meta['rounds']} interleaved rounds per workload (the order of the pools "
                 "alternates each round), all in one process; figures are medians with the "
                 f"min{DASH}max over the rounds; each ratio is taken within a round, then its "
                 f"median and min{DASH}max.")  # fmt: skip
    lines.append("")
    lines.append("## Machine")
    lines.append("")
    for key, value in meta["machine"].items():
        lines.append(f"- {key}: {value}")
    lines.append("")
    rows = headline(summaries)
    if rows:
        lines.append("## Headline")
        lines.append("")
        lines.append("| " + " | ".join(HEADLINE) + " |")
        lines.append("|" + "---|" * len(HEADLINE))
        for row in rows:
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines.append("## Workloads")
    lines.append("")
    lines.append(markdown_tables(summaries))
    return "\n".join(lines)
