"""Count the machine instructions per operation of the peers benchmark's contenders (callgrind).

``benchmarks/peers.py`` reports each contender's client CPU per operation, the process's CPU
time over its operations: a shared, noisy machine moves it by several per cent from run to run,
as much as the differences between a drop-in and the pool it replaces. This counts what the
noise does not move: the instructions the client process runs per operation (its Python, the
interpreter, the drivers' C code; not the kernel's, not the server's), under valgrind's
callgrind, on the same workloads, made by the same builders::

    python benchmarks/peer_instructions.py H1                  # every contender of H1
    python benchmarks/peer_instructions.py H1,H2 --only "(as shipped)" --jobs 2

Each contender runs twice under callgrind in a process of its own, with every drive of the
harness replaced by a fixed number of operations per worker: ``--ops`` and three times as many.
The difference of the two counts over the difference of the operations is the instructions per
operation, without what both runs share (the interpreter's start, the imports, the connects, the
warm-up). Valgrind runs one thread at a time (``--fair-sched=yes``: in turn) and some 50 times
slower than the machine: the asyncio workloads interleave much as they do natively; the threaded
ones less so, so their counts compare pools under the same serialization, not the native thread
switches (and the kernel's work, which those switches cost, is not counted at all). Needs
``valgrind`` (Debian's package); takes about two minutes per contender, more for threads.

Where two contenders run about as many bytecodes but not as many instructions, the difference is
in C (the interpreter's allocator, the event loop, a driver): ``--by-function N`` also reads each
run's profile with ``callgrind_annotate`` and prints, per workload, the ``N`` C functions whose
instructions per operation (their own, not their callees') differ most between the contenders,
each contender's figure in a column, measured the same way (the two runs' difference)::

    python benchmarks/peer_instructions.py H2 --only AsyncAdaptedQueuePool --by-function 25
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers
from peerbench import drive
from peerbench.cli import add_common, picked
from peerbench.core import Env, Sizes

#: operations per worker of the warm-up drive (connections made, caches warm, and CPython's
#: specializing interpreter settled: at 20, the attribute loads of SQLAlchemy's pools and of the
#: drop-in for them were still turning from generic to specialized and back in the measured
#: drives, which put 8 % on the drop-in's count one run and nothing the next)
WARM_OPS = 200


class Fixed:
    """Stands in for the harness's drivers: every drive runs a fixed number of operations per
    worker (``WARM_OPS`` for the first of a run, the warm-up; ``ops`` for the measured one)."""

    def __init__(self, ops: int) -> None:
        self.ops = ops
        self.drives = 0

    def _count(self) -> int:
        self.drives += 1
        return WARM_OPS if self.drives % 2 == 1 else self.ops

    def finished(self, operations: int) -> None:
        """A drive of ``operations`` in all has ended (for subclasses that measure)."""

    def threads(self, one: drive.SyncOne, workers: int, duration: float, **kw: Any) -> drive.Tally:
        n = self._count()
        barrier = threading.Barrier(workers)

        def worker(i: int) -> None:
            barrier.wait()
            for _ in range(n):
                one(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.finished(n * workers)
        return drive.Tally([n] * workers, elapsed=1.0)

    async def tasks(self, one: drive.AsyncOne, workers: int, duration: float,
                    **kw: Any) -> drive.Tally:  # fmt: skip
        n = self._count()

        async def worker(i: int) -> None:
            for _ in range(n):
                await one(i)

        await asyncio.gather(*(worker(i) for i in range(workers)))
        self.finished(n * workers)
        return drive.Tally([n] * workers, elapsed=1.0)


def child(workload_key: str, label: str, ops: int, dsn: str, redis_url: str) -> int:
    """Run one contender with fixed drives (the process valgrind measures)."""
    sizes = Sizes.tiny()
    env = Env(dsn, redis_url, f"poolkit-instr-{os.getpid()}", sizes)
    workload = peers.select(peers.workloads(sizes), workload_key)[0]
    (contender,) = [c for c in workload.contenders if c.label == label]
    fixed = Fixed(ops)
    drive.drive_threads, drive.drive_async = fixed.threads, fixed.tasks
    contender.run(env)
    if fixed.drives < 2:
        print(f"{label}: no measured drive ran", file=sys.stderr)
        return 1
    return 0


#: a row of ``callgrind_annotate``'s table: "1,234 (5.6%)  path/file.c:function [lib.so]"
_ANNOTATED = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*?)(?: \[[^\]]*\])?\s*$")


def functions_of(annotated: str) -> dict[str, int]:
    """Each C function's own instructions, from ``callgrind_annotate``'s output: keyed
    "file.c:function" (the source file's base name: the same function of the same build whatever
    folder it was built in), the recursion levels callgrind tells apart ("function'2") merged."""
    counts: dict[str, int] = {}
    for line in annotated.splitlines():
        found = _ANNOTATED.match(line)
        if found is None or found.group(2) == "PROGRAM TOTALS":
            continue
        where, _, function = found.group(2).rpartition(":")
        function = re.sub(r"'\d+$", "", function)
        key = f"{Path(where).name}:{function}" if where else function
        counts[key] = counts.get(key, 0) + int(found.group(1).replace(",", ""))
    return counts


def per_op(low: dict[str, int], high: dict[str, int], operations: int) -> dict[str, float]:
    """Each function's instructions per operation: the second run's less the first's, over the
    ``operations`` the second ran more."""
    return {
        name: (high.get(name, 0) - low.get(name, 0)) / operations
        for name in low.keys() | high.keys()
    }


def differing(columns: list[dict[str, float]], top: int) -> list[str]:
    """The ``top`` functions whose figures differ most between ``columns`` (the largest, for one
    column), in that order."""

    def spread(name: str) -> float:
        values = [column.get(name, 0.0) for column in columns]
        return max(values) - min(values) if len(values) > 1 else abs(values[0])

    names = set().union(*columns)
    return sorted(names, key=lambda name: (-spread(name), name))[:top]


def measure(
    workload_key: str, label: str, ops: int, dsn: str, redis_url: str, by_function: bool = False
) -> tuple[int, dict[str, int]]:
    """Instructions of a run of ``label`` with ``ops`` operations per worker, and with
    ``by_function`` each C function's own (else an empty dict)."""
    functions: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "callgrind.out")
        result = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--fair-sched=yes",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                workload_key,
                label,
                str(ops),
                "--dsn",
                dsn,
                "--redis-url",
                redis_url,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        found = re.search(r"Collected : (\d+)", result.stderr)
        if result.returncode != 0 or found is None:
            raise RuntimeError(
                f"{label}: the run failed:\n{result.stdout}\n{result.stderr[-2000:]}"
            )
        if by_function:
            annotated = subprocess.run(
                ["callgrind_annotate", "--threshold=100", str(out)],
                capture_output=True,
                text=True,
                check=True,
            )
            functions = functions_of(annotated.stdout)
    return int(found.group(1)), functions


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("workloads", nargs="?", help="keys of peers.py's workloads, e.g. H1 or H1,H3")
    add_common(ap, "contenders")
    ap.add_argument("--ops", type=int, default=40, help="operations per worker, first run (40)")
    ap.add_argument("--jobs", type=int, default=1, help="runs under valgrind at once (1)")
    ap.add_argument(
        "--by-function",
        type=int,
        default=0,
        metavar="N",
        help="also the N C functions that differ most between the contenders, per operation",
    )
    ap.add_argument(
        "--child", nargs=3, metavar=("WORKLOAD", "LABEL", "OPS"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.child:
        key, label, ops = args.child
        return child(key, label, int(ops), args.dsn, args.redis_url)
    if not args.workloads:
        ap.error("name the workloads, e.g. H1")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 1
    workloads = {w.key: w for w in peers.select(peers.workloads(Sizes.tiny()), args.workloads)}
    jobs = [
        (key, c.label)
        for key, w in workloads.items()
        for c in w.contenders
        if picked(c.label, args.only)
    ]
    runs = [(key, label, n) for key, label in jobs for n in (args.ops, 3 * args.ops)]
    if args.by_function < 0:
        ap.error(f"--by-function must be 0 or more, got {args.by_function}")
    if args.by_function and shutil.which("callgrind_annotate") is None:
        print("callgrind_annotate is not installed (valgrind's)", file=sys.stderr)
        return 1

    def attempt(run: tuple[str, str, int]) -> tuple[int, dict[str, int]] | str:
        try:
            return measure(run[0], run[1], run[2], args.dsn, args.redis_url, args.by_function > 0)
        except RuntimeError as exc:  # (reported in its row; the others are measured)
            return str(exc).strip().splitlines()[-1]

    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(runs, pool.map(attempt, runs), strict=True))
    failed = False
    for key, w in workloads.items():
        print(f"{key}: {w.title}   (instructions per operation, client process, callgrind)")
        workers = _workers(w.title)
        operations = 2 * args.ops * workers  # (what the second run did more)
        columns: list[tuple[str, dict[str, float]]] = []
        for c in w.contenders:
            if (key, c.label, args.ops) not in counts:
                continue
            low = counts[(key, c.label, args.ops)]
            high = counts[(key, c.label, 3 * args.ops)]
            if isinstance(low, str) or isinstance(high, str):
                failed = True
                print(f"  {'failed':>12}  {c.label}: {low if isinstance(low, str) else high}")
                continue
            print(f"  {(high[0] - low[0]) / operations:12,.0f}  {c.label}")
            columns.append((c.label, per_op(low[1], high[1], operations)))
        if args.by_function and columns:
            _print_functions(columns, args.by_function)
    return 1 if failed else 0


def _print_functions(columns: list[tuple[str, dict[str, float]]], top: int) -> None:
    """The table of ``--by-function``: a column per contender (lettered), a row per function."""
    letters = [chr(ord("A") + i) for i in range(len(columns))]
    for letter, (label, _) in zip(letters, columns, strict=True):
        print(f"  {letter}: {label}")
    print(
        "  C functions, own instructions per operation"
        + (", where the contenders differ most:" if len(columns) > 1 else ", the largest:")
    )
    print("  " + "".join(f"{letter:>10}" for letter in letters) + "  function")
    for name in differing([figures for _, figures in columns], top):
        row = "".join(f"{figures.get(name, 0.0):10,.0f}" for _, figures in columns)
        print(f"  {row}  {name}")


def _workers(title: str) -> int:
    """The workers of a workload, from its title ("50 tasks, pool 10, ...")."""
    return int(title.split()[0])


if __name__ == "__main__":
    sys.exit(main())
