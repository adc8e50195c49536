"""``poolkit bench [TARGET]``: the command line (``poolkit`` console script and
``python -m poolkit``).

Rules of this module
--------------------
* A bad option, an unreachable target or bad credentials end with one line on stderr,
  ``poolkit bench: error: ...``, and a non-zero exit (2: usage, 1: the target or the run),
  never a traceback. Ctrl-C ends a run cleanly with exit 130 after printing what was measured.
* With ``--json`` stdout holds one JSON document and nothing else.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from ..driver import pip_install
from .config import (
    BenchUsageError,
    RunConfig,
    Sweep,
    check_sweep,
    parse_duration,
    parse_schedule,
    parse_sweep,
    parse_target,
)

__all__ = ["main"]

PROG = "poolkit bench"
EXAMPLES = """\
examples:
  poolkit bench                                   # the embedded server, 10 s
  poolkit bench --sweep max_size=1..64:x2 --plot sizes.png
  poolkit bench 'sim://?service_time=2ms&concurrency=4' --max-size 8 --json
  poolkit bench --duration 30 --sim-schedule '10s:cores=4 20s:cores=8'
  poolkit bench --adaptive --max-size 64 --duration 30 --plot limit.png \
      --sim-schedule '10s:cores=4 20s:cores=8'
  poolkit bench postgresql://postgres@127.0.0.1/test --concurrency 64 --processes 4
  poolkit bench redis://127.0.0.1:6379 --threads --concurrency 16
  poolkit bench tcp://127.0.0.1:7000 --payload 64
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _duration(allow_none: bool = False) -> Callable[[str], float | None]:
    def parse(text: str) -> float | None:
        if allow_none and text.lower() in {"none", "off"}:
            return None
        try:
            return parse_duration(text, "")  # (argparse names the option)
        except BenchUsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "duration"
    return parse


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Run a workload through a poolkit pool against a target; show how the "
        "pool behaves and which max_size to choose.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "target",
        nargs="?",
        default="sim://",
        help="sim:// (default: the embedded server; settings as ?key=value or --sim), "
        "postgresql://..., redis://..., mongodb://..., tcp://HOST:PORT (an echo server), "
        "https://... or http://... with --http2 (a GET of the URL)",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "-c",
        "--concurrency",
        type=int,
        default=32,
        help="tasks (or threads) per process doing operations (default 32)",
    )
    w.add_argument(
        "--threads",
        action="store_true",
        help="threads and poolkit.Pool instead of asyncio and poolkit.AsyncPool",
    )
    w.add_argument(
        "--trio",
        action="store_true",
        help="poolkit.AsyncPool under trio instead of asyncio (the embedded server only; "
        "pip install 'poolkit[trio]')",
    )
    w.add_argument(
        "-d",
        "--duration",
        type=_duration(),
        default=10.0,
        help="measured seconds, after the warm-up (default 10s; e.g. 500ms, 30s, 2m)",
    )
    w.add_argument(
        "-n",
        "--ops",
        type=int,
        default=None,
        help="measure this many operations (over all processes) instead of a duration",
    )
    w.add_argument(
        "--warmup",
        type=_duration(),
        default=1.0,
        help="seconds run before measuring (default 1s)",
    )
    w.add_argument(
        "--think",
        type=_duration(),
        default=0.0,
        help="pause between one task's operations, outside the pool (default 0)",
    )
    w.add_argument(
        "-p",
        "--processes",
        type=int,
        default=1,
        help="worker processes, each with its own pool, as an app with N workers",
    )
    w.add_argument(
        "--op-timeout",
        type=_duration(),
        default=10.0,
        help="longest one operation may take (default 10s)",
    )
    w.add_argument("--query", default="SELECT 1", help="the SQL for postgresql:// targets")
    w.add_argument(
        "--payload",
        type=int,
        default=16,
        help="bytes per request for sim:// and tcp:// (default 16)",
    )
    o = p.add_argument_group("pool")
    o.add_argument("--max-size", type=int, default=10, help="max_size per pool (default 10)")
    o.add_argument("--min-size", type=int, default=0, help="min_size per pool (default 0)")
    o.add_argument("--max-connecting", type=int, default=2, help="default 2")
    o.add_argument(
        "--wait-timeout",
        type=_duration(allow_none=True),
        default=10.0,
        help="wait_queue_timeout (default 10s; 'none': wait forever)",
    )
    o.add_argument("--connect-timeout", type=_duration(), default=10.0, help="default 10s")
    o.add_argument(
        "--adaptive",
        action="store_true",
        help="the pools find their limit on connections in use as they run (PoolOptions("
        "adaptive=Adaptive()), up to --max-size): shown live, in the summary and, with --plot, "
        "against time",
    )
    o.add_argument(
        "--no-hooks",
        action="store_true",
        help="no check, reset or is_broken hooks (the backend's are on by default)",
    )
    t = p.add_argument_group("target")
    t.add_argument(
        "--driver",
        choices=("asyncpg", "psycopg"),
        help="for postgresql:// (default: asyncpg, or psycopg with --threads)",
    )
    t.add_argument(
        "--http2",
        action="store_true",
        help="for https:// and http:// targets: HTTP/2 (TLS with ALPN h2; http://: prior "
        "knowledge), one stream per checkout (poolkit.backends.http2; asyncio)",
    )
    t.add_argument(
        "--pgbouncer",
        action="store_true",
        help="the target is PgBouncer in transaction mode: no server-side prepared "
        "statements (asyncpg's statement cache off)",
    )
    t.add_argument(
        "--sim",
        type=_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an embedded-server setting: service_time (e.g. 1ms, exp:1ms, "
        "uniform:1ms:3ms), handshake, concurrency, max_connections, streams, "
        "drop_requests, drop_connections, goaway_after, seed",
    )
    t.add_argument(
        "--sim-schedule",
        default=None,
        metavar="CHANGES",
        help="the embedded server changes as the run goes on: 'AT:KEY=VALUE[,...] ...' with "
        "AT from its start and KEY concurrency (cores), service_time (service), drop_requests "
        "or drop_connections, e.g. '10s:cores=4 20s:cores=8'",
    )
    r = p.add_argument_group("output")
    r.add_argument(
        "--sweep",
        type=str,
        default=None,
        metavar="NAME=VALUES",
        help="one run per value: max_size=1,2,4,8 or 1..8 or 1..64:x2 (also "
        "min_size, max_connecting, concurrency; at most 64 runs); recommends the smallest value "
        "within 5%% of the best throughput whose callers wait no longer for a connection than "
        "they hold one (a max_size never above the connections a pool could use)",
    )
    r.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="draw the sweep's throughput and waits against the value, or one run's throughput, "
        "connections (and --adaptive's limit) and times against time (needs poolkit[plot])",
    )
    r.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (schema poolkit.bench/1) and nothing else",
    )
    return p


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def _config(args: argparse.Namespace) -> tuple[RunConfig, Sweep | None]:
    target = parse_target(args.target, dict(args.sim) if args.sim else None)
    if args.sim_schedule is not None:
        if target.sim is None:
            raise BenchUsageError("--sim-schedule: only for the embedded server (target sim://)")
        changes = parse_schedule(args.sim_schedule)
        target = dataclasses.replace(target, sim=dataclasses.replace(target.sim, schedule=changes))
    config = RunConfig(
        target=target,
        concurrency=args.concurrency,
        threads=args.threads,
        trio=args.trio,
        duration=None if args.ops is not None else args.duration,
        ops=args.ops,
        warmup=args.warmup,
        think=args.think,
        processes=args.processes,
        max_size=args.max_size,
        min_size=args.min_size,
        max_connecting=args.max_connecting,
        wait_queue_timeout=args.wait_timeout,
        connect_timeout=args.connect_timeout,
        hooks=not args.no_hooks,
        driver=args.driver,
        query=args.query,
        payload=args.payload,
        pgbouncer=args.pgbouncer,
        http2=args.http2,
        op_timeout=args.op_timeout,
        adaptive=args.adaptive,
    )
    config.check()
    if args.plot is not None:
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise BenchUsageError(f"--plot {args.plot}: no folder {folder} to write it in")
    sweep = parse_sweep(args.sweep) if args.sweep is not None else None
    if sweep is not None:
        check_sweep(config, sweep)
    return config, sweep


