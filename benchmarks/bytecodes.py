"""Count the Python bytecodes one cycle of a benchmark workload executes, per function.

A measure that the shared machine's noise does not move: ``python benchmarks/bytecodes.py``
prints, for the floor and for poolkit, the bytecodes per cycle of a workload of
``bench_pool.py`` and the functions that run most of them. Tracing is slow: it runs a small
number of cycles.

* ``--workload "threads W2"`` (the default): 32 threads on 10 connections, checkout -> sleep(0)
  -> release.
* ``--workload "async W1"`` / ``"threads W1"``: one uncontended cycle in each form a user writes
  (``bench_pool.W1_FORMS``: checkout + ``lease.release()``, checkout + ``checkin``, ``with
  connection()``) and the floor's; only the cycles are counted, not the pool's set-up.
* ``--workload "async W2"`` / ``"trio W2"``: 1,000 tasks on 10 connections (``bench_pool``'s),
  the whole run counted (the pool's set-up and the event loop's or trio's own Python code too).
* ``--workload "trio W1"``: async W1 with ``AsyncPool`` under trio and the floor on trio's
  primitives (``poolkit[trio]``).

    python benchmarks/bytecodes.py [--workload W] [--cycles N] [--top N] [--only IMPL]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_pool

Counts = collections.Counter[str]


def tracer(counts: Counts) -> Callable[[FrameType, str, Any], Any]:
    """A trace function counting each frame's opcodes under its function's qualified name."""

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[frame.f_code.co_qualname] += 1
            return local

        return local

    return trace


def count_threads_w2(impl: str, cycles: int) -> Counts:
    counts: Counts = collections.Counter()
    threading.settrace(tracer(counts))
    try:
        bench_pool.thread_w2(impl, cycles)
    finally:
        threading.settrace(None)
    return counts


def count_threads_w1(impl: str, cycles: int) -> Counts:
    counts: Counts = collections.Counter()
    target, close = bench_pool.thread_target(impl)
    sys.settrace(tracer(counts))
    try:
        bench_pool.thread_cycles(impl, target, cycles)
    finally:
        sys.settrace(None)
    close()
    return counts


def count_async_w1(impl: str, cycles: int) -> Counts:
    counts: Counts = collections.Counter()

    async def main() -> None:
        target, close = await bench_pool.async_target(impl)
        sys.settrace(tracer(counts))
        try:
            await bench_pool.async_cycles(impl, target, cycles)
        finally:
            sys.settrace(None)
        await close()

    asyncio.run(main())
    return counts


def count_async_w2(impl: str, cycles: int) -> Counts:
    """async W2's whole run (1,000 tasks), counted from inside the loop (asyncio's own Python
    code is counted too: it is what a contended cycle runs)."""
    counts: Counts = collections.Counter()

    async def main() -> None:
        sys.settrace(tracer(counts))
        try:
            await bench_pool.async_w2(impl, cycles)
        finally:
            sys.settrace(None)

    asyncio.run(main())
    return counts


def count_trio_w1(impl: str, cycles: int) -> Counts:
    """``count_async_w1`` under trio (``AsyncPool`` in its block, the floor on trio's
    primitives)."""
    import contextlib

    import trio

    counts: Counts = collections.Counter()

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            target = await bench_pool.trio_target(impl, stack)
            sys.settrace(tracer(counts))
            try:
                await bench_pool.async_cycles(impl, target, cycles)
            finally:
                sys.settrace(None)

    trio.run(main)
    return counts


def count_trio_w2(impl: str, cycles: int) -> Counts:
    """trio W2's whole run (1,000 tasks), counted from inside the trio run (trio's scheduler is
    counted too: it is what a contended cycle runs)."""
    import trio

    counts: Counts = collections.Counter()

    async def main() -> None:
        sys.settrace(tracer(counts))
        try:
            await bench_pool.trio_w2_run(impl, cycles)
        finally:
            sys.settrace(None)

    trio.run(main)
    return counts


WORKLOADS: dict[str, tuple[Callable[[str, int], Counts], tuple[str, ...]]] = {
    "threads W2": (count_threads_w2, bench_pool.PAIR),
    "async W2": (count_async_w2, bench_pool.PAIR),
    "trio W1": (count_trio_w1, tuple(bench_pool.W1_FORMS)),
    "trio W2": (count_trio_w2, bench_pool.PAIR),
    "async W1": (count_async_w1, tuple(bench_pool.W1_FORMS)),
    "threads W1": (count_threads_w1, tuple(bench_pool.W1_FORMS)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", choices=tuple(WORKLOADS), default="threads W2")
    ap.add_argument("--cycles", type=int, default=20_000)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--only", choices=tuple(bench_pool.W1_FORMS), help="one implementation")
    args = ap.parse_args()
    count, impls = WORKLOADS[args.workload]
    for impl in [args.only] if args.only else impls:
        counts = count(impl, args.cycles)
        total = sum(counts.values())
        name = bench_pool.W1_FORMS[impl] if args.workload.endswith("W1") else impl
        print(f"{name}: {total / args.cycles:.1f} bytecodes per cycle ({args.workload})")
        for function, n in counts.most_common(args.top):
            print(f"  {function:48} {n / args.cycles:8.1f}")


if __name__ == "__main__":
    main()
