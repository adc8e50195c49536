"""Benchmark poolkit against a minimal FIFO pool ("the floor") over null connections.

Runs, in one process, each workload on the floor and on poolkit, interleaved ``--repeat`` times
(the order alternates each repeat), and prints the median of every figure, ratios computed from
the medians, and each target with PASS/FAIL. A measurement, not a test: exit code 0 unless
``--check`` is given and a target fails.

    python benchmarks/bench_pool.py [--repeat N] [--cycles N] [--json PATH]
                                    [--only async|threads|trio] [--workload W1|W2] [--check]

Workloads (pools of 10 connections, pre-warmed before timing):

* async W1: one task, ``--cycles`` uncontended cycles; ns/cycle, in each form a user writes:
  ``lease = await pool.checkout()`` + ``lease.release()`` ("poolkit"), + ``await
  pool.checkin(lease)`` ("poolkit checkin"), and ``async with pool.connection():`` ("poolkit
  connection()"); the floor's ``await acquire()`` + ``release()`` beside them. Each form has a
  pool of its own, and the forms take turns in chunks of 500 cycles (which goes first rotates);
  a form's ns/cycle in a repeat is the median of its chunks. Each form is given as its ratio to
  the floor, and every form also to checkout + release, computed per repeat (the same stretch
  of a noisy machine), then the median of those ratios over the repeats, with their min-max.
* async W2: 1,000 tasks, each with a fixed quota (cycles / 1,000) of checkout ->
  ``await asyncio.sleep(0)`` -> release; ops/s, checkout wait p50/p99/max, cycles per task, and
  fairness: the spread of completed cycles across tasks when the first task finishes.
* threads W1: one thread; the same forms (``pool.checkin(lease)``, ``with pool.connection():``).
* threads W2: 32 threads, fixed quota each of checkout -> ``time.sleep(0)`` (give up the GIL,
  the threads' ``await asyncio.sleep(0)``) -> release; same figures as async W2.
* trio W1, trio W2 (``poolkit[trio]``): async W1 and W2 with ``AsyncPool`` under trio (each pool
  in its ``async with`` block) against the floor on trio's primitives (``floors.TrioFloor``);
  W2's ``sleep(0)`` is ``trio.lowlevel.checkpoint()``. Set beside async W1 and W2 of the same
  run, they give the trio front end's cost against asyncio's (issue 41).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import poolkit
from floors import AsyncFloor, NullConn, ThreadFloor, TrioFloor, pctl

POOL_SIZE = 10
ASYNC_TASKS = 1000
THREADS = 32
HANG_TIMEOUT = 120.0  # seconds before a W2 run is declared hung
NAN = float("nan")

Figures = dict[str, float]


def wait_figures(waits: list[float], elapsed: float, total: int, counts: list[int],
                 at_first: list[int]) -> Figures:
    waits.sort()
    return {
        "ops_per_s": total / elapsed,
        "elapsed_s": elapsed,
        "wait_p50_us": pctl(waits, 0.50) * 1e6,
        "wait_p99_us": pctl(waits, 0.99) * 1e6,
        "wait_max_us": waits[-1] * 1e6 if waits else NAN,
        "cycles_min": float(min(counts)),
        "cycles_max": float(max(counts)),
        "spread_at_first_finish": float(max(at_first) - min(at_first)) if at_first else -1.0,
    }


def options() -> poolkit.PoolOptions:
    return poolkit.PoolOptions(max_size=POOL_SIZE, min_size=POOL_SIZE, max_connecting=POOL_SIZE)


# ---------------------------------------------------------------------- asyncio


async def async_connect(ctx: poolkit.ConnectContext) -> NullConn:
    return NullConn()


AsyncPair = tuple[Callable[[], Awaitable[Any]], Callable[[Any], None]]


async def async_pool() -> poolkit.AsyncPool[NullConn]:
    """A fresh poolkit pool, pre-warmed (all its connections open and available)."""
    pool: poolkit.AsyncPool[NullConn] = poolkit.AsyncPool(
        async_connect, address="bench", options=options()
    )
    pool.ready()
    deadline = time.monotonic() + 10
    while pool.stats().available < POOL_SIZE:
        if time.monotonic() > deadline:
            raise RuntimeError(f"poolkit did not pre-warm: {pool!r}")
        await asyncio.sleep(0.001)
    return pool


async def async_make(impl: str) -> tuple[AsyncPair, Callable[[], Awaitable[None]]]:
    """(acquire, release) and a closer for a fresh, pre-warmed pool."""
    if impl == "floor":
        floor = AsyncFloor(NullConn() for _ in range(POOL_SIZE))

        async def noop() -> None:
            pass

        return (floor.acquire, floor.release), noop
    pool = await async_pool()
    # The lease's release called as a plain function: one call, as the floor's bound release is.
    probe = await pool.checkout()
    release = type(probe).release
    release(probe)
    return (pool.checkout, release), pool.close


#: W1's forms: the floor's cycle, and each way a user writes poolkit's (see the module's doc)
W1_FORMS: dict[str, str] = {
    "floor": "floor: acquire() + release()",
    "poolkit": "checkout() + lease.release()",
    "poolkit checkin": "checkout() + checkin(lease)",
    "poolkit connection()": "with connection()",
}


async def async_cycles(impl: str, target: Any, cycles: int) -> None:
    """``cycles`` uncontended cycles of W1's form ``impl`` on ``target`` (the floor or a pool);
    methods bound once, for the floor and poolkit alike."""
    if impl == "floor":
        acquire, release = target.acquire, target.release
        for _ in range(cycles):
            c = await acquire()
            release(c)
    elif impl == "poolkit":
        checkout = target.checkout
        for _ in range(cycles):
            lease = await checkout()
            lease.release()
    elif impl == "poolkit checkin":
        checkout, checkin = target.checkout, target.checkin
        for _ in range(cycles):
            lease = await checkout()
            await checkin(lease)
    else:
        connection = target.connection
        for _ in range(cycles):
            async with connection():
                pass


async def async_target(impl: str) -> tuple[Any, Callable[[], Awaitable[None]]]:
    """What W1's form ``impl`` runs on (the floor, or a pre-warmed pool), and its closer."""
    if impl == "floor":

        async def noop() -> None:
            pass

        return AsyncFloor(NullConn() for _ in range(POOL_SIZE)), noop
    pool = await async_pool()
    return pool, pool.close


