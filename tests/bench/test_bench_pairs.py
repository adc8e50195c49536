"""``python benchmarks/bench_pairs.py``: settings run in turns, the order reversed every other
round, each one's ratios to the first's in the same round. A short run as a user runs it (a
subprocess, the embedded server, half a second a run); no figure is compared with an
expectation (the machine is shared): only what was run and reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_pairs  # noqa: E402


def test_settings_run_in_turns_and_report_their_ratios(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def bench(target: str, args: list[str], duration: str, warmup: str) -> dict[str, object]:
        ran.append(args)
        return {"throughput": 100.0 * len(ran), "adaptive": {"median": 3} if args else None}

    monkeypatch.setattr(bench_pairs, "bench", bench)
    assert bench_pairs.main(["a=", "b=--adaptive --max-size 8", "--rounds", "3"]) == 0
    a: list[str] = []
    b = ["--adaptive", "--max-size", "8"]
    assert ran == [a, b, b, a, a, b]  # (a b, then b a, then a b: neither always first)
    with pytest.raises(SystemExit):
        bench_pairs.main(["a=", "a=--max-size 2"])  # (a name each)
    with pytest.raises(SystemExit):
        bench_pairs.main(["--max-size 2"])  # (not NAME=ARGS)


def test_a_short_run_as_a_user_runs_it() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "bench_pairs.py"),
            "--rounds",
            "2",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "static=--max-size 4",
            "adaptive=--adaptive --max-size 8",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["round 1", "round 2"]
    assert re.match(r"static +[\d,]+ ops/s  x 1\.000 static \(1\.000, 1\.000\)$", lines[2])
    assert re.match(r"adaptive +[\d,]+ ops/s  x [\d.]+ static \([\d.]+, [\d.]+\)  limit", lines[3])
