"""``poolkit bench`` run as a user runs it: a subprocess, its exit code, stdout and stderr.

Wall-clock time is real here (bounded runs of a second or so): these are integration tests of
the command; the theory check is the one place figures are compared with expectations, with
wide margins, and it is marked ``timing`` (a loaded machine's figures are its own). Ctrl-C is
sent when the command shows it has got there (its live view, on a pty), not after a time."""

from __future__ import annotations

import dataclasses
import importlib.resources
import itertools
import json
import os
import pty
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bench_run import (
    PG_DSN,
    REDIS_URL,
    assert_one_line_error,
    bench,
    need_port,
)

SHORT = ("--duration", "1", "--warmup", "0.2")


def schema() -> dict[str, Any]:
    text = importlib.resources.files("poolkit.bench").joinpath("schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def test_the_default_target_runs_and_prints_a_summary() -> None:
    ran = bench(*SHORT)
    assert ran.code == 0, ran.stderr
    assert "poolkit bench sim://" in ran.stdout
    assert "ops/s" in ran.stdout and "checkout wait" in ran.stdout
    assert "left open 0" in ran.stdout
    assert ran.stderr == ""  # (not a terminal: no live view)


def test_the_console_script_and_python_m() -> None:
    script = Path(sys.executable).with_name("poolkit")
    assert script.exists(), "pip install -e . installs the poolkit console script"
    done = subprocess.run([str(script), "bench", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--sweep" in done.stdout and "--processes" in done.stdout
    done = subprocess.run([sys.executable, "-m", "poolkit"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: poolkit bench" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "poolkit", "serve"], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "'serve'" in done.stderr


def test_json_is_the_only_output_and_matches_its_schema() -> None:
    ran = bench(*SHORT, "--json", "--max-size", "4", "--concurrency", "8")
    assert ran.code == 0, ran.stderr
    document = ran.json()  # (all of stdout is one document)
    jsonschema.validate(document, schema())
    result = ran.result()
    assert document["kind"] == "sim" and document["mode"] == "asyncio"
    assert document["settings"]["max_size"] == 4 and document["sweep"] is None
    assert result["ops"] > 0 and result["errors"] == {}
    assert result["connections"]["client_peak"] == 4
    assert result["connections"]["server_peak"] == 4
    assert result["connections"]["left_open"] == 0
    assert result["connections"]["server_left_open"] == 0
    assert result["throughput"] == pytest.approx(result["ops"] / result["seconds"], rel=0.01)
    # (what a caller spends, issue 40: the checkout wait and the operation added up)
    parts = result["wait_ms"]["mean"] + result["latency_ms"]["mean"]
    assert result["total_ms"]["mean"] == pytest.approx(parts, rel=0.01, abs=0.01), result
    assert result["total_ms"]["max"] >= result["latency_ms"]["max"]
    measured = [p for p in result["timeline"] if p["measured"] and p["throughput"]]
    assert measured and all(p["total_max_ms"] >= p["total_p99_ms"] > 0 for p in measured)


def test_trio_runs_the_default_workload_on_the_embedded_server() -> None:
    # (issue 41: AsyncPool under trio, the same workload and report; --json's mode says trio)
    ran = bench(*SHORT, "--trio", "--json", "--max-size", "4", "--concurrency", "8")
    assert ran.code == 0, ran.stderr
    document = ran.json()
    jsonschema.validate(document, schema())
    result = ran.result()
    assert document["kind"] == "sim" and document["mode"] == "trio"
    assert result["ops"] > 0 and result["errors"] == {}
    assert result["connections"]["client_peak"] == 4
    assert result["connections"]["left_open"] == 0
    assert result["connections"]["server_left_open"] == 0


def test_ops_measures_exactly_that_many_over_processes_and_threads() -> None:
    ran = bench("--ops", "1001", "--processes", "2", "--threads", "-c", "4", "--json")
    assert ran.code == 0, ran.stderr
    jsonschema.validate(ran.json(), schema())
    result = ran.result()
    assert ran.json()["mode"] == "threads"
    assert result["ops"] == 1001 and result["errors"] == {}
    assert result["connections"]["client_peak"] == 8  # two pools of 4 (4 threads each)
    assert result["connections"]["pool_peak"] == 4
    assert result["connections"]["server_peak"] == 8


def test_a_sweep_recommends_a_size_and_plots_it(tmp_path: Path) -> None:
    png = tmp_path / "sweep.png"
    ran = bench(*SHORT, "--sweep", "max_size=1,2,8", "--json", "--plot", str(png))
    assert ran.code == 0, ran.stderr
    document = ran.json()
    jsonschema.validate(document, schema())
    assert document["sweep"] == {"param": "max_size", "values": [1, 2, 8]}
    assert [r["max_size"] for r in document["results"]] == [1, 2, 8]
    rec = document["recommendation"]
    assert rec["param"] == "max_size" and rec["value"] in (1, 2, 8)
    best = max(r["throughput"] for r in document["results"])
    assert rec["best_throughput"] == pytest.approx(best, abs=0.1)
    assert rec["throughput"] >= 0.95 * best - 0.1
    smaller = [r for r in document["results"] if r["max_size"] < rec["value"]]
    for r in smaller:  # slower, or its callers waited longer for a connection than they held it
        slower = r["throughput"] < 0.95 * best
        assert slower or r["wait_ms"]["p50"] > max(r["latency_ms"]["p50"], 0.1), r
    assert "within 5%" in rec["reason"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_adaptive_shows_the_limit_against_time(tmp_path: Path) -> None:
    """``--adaptive``: the pools find their limit; the JSON has it over the measured phase and the
    run against time (from the embedded server's start: its schedule's clock), the summary names
    it, ``--plot`` draws it against time."""
    png = tmp_path / "limit.png"
    args = ("--adaptive", "--max-size", "32", "--duration", "3", "--warmup", "0.5")
    ran = bench(*args, "--sim-schedule", "2s:cores=4", "--json", "--plot", str(png))
    assert ran.code == 0, ran.stderr
    document = ran.json()
    jsonschema.validate(document, schema())
    assert document["settings"]["adaptive"] is True
    (result,) = document["results"]
    limit = result["adaptive"]
    assert 1 <= limit["min"] <= limit["median"] <= limit["max"] <= 32, limit
    timeline = result["timeline"]
    assert len(timeline) >= 8 and all(p["limit"] is not None for p in timeline)
    ts = [p["t"] for p in timeline]
    assert ts == sorted(ts) and ts[0] > 0.1  # (the server started before the run)
    measured = [p for p in timeline if p["measured"]]
    assert measured and all(p["throughput"] > 0 and p["op_p99_ms"] >= 1.0 for p in measured[1:])
    assert not any(p["measured"] for p in timeline[: len(timeline) - len(measured)])
    assert all(p["limits"] == [p["limit"]] for p in timeline)  # (one process: its pool's)
    assert limit["pools"] == [limit["median"]]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    # a fleet: each process's pool's limit, beside their sum (how they share the server)
    shown = bench(*args, "--processes", "2")
    assert shown.code == 0, shown.stderr
    assert "of max_size 64; by pool " in shown.stdout, shown.stdout
    fleet = bench(*args, "--processes", "2", "--json").json()["results"][0]
    points = [p for p in fleet["timeline"] if p["measured"]]
    assert points and all(len(p["limits"]) == 2 == fleet["processes"] for p in points)
    assert all(sum(p["limits"]) == p["limit"] for p in points)
    pools = fleet["adaptive"]["pools"]
    assert len(pools) == 2 and all(1 <= pool <= 32 for pool in pools), pools
    text = bench(*args)
    assert text.code == 0, text.stderr
    assert "adaptive limit" in text.stdout and "of max_size 32" in text.stdout
    static = bench(*SHORT, "--json").json()["results"][0]
    assert static["adaptive"] is None and {p["limit"] for p in static["timeline"]} == {None}


def test_a_sweep_table_marks_the_recommendation() -> None:
    ran = bench(*SHORT, "--sweep", "max_size=1..3")
    assert ran.code == 0, ran.stderr
    assert "recommended: max_size=" in ran.stdout
    assert "◀" in ran.stdout


@pytest.mark.timing  # (throughput figures: what the machine can do, not what the tool does)
def test_the_figures_agree_with_theory() -> None:
    """1 ms a request, a server that serves 8 at once, 32 tasks.

    * 4 connections: about 4 / 1 ms = 4,000 operations a second. Less in fact by the round trip
      between two processes (a few tenths of a ms on top of each 1 ms, on this kind of
      machine): so the precise check is Little's law, throughput = connections busy / time
      each is held, with the operation time the tool measured.
    * 16 connections: no more than the server's 8 / 1 ms = 8,000, and each operation now waits
      at the server (16 sent, 8 served at once): the time per operation grows to about
      16 / throughput, while checkouts wait less in the pool."""
    server = "sim://?service_time=1ms&concurrency=8&handshake=0"
    for _ in range(3):  # (a neighbour's burst only lowers a run's throughput: up to three runs)
        ran = bench(
            server,
            "--sweep",
            "max_size=4,16",
            "-c",
            "32",
            "--duration",
            "3",
            "--warmup",
            "0.5",
            "--json",
        )
        assert ran.code == 0, ran.stderr
        four, sixteen = ran.json()["results"]
        for result, size in ((four, 4), (sixteen, 16)):  # (every run obeys Little's law)
            held = result["latency_ms"]["mean"] / 1e3
            assert 0.8 <= result["throughput"] * held / size <= 1.05, (size, result)
        if four["throughput"] >= 0.55 * 4000:
            break
    assert 0.55 * 4000 <= four["throughput"] <= 1.05 * 4000, four
    assert four["latency_ms"]["mean"] >= 1.0  # (the service time is a floor)
    assert sixteen["throughput"] <= 1.05 * 8000, sixteen
    assert sixteen["throughput"] >= 1.4 * four["throughput"]
    # (16 sent, 8 served at once, 1 ms each: 2 ms at the server alone, whatever the machine
    # adds; a ratio to the 4-connection time fell short where that time had grown by the
    # round trips of a busy machine: 1.98 ms against 1.3 x 1.6)
    assert sixteen["latency_ms"]["mean"] >= 0.9 * 16 / 8 * 1.0
    assert four["wait_ms"]["mean"] > sixteen["wait_ms"]["mean"]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--max-size", "0"], 2, ["--max-size"]),
        (["--wait-timeout", "0"], 2, ["--wait-timeout", "'none'"]),  # issue 24, defect 4
        (["--min-size", "5", "--max-size", "2"], 2, ["--min-size"]),
        (["--duration", "soon"], 2, ["--duration", "soon"]),
        (["--concurrency", "many"], 2, ["--concurrency"]),
        (["--sweep", "pool=1,2"], 2, ["--sweep"]),
        (["--sweep", "max_size=8..1"], 2, ["--sweep", "empty"]),
        (["--plot", "/nonexistent/x.png"], 2, ["--plot /nonexistent/x.png", "no folder"]),
        (["ftp://example.com"], 2, ["scheme"]),
        (["sim://?service_time=fast"], 2, ["service_time"]),
        (["sim://?cores=0"], 2, ["concurrency"]),
        (["sim://?colour=blue"], 2, ["colour"]),
        (["tcp://127.0.0.1"], 2, ["tcp://HOST:PORT"]),
        (["tcp://127.0.0.1:1"], 1, ["cannot use tcp://127.0.0.1:1"]),
        (["postgresql://postgres@127.0.0.1:1/test"], 1, ["cannot use postgresql://"]),
        (["redis://127.0.0.1:1"], 1, ["cannot use redis://127.0.0.1:1"]),
        (["--payload", "999999999999"], 2, ["--payload must be <= 16777216"]),
        (["-c", "99999999999"], 2, ["--concurrency must be <= 10000"]),
        (["--sweep", "concurrency=1..20000:x2"], 2, ["--sweep concurrency=16384"]),
        (["--sweep", "max_size=1..99999999:x2"], 2, ["--sweep max_size=16384", "<= 10000"]),
        (["--sweep", "max_size=1..99999999999"], 2, ["--sweep max_size", "at most 64 runs"]),
        (["postgresql://postgres@127.0.0.1:notaport/test"], 2, ["port 'notaport'"]),
        (["--sim", "bogus=1"], 2, ["'bogus'", "goaway_after, seed)"]),
        (["http://127.0.0.1:1/"], 2, ["needs --http2"]),
        (["--http2"], 2, ["--http2 is for http(s):// targets"]),
        (["https://127.0.0.1:1/", "--http2", "--threads"], 2, ["asyncio only"]),
        (["--trio", "--threads"], 2, ["--trio and --threads"]),
        (["redis://127.0.0.1:1", "--trio"], 2, ["--trio runs against the embedded server"]),
        (["http://127.0.0.1:1/", "--http2"], 1, ["cannot use http://127.0.0.1:1/"]),
    ],
)
def test_bad_options_and_unreachable_targets_end_in_one_line(
    args: list[str], code: int, words: list[str]
) -> None:
    assert_one_line_error(bench(*args, *SHORT), code, *words)


def test_a_tcp_targets_password_is_not_printed() -> None:
    ran = bench("tcp://u:S3cretPW@127.0.0.1:1", *SHORT)
    assert_one_line_error(ran, 1, "cannot use tcp://u:***@127.0.0.1:1")
    assert "S3cretPW" not in ran.stderr


def test_bad_postgresql_credentials_end_in_one_line() -> None:
    need_port(PG_DSN, 5432, "PostgreSQL")
    host = PG_DSN.split("@", 1)[1]
    ran = bench(f"postgresql://nobody_here:secret@{host}", *SHORT)
    assert_one_line_error(ran, 1, "nobody_here", "postgresql://nobody_here:***@")
    assert "secret" not in ran.stderr


def test_bad_redis_credentials_end_in_one_line() -> None:
    need_port(REDIS_URL, 6379, "Redis")
    host = REDIS_URL.split("//", 1)[1]
    ran = bench(f"redis://nobody:wrong-secret@{host}", *SHORT)
    assert_one_line_error(ran, 1, "cannot use redis://nobody:***@", "AuthenticationError")
    assert "wrong-secret" not in ran.stderr


def interrupt(
    args: list[str], ready: Callable[[str, int], bool], after: float = 1.5
) -> Interrupted:
    """Start ``poolkit bench ARGS`` (its live view on a terminal: a pty); once ``ready(shown,
    pid)`` holds (``shown``: its stderr so far, escape sequences removed), send it SIGINT
    ``after`` seconds later (as Ctrl-C does). Waiting for what the command shows, not for a
    time, makes the run the same on a loaded machine: a measured phase is at least ``after``
    long."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "poolkit", "bench", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        env=dict(os.environ, COLUMNS="120"),
    )
    os.close(slave)
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # (the command ended: EIO)
                return
            if not data:
                return
            shown.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60  # (a bound for a hang, not a judgement of speed)
        while not ready(_plain(shown), process.pid):
            assert process.poll() is None, f"ended before it was ready: {_plain(shown)}"
            assert time.monotonic() < deadline, f"never ready: {_plain(shown)}"
            time.sleep(0.02)
        time.sleep(after)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        reader.join(5)
        os.close(master)
    return Interrupted(process.returncode, out, _plain(shown))


@dataclasses.dataclass(frozen=True)
class Interrupted:
    code: int
    out: str  #: stdout: the summary
    shown: str  #: what the live view showed (stderr, on a terminal), escape sequences removed

    def operations(self) -> tuple[int, float]:
        """The summary's ``N operations in S s``."""
        found = re.search(r"([\d,]+) operations in ([\d.]+) s", self.out)
        assert found is not None, self.out
        return int(found[1].replace(",", "")), float(found[2])


def _plain(shown: bytes | bytearray) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", bytes(shown).decode(errors="replace"))


def measuring(shown: str, pid: int) -> bool:
    return "measuring" in shown


@pytest.mark.parametrize(
    "mode", [[], ["--threads"], ["--trio"]], ids=["asyncio", "threads", "trio"]
)
def test_ctrl_c_stops_prints_the_partial_results_and_closes_everything(mode: list[str]) -> None:
    ran = interrupt(["--duration", "60", "--warmup", "0.2", *mode], measuring, after=1.5)
    assert ran.code == 130, ran.shown
    assert "Traceback" not in ran.shown
    assert "interrupted: partial results" in ran.out, ran.out
    assert "run: " in ran.shown and "(interrupted)" in ran.shown  # (the run's line, at its end)
    ops, seconds = ran.operations()
    assert ops > 0 and 1.5 <= seconds < 30, ran.out  # (SIGINT came 1.5 s into the measuring)
    assert "left open 0" in ran.out, ran.out
    assert "the server still saw" not in ran.out  # the server saw every close


def test_ctrl_c_in_a_sweep_keeps_the_runs_done() -> None:
    """Interrupted in its second run (once the first's line is shown and the second has begun),
    a sweep keeps the first, marks the second interrupted and starts no third."""

    def second_run_begun(shown: str, pid: int) -> bool:
        return "max_size=2: " in shown and "max_size=4" in shown.split("max_size=2: ", 1)[1]

    args = ["--sweep", "max_size=2,4,8", "--duration", "2.5", "--warmup", "0.2"]
    ran = interrupt(args, second_run_begun, after=0.5)
    assert ran.code == 130, ran.shown
    assert "interrupted: partial results" in ran.out and "Traceback" not in ran.shown
    first = re.search(r"max_size=2: .*", ran.shown)
    second = re.search(r"max_size=4: .*", ran.shown)
    assert first is not None and "(interrupted)" not in first[0], ran.shown
    assert second is not None and "(interrupted)" in second[0], ran.shown
    assert "max_size=8" not in ran.shown  # (no third run)
    rows = re.findall(r"^\s+(?:◀ )?(\d+)\s+[\d,]+\s", ran.out, re.MULTILINE)
    assert rows == ["2", "4"], ran.out  # (the table: the first run, the second's part)
    assert "recommended: max_size=" in ran.out and "before the interruption only" in ran.out


def test_a_real_postgresql_target_asyncpg_and_psycopg() -> None:
    need_port(PG_DSN, 5432, "PostgreSQL")
    for extra, driver in (([], "asyncpg"), (["--threads"], "psycopg")):
        ran = bench(PG_DSN, *SHORT, "--max-size", "4", "-c", "8", "--json", *extra)
        assert ran.code == 0, ran.stderr
        document = ran.json()
        jsonschema.validate(document, schema())
        assert document["driver"] == driver and document["kind"] == "postgresql"
        result = ran.result()
        assert result["ops"] > 0 and result["errors"] == {}
        assert 1 <= result["connections"]["server_peak"] <= 4  # pg_stat_activity saw them
        assert result["connections"]["server_left_open"] == 0


def test_ctrl_c_on_a_real_postgresql_target_leaves_no_session() -> None:
    """``--json`` (no live view): interrupted once PostgreSQL sees two of its sessions (the
    workers' pool: the probe before it holds one), the run's document says so, and no session
    is left."""
    need_port(PG_DSN, 5432, "PostgreSQL")
    import psycopg

    def sessions(pattern: str) -> int:
        with psycopg.connect(PG_DSN) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s", (pattern,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    pids: list[int] = []

    def pool_connected(shown: str, pid: int) -> bool:
        pids.append(pid)
        return sessions(f"poolkit-bench-{pid}%") >= 2

    args = [PG_DSN, "--duration", "60", "--warmup", "0.2", "--json"]
    ran = interrupt(args, pool_connected, after=1.5)
    assert ran.code == 130, ran.shown
    document = json.loads(ran.out)
    jsonschema.validate(document, schema())
    result = document["results"][0]
    assert document["interrupted"] and result["interrupted"]
    assert result["ops"] > 0 and 1.0 < result["seconds"] < 30
    assert result["connections"]["left_open"] == 0
    assert result["connections"]["server_left_open"] == 0
    # (this run's sessions only: another run on the same server, a second checkout's suite,
    # has sessions of its own)
    assert pids and sessions(f"poolkit-bench-{pids[-1]}%") == 0


def test_a_real_redis_target() -> None:
    need_port(REDIS_URL, 6379, "Redis")
    for extra in ([], ["--threads"]):
        ran = bench(REDIS_URL, *SHORT, "--max-size", "3", "-c", "6", "--json", *extra)
        assert ran.code == 0, ran.stderr
        result = ran.result()
        assert result["ops"] > 0 and result["errors"] == {}
        assert result["connections"]["server_peak"] == 3  # CLIENT LIST, by name
        assert result["connections"]["server_left_open"] == 0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_tcp_echo_target(echo_port: int) -> None:
    for extra in ([], ["--threads"]):
        ran = bench(f"tcp://127.0.0.1:{echo_port}", *SHORT, "--payload", "64", "--json", *extra)
        assert ran.code == 0, ran.stderr
        result = ran.result()
        assert result["ops"] > 0 and result["errors"] == {}
        assert result["connections"]["server_peak"] is None  # (a raw server cannot say)


def test_think_time_and_no_hooks() -> None:
    """Each of 4 tasks pauses 20 ms between operations: at most 4 / 21 ms = 190 a second."""
    ran = bench(*SHORT, "-c", "4", "--max-size", "4", "--think", "20ms", "--no-hooks", "--json")
    assert ran.code == 0, ran.stderr
    assert ran.json()["settings"]["hooks"] is False
    assert 0 < ran.result()["throughput"] <= 4 / 0.020


@pytest.mark.parametrize(
    "extra",
    [[], ["--sim", "streams=4"], ["--threads"], ["--no-hooks", "--sim", "streams=4"], ["--trio"]],
    ids=["asyncio", "streams", "threads", "no-hooks", "trio"],
)
def test_connections_that_go_away_drain_without_errors(extra: list[str]) -> None:
    """Every connection announces GOAWAY after 5 requests: hundreds of connections replaced in a
    second, and no operation fails (the server drains; a request refused before it was sent is
    retried on another connection)."""
    ran = bench(*SHORT, "--sim", "goaway_after=5", "-c", "16", "--json", *extra)
    assert ran.code == 0, ran.stderr
    result = ran.result()
    assert result["errors"] == {}, result
    assert result["ops"] > 0 and result["connections"]["created"] > 20


class _Hangup(socketserver.BaseRequestHandler):
    """Echoes on the first connection (the bench's probe), then hangs up on every other at its
    first request: the target died after the run started."""

    connections = itertools.count()

    def handle(self) -> None:
        if next(self.connections) == 0:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        else:
            self.request.recv(65536)


@pytest.fixture
def hangup_port() -> Iterator[int]:
    _Hangup.connections = itertools.count()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Hangup)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("extra", [[], ["--no-hooks"], ["--threads", "--no-hooks"]])
def test_a_task_backs_off_when_every_operation_fails(hangup_port: int, extra: list[str]) -> None:
    """One task for a second against a server that hangs up at each request: a few errors, each
    on a new connection (the broken one discarded, also without hooks), not thousands."""
    ran = bench(f"tcp://127.0.0.1:{hangup_port}", *SHORT, "-c", "1", "--json", *extra)
    assert ran.code == 0, ran.stderr
    result = ran.result()
    errors = sum(result["errors"].values())
    assert 1 <= errors <= 40, result
    assert result["connections"]["created"] >= errors


@pytest.mark.parametrize("mode", [[], ["--threads"]], ids=["asyncpg", "psycopg"])
def test_no_hooks_replaces_a_terminated_postgresql_connection(mode: list[str]) -> None:
    need_port(PG_DSN, 5432, "PostgreSQL")
    import psycopg

    args = [PG_DSN, "--no-hooks", "-c", "2", "--max-size", "1", "--duration", "3", "--json"]
    process = subprocess.Popen(
        [sys.executable, "-m", "poolkit", "bench", *args, "--warmup", "0", *mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        app = f"poolkit-bench-{process.pid}"
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            deadline = time.monotonic() + 20
            terminated: list[Any] = []
            while not terminated and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.1)
                # (a session of some age: the run's, not the probe's, which makes one
                # connection under the same name for one operation before the run starts)
                terminated = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s AND now() - backend_start > interval '0.7 s'",
                    [app],
                ).fetchall()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert terminated, "the bench's session never showed up"
    assert process.returncode == 0, err
    result = json.loads(out)["results"][0]
    assert sum(result["errors"].values()) <= 2, result  # (the two tasks' operations on it)
    assert result["connections"]["created"] == 2  # the dead one discarded, one new
    assert result["ops"] > 0 and result["connections"]["server_left_open"] == 0


def test_the_readme_and_docs_name_only_options_that_exist() -> None:
    """Every ``--option`` the README's bench section and docs/bench.md mention is one the
    command has; the README's main-job command is the install plus ``poolkit bench``."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    assert "    pip install '.[bench]' && poolkit bench\n" in readme
    section = readme[readme.index("## `poolkit bench`") : readme.index("## Quickstart")]
    text = section + (root / "docs" / "bench.md").read_text()
    done = subprocess.run(
        [sys.executable, "-m", "poolkit", "bench", "--help"], capture_output=True, text=True
    )
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", text))
    missing = {option for option in mentioned if option not in done.stdout}
    assert not missing, missing
    assert (root / "docs" / "bench-sweep.png").exists()


def test_on_a_terminal_it_shows_the_live_view() -> None:
    """On a terminal (a pseudo-terminal here) stderr carries the live view while the run goes:
    throughput, waits, connections, errors and the progress bar."""
    import os
    import pty

    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "poolkit", "bench", "--duration", "1.5", "--warmup", "0.3"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "110", "LINES": "40"},
    )
    os.close(slave)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # (EIO: the command ended and closed the terminal)
                break
            if not chunk:
                break
            seen += chunk
    finally:
        process.wait(timeout=60)
        os.close(master)
    assert process.returncode == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    for words in (
        "throughput",
        "ops/s now",
        "checkout wait",
        "(p50 / p99 / max)",
        "checkouts waiting",
        "server sees",
        "errors",
        "measuring",
        "100%",
    ):
        assert words in text, words
    assert "operations in" in text  # (and the summary after it)


HYPERCORN = """
import asyncio, sys
from hypercorn.asyncio import serve
from hypercorn.config import Config
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})
config = Config()
config.bind = [f"127.0.0.1:{sys.argv[1]}"]
config.accesslog = config.errorlog = None
config.keep_alive_max_requests = 1 << 30  # (its GOAWAY after 1000 requests fails streams)
asyncio.run(serve(app, config))
"""


def test_an_http2_target() -> None:
    """``poolkit bench http://... --http2``: a GET of the URL per operation, HTTP/2 streams of
    a few connections (hypercorn, h2c)."""
    pytest.importorskip("hypercorn", reason="the tests' HTTP/2 server is not installed")
    pytest.importorskip("h2", reason="poolkit[http2] is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", HYPERCORN, str(port)])
    try:
        for _ in range(500):  # (up in well under a second; 10 s at most)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        ran = bench(f"http://127.0.0.1:{port}/hello", "--http2", *SHORT, "--json")
        assert ran.code == 0, ran.stderr
        result = ran.result()
        assert result["ops"] > 0 and result["errors"] == {}
        assert 1 <= result["connections"]["client_peak"] <= 10
        assert result["connections"]["left_open"] == 0
    finally:
        server.terminate()
        server.wait(10)


def test_a_sim_schedule_changes_the_server_as_the_run_goes_on() -> None:
    """8 cores at 1 ms serve up to 8,000 operations a second; from t=0.5 s (the warm-up's end)
    the schedule leaves 2: at most 2,000, whatever the pool does."""
    server = "sim://?service_time=1ms&concurrency=8&handshake=0"
    common = ("-c", "32", "--max-size", "16", "--duration", "2", "--warmup", "0.5", "--json")
    ran = bench(server, *common, "--sim-schedule", "0.5s:cores=2")
    assert ran.code == 0, ran.stderr
    assert ran.result()["throughput"] <= 1.05 * 2000, ran.result()
    assert_one_line_error(bench("--sim-schedule", "1s:cores=none", *SHORT), 2, "cannot lift")
