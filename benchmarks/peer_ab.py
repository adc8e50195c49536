"""Each drop-in against the pool it replaces, in paired turns: throughput and CPU per operation.

``benchmarks/peers.py`` runs one contender after the other, each for a couple of seconds, built
and closed in its turn: on a shared two-core machine a round's ratio moves by more than the pools
differ (0.5x to 2x between rounds for the same two pools). Here both pools live at once, each in
a process of its own, built and warmed once, and take turns: a short *segment* of the workload
(``--segment`` seconds) on one while the other waits idle, then the same on the other, the order
reversed every other pair (ABBA: a drift of the machine in a pair falls on both). Each pair gives
a ratio, drop-in over peer; what is reported is the median of the pairs' ratios with the
quartiles: of the throughput (operations a second), of the client's CPU per operation (the
process's user and system time over its operations), and of the server's (the CPU time of the
server's processes on this machine, PostgreSQL's or Redis', over the operations: run it where
no one else uses that server). Each side's medians follow: its client CPU per operation, that
time's user and system parts, and how often the client slept (voluntary context switches per
operation: near 0, it was the bottleneck itself).

    python benchmarks/peer_ab.py headline                      # every drop-in of the headline
    python benchmarks/peer_ab.py H3 --only QueuePool --pairs 30
    python benchmarks/peer_ab.py H1,H4 --segment 0.5
    python benchmarks/peer_ab.py H3,H4 --restarts 5 --pairs 40
    python benchmarks/peer_ab.py H1,H2 --only sqlalchemy --versus "(fair queue)"

A pair of processes keeps its place on the machine for its life (which core its threads favour,
which server backends its connections got): on two cores, one pair's median moved by +-10 %
from the next's for the same two pools. ``--restarts`` spreads the pairs over that many pairs of
processes, each built anew, and also prints each one's medians (throughput and client CPU) and,
from three process pairs on, their geometric mean with its 95 % confidence interval (Student's t:
each process pair one sample, the way to read many short restarts, e.g. ``--restarts 24
--pairs 96``).

Layout: where a process's objects land in memory moves its speed by far more than the pools
differ, and a process lands the same way every time it is started the same way. Measured here
with asyncpg's pool and its drop-in (H1, 50 tasks on 10 connections): 300 objects made before
the imports put both in a mode 45 % faster (client CPU 81-86 against 120-128 µs an operation),
and a ``PYTHONPATH`` naming an empty folder put the drop-in alone there, every time: ratios of
1.2-1.5 x with it, 0.8-0.9 x without, the same code. So each child makes a random number of
objects (the *ballast*: ``layouts.py``) before it imports the pools: each process pair
draws its layouts anew, and ``--restarts`` averages over them (``--same-layout``: no ballast).

The pairs are the contenders with a ``versus`` (a drop-in and the peer it is measured against,
``peers.py``'s ``--list``), made by ``peers.py``'s builders, driven by its drivers, at its full
sizes (the workers and the pool of each workload). Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import resource
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (run as a script from anywhere)

from layouts import ballast, draw  # (imports and makes nothing)

#: the environment variable that gives a child its ballast (see "Layout" above)
LAYOUT = "POOLKIT_AB_LAYOUT"
#: a child's ballast: objects made before it imports the pools and drivers, as many as the
#: parent drew, kept for its life; nothing in the parent
_ballast = ballast(int(os.environ.get(LAYOUT, "0")))

import peers  # noqa: E402  (after the ballast: what it shifts is made here)
from peer_cpu import SERVER_PROCESSES, server_seconds  # noqa: E402
from peerbench import drive  # noqa: E402
from peerbench.cli import add_common, picked  # noqa: E402
from peerbench.core import Contender, Env, Sizes, Workload  # noqa: E402

#: one segment's figures: operations, seconds, client CPU seconds, server CPU seconds, errors;
#: then the client's CPU apart, user and system seconds, and its voluntary context switches (the
#: times it found nothing to run and slept)
Segment = tuple[int, float, float, float, int, float, float, int]

#: seconds a child waits for its next order before it gives up (the parent is gone)
ORDER_TIMEOUT = 600.0


class _Stopped(Exception):
    """The parent said stop before the warm-up: the child ends at once."""


class Turns:
    """Stands in for the harness's drivers in a child: each drive runs only when the parent says
    so. The first drive of the run (the warm-up) runs once, for the seconds the parent gives;
    the measured one runs a segment per order until the parent says stop."""

    def __init__(self, conn: Connection, server: tuple[str, ...]) -> None:
        self.conn = conn
        self.server = server
        self.drives = 0
        self.real = drive.drive_threads, drive.drive_async

    def _order(self) -> tuple[str, float]:
        if not self.conn.poll(ORDER_TIMEOUT):
            raise RuntimeError("no order from the parent")
        kind, seconds = self.conn.recv()
        return str(kind), float(seconds)

    def _ready(self) -> float:
        """Tell the parent this child is built (where it runs, its ballast); the warm-up's
        seconds, or ``_Stopped`` if the parent says stop before it (it gave up)."""
        self.conn.send(("ready", sorted(os.sched_getaffinity(0)), len(_ballast)))
        kind, seconds = self._order()
        if kind == "stop":
            raise _Stopped
        return seconds

    def _before(self) -> tuple[resource.struct_rusage, float]:
        return resource.getrusage(resource.RUSAGE_SELF), server_seconds(self.server)

    def _after(self, start: tuple[resource.struct_rusage, float], tally: drive.Tally) -> None:
        before, server_before = start
        after = resource.getrusage(resource.RUSAGE_SELF)
        user = after.ru_utime - before.ru_utime
        system = after.ru_stime - before.ru_stime
        server = server_seconds(self.server) - server_before
        ops = sum(tally.counts)
        sleeps = after.ru_nvcsw - before.ru_nvcsw
        figures = (ops, tally.elapsed, user + system, server, tally.errors, user, system, sleeps)
        self.conn.send(("segment", *figures))

    def threads(self, one: drive.SyncOne, workers: int, duration: float, **kw: Any) -> drive.Tally:
        real = self.real[0]
        self.drives += 1
        if self.drives == 1:
            seconds = self._ready()
            tally = real(one, workers, seconds, **kw)
            self.conn.send(("warm",))
            return tally
        last = drive.Tally([0] * workers, elapsed=1.0)
        while True:
            kind, seconds = self._order()
            if kind == "stop":
                return last
            start = self._before()
            last = real(one, workers, seconds, **kw)
            self._after(start, last)

    async def tasks(self, one: drive.AsyncOne, workers: int, duration: float,
                    **kw: Any) -> drive.Tally:  # fmt: skip
        real = self.real[1]
        self.drives += 1
        # (the waits for the parent's orders block the loop: the pool waits idle meanwhile)
        if self.drives == 1:
            seconds = self._ready()
            tally = await real(one, workers, seconds, **kw)
            self.conn.send(("warm",))
            return tally
        last = drive.Tally([0] * workers, elapsed=1.0)
        while True:
            kind, seconds = self._order()
            if kind == "stop":
                return last
            start = self._before()
            last = await real(one, workers, seconds, **kw)
            self._after(start, last)


def child(
    conn: Connection, key: str, label: str, dsn: str, redis_url: str, cpus: frozenset[int] | None
) -> None:
    """A process of its own for one contender: built, then driven in the parent's turns; on
    ``cpus`` only, if given (its threads too: set before any starts)."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    sizes = Sizes.full()
    env = Env(dsn, redis_url, f"poolkit-ab-{os.getpid()}", sizes)
    workload = peers.select(peers.workloads(sizes), key)[0]
    (contender,) = [c for c in workload.contenders if c.label == label]
    turns = Turns(conn, SERVER_PROCESSES.get(workload.server or "", ()))
    drive.drive_threads, drive.drive_async = turns.threads, turns.tasks
    try:
        contender.run(env)
    except _Stopped:
        pass
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        raise
    conn.send(("done",))