#: W1 times its cycles in chunks of this many, the forms' chunks taking turns
W1_CHUNK = 500


def w1_figures(chunks: dict[str, list[float]]) -> dict[str, Figures]:
    """Each form's ns/cycle: the median of its chunks (a burst of the machine's noise hits a
    few chunks of every form, not one form's whole run)."""
    return {impl: {"ns_per_cycle": statistics.median(v)} for impl, v in chunks.items()}


async def async_w1(cycles: int) -> dict[str, Figures]:
    """One repeat of async W1: every form on a pool of its own (the floor too), all set up first;
    then ``cycles`` cycles of each in chunks of ``W1_CHUNK``, the forms taking turns (which goes
    first rotates)."""
    impls = tuple(W1_FORMS)
    targets = {impl: await async_target(impl) for impl in impls}
    chunks: dict[str, list[float]] = {impl: [] for impl in impls}
    gc.collect()
    for i in range(max(1, cycles // W1_CHUNK)):
        for impl in order(i, impls):
            t0 = time.perf_counter_ns()
            await async_cycles(impl, targets[impl][0], W1_CHUNK)
            chunks[impl].append((time.perf_counter_ns() - t0) / W1_CHUNK)
    for _, close in targets.values():
        await close()
    return w1_figures(chunks)


async def async_w2(impl: str, cycles: int) -> Figures:
    (acquire, release), close = await async_make(impl)
    quota = max(1, cycles // ASYNC_TASKS)
    counts = [0] * ASYNC_TASKS
    at_first: list[int] = []
    waits: list[float] = []
    pc = time.perf_counter
    sleep = asyncio.sleep

    async def worker(i: int) -> None:
        for _ in range(quota):
            t = pc()
            c = await acquire()
            waits.append(pc() - t)
            await sleep(0)
            release(c)
            counts[i] += 1
        if not at_first:
            at_first.extend(counts)

    gc.collect()
    t0 = pc()
    tasks = [asyncio.create_task(worker(i)) for i in range(ASYNC_TASKS)]
    done, pending = await asyncio.wait(tasks, timeout=HANG_TIMEOUT)
    elapsed = pc() - t0
    if pending:
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise RuntimeError(f"{len(pending)} tasks hung after {HANG_TIMEOUT}s, counts "
                           f"min={min(counts)} max={max(counts)}")
    for t in done:
        t.result()
    await close()
    return wait_figures(waits, elapsed, quota * ASYNC_TASKS, counts, at_first)


# ---------------------------------------------------------------------- trio


async def trio_target(impl: str, stack: contextlib.AsyncExitStack) -> Any:
    """What a trio workload's ``impl`` runs on: the floor, or a pre-warmed pool inside its
    ``async with`` block (entered on ``stack``)."""
    if impl == "floor":
        return TrioFloor(NullConn() for _ in range(POOL_SIZE))
    import trio

    pool: poolkit.AsyncPool[NullConn] = poolkit.AsyncPool(
        async_connect, address="bench", options=options()
    )
    await stack.enter_async_context(pool)
    with trio.fail_after(10):
        while pool.stats().available < POOL_SIZE:  # noqa: ASYNC110 - the pool's own tasks fill it
            await trio.sleep(0.001)
    return pool


def trio_w1(cycles: int) -> dict[str, Figures]:
    """async W1 under trio: the same forms and chunks (``async_cycles`` is library-neutral)."""
    import trio

    async def main() -> dict[str, Figures]:
        impls = tuple(W1_FORMS)
        async with contextlib.AsyncExitStack() as stack:
            targets = {impl: await trio_target(impl, stack) for impl in impls}
            chunks: dict[str, list[float]] = {impl: [] for impl in impls}
            gc.collect()
            for i in range(max(1, cycles // W1_CHUNK)):
                for impl in order(i, impls):
                    t0 = time.perf_counter_ns()
                    await async_cycles(impl, targets[impl], W1_CHUNK)
                    chunks[impl].append((time.perf_counter_ns() - t0) / W1_CHUNK)
        return w1_figures(chunks)

    return trio.run(main)


async def trio_w2_run(impl: str, cycles: int) -> Figures:
    """async W2 under trio, in the running trio run."""
    import trio

    async with contextlib.AsyncExitStack() as stack:
        target = await trio_target(impl, stack)
        if impl == "floor":
            acquire, release = target.acquire, target.release
        else:
            probe = await target.checkout()
            release = type(probe).release
            release(probe)
            acquire = target.checkout
        quota = max(1, cycles // ASYNC_TASKS)
        counts = [0] * ASYNC_TASKS
        at_first: list[int] = []
        waits: list[float] = []
        pc = time.perf_counter
        checkpoint = trio.lowlevel.checkpoint

        async def worker(i: int) -> None:
            for _ in range(quota):
                t = pc()
                c = await acquire()
                waits.append(pc() - t)
                await checkpoint()
                release(c)
                counts[i] += 1
            if not at_first:
                at_first.extend(counts)

        gc.collect()
        t0 = pc()
        with trio.fail_after(HANG_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for i in range(ASYNC_TASKS):
                    nursery.start_soon(worker, i)
        elapsed = pc() - t0
    return wait_figures(waits, elapsed, quota * ASYNC_TASKS, counts, at_first)


def trio_w2(impl: str, cycles: int) -> Figures:
    import trio

    return trio.run(trio_w2_run, impl, cycles)


# ---------------------------------------------------------------------- threads


def thread_connect(ctx: poolkit.ConnectContext) -> NullConn:
    return NullConn()


ThreadPair = tuple[Callable[[], Any], Callable[[Any], None], Callable[[], None]]


def thread_pool() -> poolkit.Pool[NullConn]:
    """A fresh poolkit pool, pre-warmed (all its connections open and available)."""
    pool: poolkit.Pool[NullConn] = poolkit.Pool(thread_connect, address="bench", options=options())
    pool.ready()
    deadline = time.monotonic() + 10
    while pool.stats().available < POOL_SIZE:
        if time.monotonic() > deadline:
            raise RuntimeError(f"poolkit did not pre-warm: {pool!r}")
        time.sleep(0.001)
    return pool


def thread_make(impl: str) -> ThreadPair:
    if impl == "floor":
        floor = ThreadFloor(NullConn() for _ in range(POOL_SIZE))
        return floor.acquire, floor.release, lambda: None
    pool = thread_pool()
    probe = pool.checkout()
    release = type(probe).release
    release(probe)
    return pool.checkout, release, pool.close


def thread_cycles(impl: str, target: Any, cycles: int) -> None:
    """``async_cycles`` for threads."""
    if impl == "floor":
        acquire, release = target.acquire, target.release
        for _ in range(cycles):
            c = acquire()
            release(c)
    elif impl == "poolkit":
        checkout = target.checkout
        for _ in range(cycles):
            lease = checkout()
            lease.release()
    elif impl == "poolkit checkin":
        checkout, checkin = target.checkout, target.checkin
        for _ in range(cycles):
            lease = checkout()
            checkin(lease)
    else:
        connection = target.connection
        for _ in range(cycles):
            with connection():
                pass


def thread_target(impl: str) -> tuple[Any, Callable[[], None]]:
    if impl == "floor":
        return ThreadFloor(NullConn() for _ in range(POOL_SIZE)), lambda: None
    pool = thread_pool()
    return pool, pool.close


def thread_w1(cycles: int) -> dict[str, Figures]:
    """``async_w1`` for threads (one thread)."""
    impls = tuple(W1_FORMS)
    targets = {impl: thread_target(impl) for impl in impls}
    chunks: dict[str, list[float]] = {impl: [] for impl in impls}
    gc.collect()
    for i in range(max(1, cycles // W1_CHUNK)):
        for impl in order(i, impls):
            t0 = time.perf_counter_ns()
            thread_cycles(impl, targets[impl][0], W1_CHUNK)
            chunks[impl].append((time.perf_counter_ns() - t0) / W1_CHUNK)
    for _, close in targets.values():
        close()
    return w1_figures(chunks)


def thread_w2(impl: str, cycles: int) -> Figures:
    acquire, release, close = thread_make(impl)
    quota = max(1, cycles // THREADS)
    counts = [0] * THREADS
    at_first: list[int] = []
    first_lock = threading.Lock()
    per_thread: list[list[float]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS + 1)
    pc = time.perf_counter
    yield_gil = time.sleep

    def worker(i: int) -> None:
        waits = per_thread[i]
        try:
            barrier.wait()
            for _ in range(quota):
                t = pc()
                c = acquire()
                waits.append(pc() - t)
                yield_gil(0)  # the threads' await asyncio.sleep(0): others run while we hold it
                release(c)
                counts[i] += 1
            with first_lock:
                if not at_first:
                    at_first.extend(counts)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    gc.collect()
    barrier.wait()
    t0 = pc()
    deadline = t0 + HANG_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - pc()))
    elapsed = pc() - t0
    if any(t.is_alive() for t in threads):
        raise RuntimeError(f"threads hung after {HANG_TIMEOUT}s, counts "
                           f"min={min(counts)} max={max(counts)}")
    if errors:
        raise errors[0]
    close()
    waits = [w for ws in per_thread for w in ws]
    return wait_figures(waits, elapsed, quota * THREADS, counts, at_first)


# ---------------------------------------------------------------------- driver

Results = dict[str, dict[str, list[Figures]]]  # workload -> impl -> per-repeat figures


def order(rep: int, impls: tuple[str, ...]) -> tuple[str, ...]:
    """The order of ``impls`` in repeat ``rep``: rotated, so that each runs first in turn."""
    k = rep % len(impls)
    return impls[k:] + impls[:k]


Workload = tuple[str, Callable[[str, int], Figures]]
#: W1 runs all its forms in one go (``async_w1``): impl -> figures
FormsWorkload = tuple[str, Callable[[int], dict[str, Figures]]]
PAIR = ("floor", "poolkit")
WORKLOADS: dict[str, tuple[list[FormsWorkload], list[Workload]]] = {
    "async": (
        [("async W1", lambda n: asyncio.run(async_w1(n)))],
        [("async W2", lambda impl, n: asyncio.run(async_w2(impl, n)))],
    ),
    "threads": ([("threads W1", thread_w1)], [("threads W2", thread_w2)]),
    "trio": ([("trio W1", trio_w1)], [("trio W2", trio_w2)]),
}
#: the per-repeat ratios of a W1 form: to the floor, and to checkout + release
RATIOS = ("x_floor", "x_release")


def run_forms(results: Results, errors: list[str], workloads: list[FormsWorkload], repeat: int,
              cycles: int) -> None:
    """Each W1 workload ``repeat`` times, a fresh loop each; each form's ratios are taken within
    its repeat (``RATIOS``)."""
    for name, fn in workloads:
        for _ in range(repeat):
            try:
                this = fn(cycles)
            except Exception as exc:
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            floor, release = this["floor"]["ns_per_cycle"], this["poolkit"]["ns_per_cycle"]
            for impl, fig in this.items():
                fig["x_floor"] = fig["ns_per_cycle"] / floor
                if impl != "floor":
                    fig["x_release"] = fig["ns_per_cycle"] / release
                results.setdefault(name, {}).setdefault(impl, []).append(fig)


def run(results: Results, errors: list[str], workloads: list[Workload], repeat: int,
        cycles: int) -> None:
    """Each workload ``repeat`` times, floor and poolkit alternating first; a fresh loop each."""
    for name, fn in workloads:
        for rep in range(repeat):
            for impl in order(rep, PAIR):
                try:
                    fig = fn(impl, cycles)
                except Exception as exc:
                    errors.append(f"{name} {impl}: {type(exc).__name__}: {exc}")
                else:
                    results.setdefault(name, {}).setdefault(impl, []).append(fig)


def medians(runs: list[Figures]) -> Figures:
    if not runs:
        return {}
    keys = {k for r in runs for k in r}
    out = {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0] if k in keys}
    for k in RATIOS:  # the spread of the per-repeat ratios
        values = [r[k] for r in runs if k in r]
        if values:
            out[k] = statistics.median(values)
            out[k + "_min"], out[k + "_max"] = min(values), max(values)
    for k in ("cycles_max", "spread_at_first_finish"):  # fairness: worst run, not median
        if k in runs[0]:
            out[k + "_worst"] = max(r[k] for r in runs)
    if "cycles_min" in runs[0]:
        out["cycles_min_worst"] = min(r["cycles_min"] for r in runs)
    return out


def targets(med: dict[str, dict[str, Figures]]) -> list[tuple[str, float, str, bool]]:
    """(description, value, target text, passed)."""
    out: list[tuple[str, float, str, bool]] = []

    def get(w: str, impl: str, k: str) -> float:
        return med.get(w, {}).get(impl, {}).get(k, NAN)

    # W1: medians of the ratios taken in each repeat (issue 25's targets)
    for w, limit in (("async W1", 4.0), ("threads W1", 2.0), ("trio W1", 4.0)):
        if w not in med:
            continue
        for impl in ("poolkit", "poolkit checkin"):
            r = get(w, impl, "x_floor")
            out.append((f"{w} {W1_FORMS[impl]} / floor", r, f"<= {limit}", r <= limit))
        r = get(w, "poolkit connection()", "x_release")
        out.append((f"{w} connection() / checkout + release", r, "<= 1.3", r <= 1.3))
    for w, limit in (("async W2", 0.6), ("threads W2", 0.8), ("trio W2", 0.6)):
        if w not in med:
            continue
        r = get(w, "poolkit", "ops_per_s") / get(w, "floor", "ops_per_s")
        out.append((f"{w} ops ratio poolkit/floor", r, f">= {limit}", r >= limit))
        lo, hi = get(w, "poolkit", "cycles_min_worst"), get(w, "poolkit", "cycles_max_worst")
        out.append((f"{w} poolkit cycles/unit max-min (worst)", hi - lo, "<= 1", hi - lo <= 1))
    for w in ("async W2", "trio W2"):
        if w not in med:
            continue
        # Fixed quotas make cycles/task equal by construction; FIFO fairness shows as the spread
        # of completed cycles across tasks when the first one finishes (round-robin: <= 1).
        s = get(w, "poolkit", "spread_at_first_finish_worst")
        out.append((f"{w} poolkit spread at first finish (worst)", s, "<= 1", s <= 1))
    for w1, w2 in (("trio W1", "async W1"), ("trio W2", "async W2")):
        if w1 in med and w2 in med:  # (the trio front end against asyncio's, same run)
            k = "ns_per_cycle" if w1.endswith("W1") else "ops_per_s"
            r = get(w1, "poolkit", k) / get(w2, "poolkit", k)
            out.append((f"{w1} / {w2} poolkit {k} (information)", r, "-", True))
    if "threads W2" in med:
        mx = get("threads W2", "poolkit", "wait_max_us")
        p99 = get("threads W2", "poolkit", "wait_p99_us")
        r = mx / p99 if p99 else NAN
        out.append(("threads W2 poolkit max wait / p99", r, "<= 5", r <= 5))
    return out


RATIO_KEYS = {"ns_per_cycle", "ops_per_s", "elapsed_s", "wait_p50_us", "wait_p99_us",
              "wait_max_us"}


def fmt(v: float) -> str:
    if v != v:
        return "n/a"
    if abs(v) >= 100 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:.3g}"


def spread(fig: Figures, k: str) -> str:
    """A per-repeat ratio's median and its min-max, as ``4.21 (4.05-4.40)``."""
    if k not in fig:
        return ""
    return f"{fig[k]:.2f} ({fig[k + '_min']:.2f}-{fig[k + '_max']:.2f})"


def print_table(med: dict[str, dict[str, Figures]], checks: list[tuple[str, float, str, bool]],
                errors: list[str], repeat: int) -> None:
    print(f"\nMedians over {repeat} repeats (python {sys.version.split()[0]}, "
          f"poolkit {poolkit.__version__}); fairness rows '_worst' are the worst run\n")
    w1 = [w for w in med if w.endswith("W1")]
    if w1:
        print("W1, one task or thread, uncontended; ratios: the median (min-max) of the ratios "
              "taken in each repeat")
        print(f"{'workload':<11} {'form':<30} {'ns/cycle':>9} {'/ floor':>20} "
              f"{'/ checkout+release':>20}")
        print("-" * 94)
        for w in w1:
            for impl, fig in med[w].items():
                line = (f"{w:<11} {W1_FORMS.get(impl, impl):<30} {fmt(fig['ns_per_cycle']):>9} "
                        f"{spread(fig, 'x_floor'):>20} {spread(fig, 'x_release'):>20}")
                print(line.rstrip())
            print()
    if len(w1) < len(med):
        print(
            f"{'workload':<11} {'figure':<28} {'floor':>14} {'poolkit':>14} "
            f"{'poolkit/floor':>14}"
        )
        print("-" * 85)
    for w, by_impl in med.items():
        if w in w1:
            continue
        keys = list(by_impl.get("poolkit") or by_impl.get("floor") or {})
        for k in keys:
            f, p = by_impl.get("floor", {}).get(k, NAN), by_impl.get("poolkit", {}).get(k, NAN)
            perf = k in RATIO_KEYS
            ratio = p / f if perf and f and f == f and p == p else NAN
            print(f"{w:<11} {k:<28} {fmt(f):>14} {fmt(p):>14} {fmt(ratio):>14}")
        print()
    print(f"{'target':<48} {'value':>10} {'target':>8}  result")
    print("-" * 80)
    for desc, value, text, ok in checks:
        print(f"{desc:<48} {fmt(value):>10} {text:>8}  {'PASS' if ok else 'FAIL'}")
    for w, by_impl in med.items():
        for impl, fig in by_impl.items():
            serial = fig.get("spread_at_first_finish", 0) >= fig.get("cycles_max", 1) > 0
            if serial and fig.get("wait_p50_us", NAN) < 5:
                print(f"note: {w} {impl}: units ran one after another (a unit finished its "
                      "quota before another started; GIL) and barely waited: little contention")
    if errors:
        print("\nERRORS:")
        for e in errors:
            print("  " + e)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--repeat", type=int, default=9, help="interleaved runs of each workload (default 9)"
    )
    ap.add_argument("--cycles", type=int, default=100_000)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--only", choices=("async", "threads", "trio"))
    ap.add_argument("--workload", choices=("W1", "W2"), help="run only this workload")
    ap.add_argument("--check", action="store_true", help="exit 1 if a target fails")
    args = ap.parse_args(argv)

    results: Results = {}
    errors: list[str] = []
    for front in ("async", "threads", "trio"):
        if args.only in (None, front):
            w1, others = WORKLOADS[front]
            if args.workload in (None, "W1"):
                run_forms(results, errors, w1, args.repeat, args.cycles)
            if args.workload in (None, "W2"):
                run(results, errors, others, args.repeat, args.cycles)

    med = {w: {impl: medians(runs) for impl, runs in by.items()} for w, by in results.items()}
    checks = targets(med)
    print_table(med, checks, errors, args.repeat)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({
                "config": {"repeat": args.repeat, "cycles": args.cycles, "pool_size": POOL_SIZE,
                           "async_tasks": ASYNC_TASKS, "threads": THREADS,
                           "python": sys.version},
                "runs": results, "medians": med, "errors": errors,
                "targets": [{"target": d, "value": v, "limit": t, "pass": ok}
                            for d, v, t, ok in checks],
            }, fh, indent=2)
    failed = bool(errors) or not all(ok for *_, ok in checks)
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
