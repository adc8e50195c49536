"""poolkit and the pools a user would pick instead, on the same workloads, in one process.

    pip install -e '.[peers,plot]'
    python benchmarks/peers.py                       # everything (several minutes)
    python benchmarks/peers.py --workloads headline --rounds 7 --markdown auto --plot auto
    python benchmarks/peers.py --quick               # a smoke run: tiny sizes, seconds

Each workload runs every pool (and the floors) once per round, the rounds interleaved (the order
alternates each round) on this one machine and process, and reports medians with their min-max,
each pool's ratio to the floor taken in the same round (and to the driver's own pool), its
throughput, its checkout wait (p50, p99 and max: never p99 alone) and fairness (operations per
worker, min and max), and for server workloads the most connections the server saw at once.
See docs/benchmarks.md for every workload and pool, and how each is used.

Workloads (``--workloads`` takes keys, their prefix before a ``-``, or groups, comma-separated):

  headline  H1 asyncpg 50 tasks/pool 10; H2 psycopg async 50 tasks/pool 10; H3 psycopg 16
            threads/pool 8; H4 redis-py 32 threads/8 connections; H5 redis.asyncio 32 tasks/8
  W1        uncontended cycle over null connections, each form a user writes (asyncio, threads)
  W2        1,000 tasks / 32 threads on a pool of 10 null connections
  W5        scaling: 10 vs 10,000 idle connections; 1,000 vs 100,000 waiting tasks
  W7        connection storm: 1,000 tasks (200 threads) at an empty pool whose connect takes 50 ms
  W8        outage: the server drops every connection mid-run (poolkit.testing.FaultProxy)

PostgreSQL: ``--dsn`` (default ``$POOLKIT_TEST_PG_DSN`` or postgresql://postgres@127.0.0.1:5432/
test); Redis: ``--redis-url`` (``$POOLKIT_REDIS_URL`` or redis://127.0.0.1:6379/0). A workload
whose server does not answer is skipped, as is a pool whose driver is not installed; the report
says so. Exit status 0, or 1 when a run failed (``--strict``: also when something was skipped).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # (run as a script from anywhere)
from peerbench import logs, machine, report, servers
from peerbench.core import Env, Sizes, Workload
from peerbench.null_rows import (
    w1_async,
    w1_threads,
    w2_async,
    w2_threads,
    w5_idle_async,
    w5_idle_threads,
    w5_waiting,
)
from peerbench.outage import w8_workloads
from peerbench.pg_rows import asyncpg_workload, psycopg_async_workload, psycopg_threads_workload
from peerbench.redis_rows import redis_async_workload, redis_threads_workload
from peerbench.runner import Outcome, run_workload
from peerbench.storm import w7_pg, w7_redis
from peerbench.storm_threads import w7_threads_pg, w7_threads_redis

RESULTS = Path(__file__).parent / "results"


def workloads(sizes: Sizes) -> list[Workload]:
    """Every workload, in the order they run."""
    return [
        asyncpg_workload(),
        psycopg_async_workload(),
        psycopg_threads_workload(),
        redis_threads_workload(),
        redis_async_workload(),
        w1_async(),
        w1_threads(),
        w2_async(sizes.w2_tasks),
        w2_threads(sizes.w2_threads),
        w5_idle_async(*sizes.w5_idle, sizes.w5_cycles),
        w5_idle_threads(*sizes.w5_idle, sizes.w5_cycles),
        w5_waiting(*sizes.w5_waiting),
        w7_pg(sizes.w7_tasks),
        w7_redis(sizes.w7_tasks),
        w7_threads_pg(sizes.w7_threads),
        w7_threads_redis(sizes.w7_threads),
        *w8_workloads(sizes),
    ]


def select(all_workloads: list[Workload], wanted: str | None) -> list[Workload]:
    """The workloads ``wanted`` names (comma-separated keys, key prefixes before a ``-``, or
    groups); all of them for ``None``. An unknown name is an error naming the known ones."""
    if not wanted:
        return all_workloads
    chosen: list[Workload] = []
    for name in (n.strip() for n in wanted.split(",") if n.strip()):
        found = [
            w
            for w in all_workloads
            if name.lower() in (w.key.lower(), w.group.lower(), w.key.split("-")[0].lower())
        ]
        if not found:
            known = sorted({w.key for w in all_workloads} | {w.group for w in all_workloads})
            raise SystemExit(f"--workloads: no workload {name!r}; known: {', '.join(known)}")
        chosen += [w for w in found if w not in chosen]
    return [w for w in all_workloads if w in chosen]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/peers.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--workloads", metavar="LIST", help="e.g. headline,W1 or H1,H3 (default all)")
    ap.add_argument("--rounds", type=int, metavar="N", help="interleaved rounds (5; --quick 2)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and times: a smoke run")
    ap.add_argument("--duration", type=float, metavar="S",
                    help="seconds measured per contention run (2.0; --quick 0.25)")  # fmt: skip
    ap.add_argument("--dsn", default=servers.DSN, help="PostgreSQL (default: %(default)s)")
    ap.add_argument("--redis-url", default=servers.REDIS_URL, help="Redis (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="write every figure of every round as JSON")
    ap.add_argument("--markdown", metavar="PATH",
                    help="write the dated results file ('auto': benchmarks/results/"
                         "peers-YYYY-MM-DD.md)")  # fmt: skip
    ap.add_argument("--plot", metavar="PATH",
                    help="write a PNG of the headline ratios ('auto': beside --markdown's, "
                         "or benchmarks/results/peers-YYYY-MM-DD.png)")  # fmt: skip
    ap.add_argument("--list", action="store_true", help="list the workloads and pools, and exit")
    ap.add_argument("--verbose", action="store_true", help="print the pools' log warnings too")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a workload or pool was skipped, too")  # fmt: skip
    args = ap.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.duration is not None and args.duration <= 0:
        ap.error("--duration must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sizes = Sizes.tiny() if args.quick else Sizes.full()
    if args.duration:
        sizes = dataclasses.replace(sizes, duration=args.duration)
    rounds = args.rounds or (2 if args.quick else 5)
    chosen = select(workloads(sizes), args.workloads)
    if args.list:
        for w in chosen:
            print(f"{w.key:<16} {w.title}")
            for c in w.contenders:
                print(f"{'':<18}{c.label}  [{c.role}]")
        return 0

    today = datetime.date.today().isoformat()
    command = "python benchmarks/peers.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    meta = {
        "date": today,
        "command": command.strip(),
        "rounds": rounds,
        "quick": args.quick,
        "sizes": dataclasses.asdict(sizes),
        "machine": machine.describe(),
    }
    unavailable = {
        "pg": servers.pg_missing(args.dsn) if any(w.server == "pg" for w in chosen) else None,
        "redis": (
            servers.redis_missing(args.redis_url) if any(w.server == "redis" for w in chosen)
            else None
        ),
    }  # fmt: skip
    if any(w.server == "pg" for w in chosen) and unavailable["pg"] is None:
        meta["machine"]["PostgreSQL"] = servers.pg_version(args.dsn)
    if any(w.server == "redis" for w in chosen) and unavailable["redis"] is None:
        meta["machine"]["Redis"] = servers.redis_version(args.redis_url)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    base = Env(dsn=args.dsn, redis_url=args.redis_url, app="", sizes=sizes)
    records = logs.install(args.verbose)
    outcomes: list[Outcome] = []
    for w in chosen:
        why = unavailable.get(w.server) if w.server else None
        outcomes.append(run_workload(w, base, rounds, log, records, why))
    meta["machine"]["load average (1, 5, 15 min) at end"] = machine.load()

    summaries = [report.summarize(o) for o in outcomes]
    print(report.text(summaries, rounds))
    print(report.headline_text(summaries))
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "workloads": summaries}, indent=1))
    markdown_path = None
    if args.markdown:
        markdown_path = (
            RESULTS / f"peers-{today}.md" if args.markdown == "auto" else Path(args.markdown)
        )
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(report.markdown(summaries, meta))
        print(f"\nwrote {markdown_path}")
    if args.plot:
        if args.plot == "auto":
            plot_path = (markdown_path or RESULTS / f"peers-{today}.md").with_suffix(".png")
        else:
            plot_path = Path(args.plot)
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        from peerbench.plot import plot

        title = f"poolkit and its peers, {today} ({rounds} rounds: median, min-max)"
        plot(summaries, str(plot_path), title)
        print(f"wrote {plot_path}")

    failed = any(c["errors"] for s in summaries for c in s["contenders"])
    skipped = any(s["skipped"] or any(c["skipped"] for c in s["contenders"]) for s in summaries)
    return 1 if failed or (args.strict and skipped) else 0


if __name__ == "__main__":
    sys.exit(main())
