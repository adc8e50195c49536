"""Count the Python bytecodes one cycle of a benchmark workload executes, per function.

A measure that the shared machine's noise does not move: ``python benchmarks/bytecodes.py``
prints, for the floor and for poolkit, the bytecodes per cycle of the threaded contention
workload (32 threads on 10 connections, checkout -> sleep(0) -> release) and the functions
that run most of them. Tracing is slow: it runs a small number of cycles.

    python benchmarks/bytecodes.py [--cycles N] [--top N] [--only floor|poolkit]
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_pool


def count(impl: str, cycles: int) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[frame.f_code.co_qualname] += 1
            return local

        return local

    threading.settrace(tracer)
    try:
        bench_pool.thread_w2(impl, cycles)
    finally:
        threading.settrace(None)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cycles", type=int, default=20_000)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--only", choices=("floor", "poolkit"))
    args = ap.parse_args()
    for impl in [args.only] if args.only else ["floor", "poolkit"]:
        counts = count(impl, args.cycles)
        total = sum(counts.values())
        print(f"{impl}: {total / args.cycles:.1f} bytecodes per cycle (threads W2)")
        for name, n in counts.most_common(args.top):
            print(f"  {name:48} {n / args.cycles:8.1f}")


if __name__ == "__main__":
    main()