class Side:
    """The parent's end of one child."""

    def __init__(self, key: str, label: str, args: argparse.Namespace) -> None:
        self.label = label
        ctx = multiprocessing.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(
            target=child,
            args=(theirs, key, label, args.dsn, args.redis_url, args.cpus),
            daemon=True,
        )
        #: the child's ballast (its environment is this one's at start)
        self.layout = draw(args.layouts)
        os.environ[LAYOUT] = str(self.layout)
        try:
            self.process.start()
        finally:
            del os.environ[LAYOUT]
        theirs.close()
        self.segments: list[Segment] = []

    def expect(self, kind: str, timeout: float = 300.0) -> tuple[Any, ...]:
        if not self.conn.poll(timeout):
            raise RuntimeError(f"{self.label}: no answer ({kind}) in {timeout:g} s")
        message: tuple[Any, ...] = self.conn.recv()
        if message[0] != kind:
            raise RuntimeError(f"{self.label}: {message!r} where {kind!r} was due")
        return message

    def segment(self, seconds: float) -> None:
        self.conn.send(("segment", seconds))
        _, ops, elapsed, client, server, errors, user, system, sleeps = self.expect("segment")
        self.segments.append((ops, elapsed, client, server, errors, user, system, sleeps))

    def end(self) -> None:
        try:
            self.conn.send(("stop", 0.0))
            self.expect("done")
        finally:
            self.process.join(30)
            if self.process.is_alive():
                self.process.kill()


