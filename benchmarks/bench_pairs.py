"""``poolkit bench`` runs of several pool settings in turns, as paired rounds: on a shared machine
one run of each says little (the same static pool ran 6,700 and 7,800 ops/s a minute apart), a
ratio to the first setting in the same round says more, and their median over rounds more again.

    python benchmarks/bench_pairs.py [--target URL] [--rounds 4] [--duration 20] [--warmup 3]
                                     NAME=ARGS [NAME=ARGS ...]

    python benchmarks/bench_pairs.py s24="--max-size 24" adaptive="--adaptive --max-size 64"

Each round runs every setting once, ``poolkit bench TARGET ARGS --json`` as a user runs it,
in the given order, and the next round in the reverse order (so that no setting always runs
first, or after the same one). Printed: each round's throughputs, then per setting the median
throughput, the median of its ratios to the first setting's in the same round (with every
round's), and an adaptive pool's limit (its median in each run).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SIM = "sim://?service_time=exp:1ms&concurrency=8"


@dataclass
class Setting:
    name: str
    args: list[str]
    runs: list[dict[str, Any]] = field(default_factory=list)

    def throughput(self, i: int) -> float:
        return float(self.runs[i]["throughput"])


def parse_setting(text: str) -> Setting:
    """``NAME=ARGS`` (the arguments as a shell would split them)."""
    name, sep, args = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a setting is NAME=ARGS, got {text!r}")
    return Setting(name, shlex.split(args))


def bench(target: str, args: list[str], duration: str, warmup: str) -> dict[str, Any]:
    """One ``poolkit bench`` run's result (its first, the only one without ``--sweep``)."""
    command = [sys.executable, "-m", "poolkit", "bench", target, *args]
    command += ["--duration", duration, "--warmup", warmup, "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed ({out.returncode}):\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)["results"][0]
    return result


def in_turns(
    settings: list[Setting],
    rounds: int,
    run: Callable[[list[str]], dict[str, Any]],
    done: Callable[[int], None] | None = None,
) -> None:
    """Run every setting once a round (``run(its args)``: one ``poolkit bench`` result, kept in
    its ``runs``), in the given order, the next round in the reverse order; ``done(round)``
    after each."""
    for r in range(rounds):
        for setting in settings if r % 2 == 0 else settings[::-1]:
            setting.runs.append(run(setting.args))
        if done is not None:
            done(r)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("settings", nargs="+", type=parse_setting, metavar="NAME=ARGS")
    parser.add_argument("--target", default=SIM, help=f"poolkit bench's target ({SIM})")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", default="20", help="measured seconds of each run")
    parser.add_argument("--warmup", default="3", help="seconds run before measuring")
    args = parser.parse_args(argv)
    settings: list[Setting] = args.settings
    if len({s.name for s in settings}) != len(settings):
        parser.error("each setting needs a name of its own")

    def run(setting_args: list[str]) -> dict[str, Any]:
        return bench(args.target, setting_args, args.duration, args.warmup)

    def done(r: int) -> None:
        line = ", ".join(f"{s.name} {s.throughput(r):,.0f}" for s in settings)
        print(f"round {r + 1}: {line} ops/s", flush=True)

    in_turns(settings, args.rounds, run, done)
    first = settings[0]
    width = max(len(s.name) for s in settings)
    for s in settings:
        ratios = [s.throughput(i) / first.throughput(i) for i in range(args.rounds)]
        median = statistics.median(s.throughput(i) for i in range(args.rounds))
        limits = [(run.get("adaptive") or {}).get("median") for run in s.runs]
        shown = f"  limit medians {limits}" if any(x is not None for x in limits) else ""
        each = ", ".join(f"{x:.3f}" for x in ratios)
        print(
            f"{s.name:{width}}  {median:8,.0f} ops/s  x {statistics.median(ratios):.3f} "
            f"{first.name} ({each}){shown}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