def bench(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        config, sweep = _config(args)
    except BenchUsageError as exc:
        return _fail(str(exc), 2)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        return _fail(f"--plot needs matplotlib: {pip_install('plot')}", 2)
    if not args.json and importlib.util.find_spec("rich") is None:
        return _fail(f"the display needs rich: {pip_install('bench')} (or use --json)", 2)

    from .runner import BenchError, Interrupt, QuietSink, Sink, run_bench

    sink: Sink
    if args.json:
        sink = QuietSink()
    else:
        from .display import Display

        sink = Display()
    interrupt = Interrupt()
    try:
        with interrupt.installed():
            try:
                result = run_bench(config, sweep, sink, interrupt)
            finally:
                sink.close()
    except BenchError as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        return _fail("interrupted again: stopped without the results", 130)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        from .display import print_summary

        print_summary(result)
    if args.plot is not None and result.points:
        from .plot import plot_sweep, plot_timeline

        try:
            if result.sweep is not None:
                plot_sweep(result, args.plot)
            else:
                plot_timeline(result, args.plot)
        except (OSError, ValueError) as exc:
            return _fail(f"--plot {args.plot}: {exc}", 1)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 130 if result.interrupted else 0


def main(argv: list[str] | None = None) -> int:
    """``poolkit <command> ...``: the one command is ``bench``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: poolkit bench [TARGET] [options]   (poolkit bench --help for the options)")
        return 0 if argv else 2
    if argv[0] != "bench":
        print(
            f"poolkit: error: unknown command {argv[0]!r} (the one command is 'bench')",
            file=sys.stderr,
        )
        return 2
    return bench(argv[1:])