#: the drop-ins called as the workload's reference pool is (``connection()``, ``acquire()``, a
#: redis-py client's commands), without a ``versus`` of their own
AS_THE_REFERENCE = {
    "poolkit.backends.asyncpg.create_pool acquire()",
    "poolkit.backends.psycopg.AsyncConnectionPool",
    "poolkit.backends.psycopg.ConnectionPool",
    "poolkit.backends.redis.BlockingConnectionPool",
    "poolkit.backends.redis.AsyncBlockingConnectionPool",
}


def pairs_of(workload: Workload, only: str | None, versus: str | None = None
             ) -> list[tuple[Contender, str]]:  # fmt: skip
    """The drop-ins of ``workload``, each with the label of the peer it replaces: its
    ``versus``, or the workload's reference; with ``versus``, the contender of the workload
    whose label contains it instead (none if no contender's does, or more than one's)."""
    found = []
    for c in workload.contenders:
        peer = c.versus or (workload.reference if c.name in AS_THE_REFERENCE else None)
        if peer and picked(c.label, only):
            if versus is not None:
                others = [o.label for o in workload.contenders
                          if o is not c and versus.lower() in o.label.lower()]  # fmt: skip
                if len(others) != 1:
                    continue
                peer = others[0]
            found.append((c, peer))
    return found


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def turns(key: str, dropin: str, peer: str, pairs: int, args: argparse.Namespace
          ) -> tuple[list[Segment], list[Segment]]:  # fmt: skip
    """``pairs`` paired turns of ``dropin`` and ``peer`` on workload ``key``, each in a new
    process: the segments of each."""
    a, b = Side(key, dropin, args), Side(key, peer, args)
    try:
        for side in (a, b):
            _, cpus, ballast = side.expect("ready")
            if args.cpus is not None and set(cpus) != args.cpus:
                raise RuntimeError(f"{side.label} runs on CPUs {cpus}, not {sorted(args.cpus)}")
            if ballast != side.layout:
                raise RuntimeError(f"{side.label}: ballast {ballast}, not {side.layout}")
        for side in (a, b):  # (one after the other: each warms on a machine the other leaves)
            side.conn.send(("warm", args.warmup))
            side.expect("warm")
        for i in range(pairs):
            for side in (a, b) if i % 2 == 0 else (b, a):
                side.segment(args.segment)
    finally:
        for side in (a, b):
            try:
                side.end()
            except Exception as exc:  # (reported, the other side still ended)
                print(f"  {side.label}: {exc}", file=sys.stderr)
    return a.segments, b.segments


def ratios_of(a: list[Segment], b: list[Segment]) -> dict[str, list[float]]:
    """Per pair of segments, drop-in over peer: throughput, client and server CPU per op."""
    ratios: dict[str, list[float]] = {"ops_per_s": [], "client_per_op": [], "server_per_op": []}
    for (ops_a, el_a, cl_a, sv_a, *_), (ops_b, el_b, cl_b, sv_b, *_) in zip(a, b, strict=True):
        if not (ops_a and ops_b):
            continue
        ratios["ops_per_s"].append((ops_a / el_a) / (ops_b / el_b))
        ratios["client_per_op"].append((cl_a / ops_a) / (cl_b / ops_b))
        if sv_b > 0:
            ratios["server_per_op"].append((sv_a / ops_a) / (sv_b / ops_b))
    return ratios


#: Student's t, two-sided 95 %, by degrees of freedom (1-30; beyond: 2.0, then the normal's)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def across(values: list[float]) -> tuple[float, float, float]:
    """The geometric mean of ratios (one per process pair) with its 95 % confidence interval:
    Student's t on their logarithms, each process pair one sample. A process pair's placement
    and layout move its ratio by more than its segments vary (see Layout above), so the pairs,
    not the segments, are what is independent; the interval says how far the mean of a new
    set of as many process pairs may fall."""
    logs = [math.log(v) for v in values]
    mean = statistics.fmean(logs)
    n = len(logs)
    df = n - 1
    t = _T95[df - 1] if df <= len(_T95) else (2.0 if df < 60 else 1.96)
    half = t * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean - half), math.exp(mean), math.exp(mean + half)


