"""The CPU an operation costs, client and server, of the peers benchmark's contenders, on fixed
work.

``benchmarks/peers.py`` runs each contender for a time and divides; this runs a fixed number of
operations per worker (``--ops``) and reads, around them, the client process's CPU time
(``resource.getrusage``: user and system), its context switches (voluntary and not), and the CPU
time of the server's processes (PostgreSQL's or Redis', from ``/proc``; every process of that
name on the machine, so run it where no one else uses that server). The contenders alternate
in ``--rounds`` rounds (the order reversed every other round); the figures are medians::

    python benchmarks/peer_cpu.py H1 --only "asyncpg.create_pool" --rounds 8
    python benchmarks/peer_cpu.py H4 --only "BlockingConnectionPool (as shipped)"

It answers what a throughput ratio cannot on a shared machine: whether two pools do the same
work per operation on either side of the socket. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
from peer_instructions import Fixed
from peerbench import drive
from peerbench.cli import add_common, picked
from peerbench.core import Env, Sizes

#: the server's process names, by ``Workload.server``
SERVER_PROCESSES = {"pg": ("postgres",), "redis": ("redis-server",)}


def server_seconds(names: tuple[str, ...]) -> float:
    """The CPU time (user and system) of every process whose name starts with one of
    ``names``."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:  # (gone meanwhile)
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name.startswith(names):
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


class Measured(Fixed):
    """``Fixed`` drives, the measured one (the second of a run) read around."""

    def __init__(self, ops: int, server: tuple[str, ...]) -> None:
        super().__init__(ops)
        self.server = server
        self.figures: dict[str, float] = {}
        self._start: tuple[resource.struct_rusage, float] | None = None

    def _count(self) -> int:
        n = super()._count()
        if self.drives % 2 == 0:
            self._start = (resource.getrusage(resource.RUSAGE_SELF), server_seconds(self.server))
        return n

    def finished(self, operations: int) -> None:
        if self.drives % 2 == 1:  # (the warm-up)
            return
        assert self._start is not None
        before, server_before = self._start
        after = resource.getrusage(resource.RUSAGE_SELF)
        server = server_seconds(self.server) - server_before
        self.figures = {
            "client_us": 1e6
            * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            / operations,
            "system_us": 1e6 * (after.ru_stime - before.ru_stime) / operations,
            "switches": (after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw)
            / operations,
            "server_us": 1e6 * server / operations,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("workloads", help="keys of peers.py's workloads, e.g. H1 or H3,H4")
    add_common(ap, "contenders")
    ap.add_argument("--ops", type=int, default=400, help="operations per worker (400)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (5)")
    args = ap.parse_args(argv)
    sizes = Sizes.tiny()
    env = Env(args.dsn, args.redis_url, f"poolkit-cpu-{os.getpid()}", sizes)
    real = drive.drive_threads, drive.drive_async
    for workload in peers.select(peers.workloads(sizes), args.workloads):
        chosen = [c for c in workload.contenders if picked(c.label, args.only)]
        names = SERVER_PROCESSES.get(workload.server or "", ())
        rounds: dict[str, list[dict[str, float]]] = {c.label: [] for c in chosen}
        started = time.perf_counter()
        for r in range(args.rounds):
            for contender in chosen if r % 2 == 0 else chosen[::-1]:
                measured = Measured(args.ops, names)
                drive.drive_threads, drive.drive_async = measured.threads, measured.tasks
                try:
                    contender.run(env)
                finally:
                    drive.drive_threads, drive.drive_async = real
                rounds[contender.label].append(measured.figures)
        took = time.perf_counter() - started
        print(f"{workload.key}: {workload.title}   ({args.rounds} rounds, "
              f"{args.ops} operations a worker, {took:.0f} s)")  # fmt: skip
        print(f"  {'client µs/op':>12} {'system':>8} {'switches':>9} {'server µs/op':>13}  pool")
        for label, figures in rounds.items():
            med = {k: statistics.median(f[k] for f in figures) for k in figures[0]}
            print(f"  {med['client_us']:12.1f} {med['system_us']:8.1f} {med['switches']:9.2f} "
                  f"{med['server_us']:13.1f}  {label}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
