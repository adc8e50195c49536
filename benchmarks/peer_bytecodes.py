"""Count the Python bytecodes per operation of the peers benchmark's contenders, per function.

``benchmarks/peers.py`` measures throughput and the client's CPU per operation, which a shared
machine disturbs. This counts what the noise does not move: the Python bytecodes each operation
of a contender runs (the harness's, the pool's and the driver's Python code: not C code, not
waiting), by function, on the same workloads, made by the same builders::

    python benchmarks/peer_bytecodes.py H3                    # every contender of H3
    python benchmarks/peer_bytecodes.py H3 --only getconn --top 25
    python benchmarks/peer_bytecodes.py H1,H4 --ops 200

Each contender is built as ``peers.py`` builds it, warmed up untraced for a short time, then
every worker runs ``--ops`` operations with a trace function counting opcodes. Contended
workloads interleave differently from run to run, so the counts of a contender move by a few
bytecodes between runs; differences of tens are the code's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import peers
from bytecodes import Counts, tracer
from peerbench import drive
from peerbench.cli import add_common, picked
from peerbench.core import Env, Figures, Sizes


class Counting:
    """Stands in for the harness's drivers: the first drive of a run (the warm-up) runs as
    usual, the second runs ``ops`` operations per worker under the trace."""

    def __init__(self, ops: int) -> None:
        self.ops = ops
        self.counts: Counts = collections.Counter()
        self.done = 0
        self.drives = 0
        self.real_threads = drive.drive_threads
        self.real_async = drive.drive_async

    def threads(self, one: drive.SyncOne, workers: int, duration: float, **kw: Any) -> drive.Tally:
        self.drives += 1
        if self.drives % 2 == 1:
            return self.real_threads(one, workers, duration, **kw)
        barrier = threading.Barrier(workers)
        trace = tracer(self.counts)
        lock = threading.Lock()

        def worker(i: int) -> None:
            barrier.wait()
            sys.settrace(trace)
            try:
                for _ in range(self.ops):
                    one(i)
            finally:
                sys.settrace(None)
            with lock:
                self.done += self.ops

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return drive.Tally([self.ops] * workers, elapsed=1.0)

    async def tasks(self, one: drive.AsyncOne, workers: int, duration: float,
                    **kw: Any) -> drive.Tally:  # fmt: skip
        self.drives += 1
        if self.drives % 2 == 1:
            return await self.real_async(one, workers, duration, **kw)

        async def worker(i: int) -> None:
            for _ in range(self.ops):
                await one(i)

        sys.settrace(tracer(self.counts))
        try:
            await asyncio.gather(*(worker(i) for i in range(workers)))
        finally:
            sys.settrace(None)
        self.done += self.ops * workers
        return drive.Tally([self.ops] * workers, elapsed=1.0)


@contextmanager
def counting(ops: int) -> Iterator[Counting]:
    c = Counting(ops)
    drive.drive_threads, drive.drive_async = c.threads, c.tasks
    try:
        yield c
    finally:
        drive.drive_threads, drive.drive_async = c.real_threads, c.real_async


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("workloads", help="keys of peers.py's workloads, e.g. H3 or H1,H4")
    add_common(ap, "contenders")
    ap.add_argument("--ops", type=int, default=100, help="traced operations per worker (100)")
    ap.add_argument("--top", type=int, default=0, help="the functions running most (0: none)")
    args = ap.parse_args(argv)
    sizes = Sizes.tiny()
    env = Env(args.dsn, args.redis_url, "poolkit-bytecodes", sizes)
    for workload in peers.select(peers.workloads(sizes), args.workloads):
        print(f"{workload.key}: {workload.title}")
        for contender in workload.contenders:
            if not picked(contender.label, args.only):
                continue
            with counting(args.ops) as c:
                _: Figures = contender.run(env)
            per_op = sum(c.counts.values()) / max(c.done, 1)
            print(f"  {per_op:8.0f}  {contender.label}")
            for function, n in c.counts.most_common(args.top):
                print(f"            {n / c.done:8.1f}  {function}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