def compare(key: str, dropin: str, peer: str, args: argparse.Namespace) -> dict[str, Any]:
    """The paired turns of ``dropin`` and ``peer`` on workload ``key``, spread over
    ``args.restarts`` pairs of processes: the per-pair ratios of all, and each process pair's
    median ratios of throughput and client CPU per operation (how far a pair of processes'
    placement on the machine moves them)."""
    a: list[Segment] = []
    b: list[Segment] = []
    by_process: dict[str, list[float]] = {"ops_per_s": [], "client_per_op": []}
    restarts = max(1, args.restarts)
    for r in range(restarts):
        pairs = args.pairs // restarts + (1 if r < args.pairs % restarts else 0)
        seg_a, seg_b = turns(key, dropin, peer, pairs, args)
        a += seg_a
        b += seg_b
        own = ratios_of(seg_a, seg_b)
        for name, values in by_process.items():
            if own[name]:
                values.append(statistics.median(own[name]))

    def per_op(segments: list[Segment], column: int, unit: float = 1e6) -> float:
        """The median of a column over operations, in ``unit``s (µs: 1e6) an operation."""
        return statistics.median(unit * s[column] / s[0] for s in segments if s[0])

    def rate(segments: list[Segment]) -> float:
        return statistics.median(s[0] / s[1] for s in segments if s[0])

    return {
        "ratios": ratios_of(a, b),
        "by_process": by_process,
        "dropin": {"ops_per_s": rate(a), "client_us": per_op(a, 2), "server_us": per_op(a, 3),
                   "errors": sum(s[4] for s in a), "user_us": per_op(a, 5),
                   "system_us": per_op(a, 6), "sleeps": per_op(a, 7, 1)},
        "peer": {"ops_per_s": rate(b), "client_us": per_op(b, 2), "server_us": per_op(b, 3),
                 "errors": sum(s[4] for s in b), "user_us": per_op(b, 5),
                 "system_us": per_op(b, 6), "sleeps": per_op(b, 7, 1)},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("workloads", help="keys of peers.py's workloads or groups, e.g. headline, H3")
    add_common(ap, "drop-ins")
    ap.add_argument("--pairs", type=int, default=20, help="pairs of segments (20)")
    ap.add_argument("--segment", type=float, default=1.0, help="seconds a segment (1.0)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up each (2.0)")
    ap.add_argument(
        "--restarts",
        type=int,
        default=1,
        help="pairs of processes the pairs are spread over, each built anew (1)",
    )
    ap.add_argument(
        "--same-layout",
        dest="layouts",
        action="store_false",
        help="no ballast: every child's memory laid out alike (see Layout above)",
    )
    ap.add_argument(
        "--cpu",
        metavar="LIST",
        help="pin both contenders' processes to these CPUs, e.g. 0 or 0,1 (default: not pinned)",
    )
    ap.add_argument(
        "--versus",
        metavar="TEXT",
        help="pair each drop-in with the one contender of its workload whose label contains "
        "TEXT, in place of the peer it replaces (e.g. \"(fair queue)\": SQLAlchemy's pool "
        "with the drop-in's fair hand-off)",
    )
    args = ap.parse_args(argv)
    args.cpus = None if args.cpu is None else frozenset(int(c) for c in args.cpu.split(","))
    chosen = [(workload, contender, peer)
              for workload in peers.select(peers.workloads(Sizes.full()), args.workloads)
              for contender, peer in pairs_of(workload, args.only, args.versus)]  # fmt: skip
    if not chosen and args.versus is not None:
        ap.error(f"--versus {args.versus!r}: no drop-in picked has one other contender of its "
                 "workload whose label contains it")  # fmt: skip
    load = os.getloadavg()
    pinned = "" if args.cpus is None else f"; each contender on CPU {sorted(args.cpus)}"
    print(f"{args.pairs} pairs of {args.segment:g} s segments; load average at the start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)"
          f"{pinned}")  # fmt: skip
    print("ratios drop-in / peer: median of the pairs [quartiles]")
    failed = False
    for workload, contender, peer in chosen:
        started = time.perf_counter()
        try:
            result = compare(workload.key, contender.label, peer, args)
        except Exception as exc:
            print(f"{workload.key} {contender.label}: failed: {exc}")
            failed = True
            continue
        took = time.perf_counter() - started
        print(f"{workload.key} {contender.label}  vs  {peer}  ({took:.0f} s)")
        for name, values in result["ratios"].items():
            if values:
                q1, q2, q3 = quartiles(values)
                print(f"    {name:14} {q2:6.3f}  [{q1:.3f}-{q3:.3f}]  ({len(values)} pairs)")
        for name, values in result["by_process"].items():
            if len(values) > 1:
                each = " ".join(f"{v:.3f}" for v in values)
                print(f"    {name} by process pair: {each}")
        for name, values in result["by_process"].items():
            if len(values) > 2:
                lo, mean, hi = across(values)
                print(f"    {name:14} {mean:6.3f}  95 % CI [{lo:.3f}-{hi:.3f}]  (geometric "
                      f"mean of {len(values)} process pairs' medians)")  # fmt: skip
        for side in ("dropin", "peer"):
            f = result[side]
            print(f"    {side:6} {f['ops_per_s']:10,.0f} ops/s  client {f['client_us']:7.1f} "
                  f"µs/op (user {f['user_us']:.1f}, system {f['system_us']:.1f}; "
                  f"{f['sleeps']:.3f} sleeps/op)  server {f['server_us']:7.1f} µs/op  "
                  f"errors {f['errors']}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
