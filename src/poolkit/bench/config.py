"""What one run of ``poolkit bench`` does: its target, its workload and its pool.

Rules of this module
--------------------
* Everything a user types is checked here, once: a bad value raises :class:`BenchUsageError`
  naming the option and the rule (the command prints it on one line and exits 2).
* A target's password never leaves this module except inside ``Target.url``: ``Target.shown``
  is what is printed, logged or put in a result.
"""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from typing import Literal

from ..testing.sim.protocol import MAX_PAYLOAD
from ..testing.sim.settings import ServiceTime, SimChange, SimSettings

__all__ = [
    "MAX_POOL_SIZE",
    "MAX_SWEEP_RUNS",
    "BenchUsageError",
    "RunConfig",
    "Sweep",
    "Target",
    "check_sweep",
    "parse_duration",
    "parse_sweep",
    "parse_target",
]

TargetKind = Literal["sim", "postgresql", "redis", "tcp", "mongodb", "http"]
#: the most tasks (asyncio) and threads (``--threads``) one worker process runs: ``--concurrency``
#: is per process, and ``--processes`` (at most 64) multiplies it
MAX_TASKS = 10_000
MAX_THREADS = 1_000
#: the largest ``--max-size`` and ``--max-connecting``: a pool serves one process's tasks, at
#: most :data:`MAX_TASKS`, and could not use more connections than that
MAX_POOL_SIZE = MAX_TASKS
#: the most runs one ``--sweep`` makes
MAX_SWEEP_RUNS = 64
SWEEPABLE = ("max_size", "min_size", "max_connecting", "concurrency")


class BenchUsageError(ValueError):
    """A bad command line: the message names the option at fault."""


_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)


def parse_duration(text: str, what: str) -> float:
    """``"250ms"``, ``"2s"``, ``"1.5"`` (seconds), ``"1m"`` -> seconds."""
    match = _DURATION.match(text)
    if (
        match is None
        or match.group(2).lower() not in {*_UNITS, ""}
        or not math.isfinite(float(match.group(1)))
    ):
        prefix = f"{what}: " if what else ""
        raise BenchUsageError(f"{prefix}{text!r} is not a duration (e.g. 500ms, 2s, 1.5, 1m)")
    return float(match.group(1)) * _UNITS.get(match.group(2).lower(), 1.0)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """Where the workload goes. ``url`` may hold a password: print ``shown``."""

    kind: TargetKind
    url: str
    shown: str
    sim: SimSettings | None = None
    host: str = ""
    port: int = 0


#: the ``--sim`` / ``sim://?`` names the help and docs/bench.md document (the others in
#: ``_SIM_KEYS`` are accepted aliases: SimSettings' own field names)
SIM_NAMES = (
    "service_time",
    "handshake",
    "concurrency",
    "max_connections",
    "streams",
    "drop_requests",
    "drop_connections",
    "goaway_after",
    "seed",
)

_SIM_KEYS: dict[str, str] = {
    "service_time": "service_time",
    "service": "service_time",
    "handshake": "handshake_latency",
    "handshake_latency": "handshake_latency",
    "concurrency": "concurrency",
    "cores": "concurrency",
    "max_connections": "max_connections",
    "streams": "max_streams",
    "max_streams": "max_streams",
    "drop_requests": "drop_request_fraction",
    "drop_request_fraction": "drop_request_fraction",
    "drop_connections": "drop_connection_fraction",
    "drop_connection_fraction": "drop_connection_fraction",
    "goaway_after": "goaway_after_requests",
    "goaway_after_requests": "goaway_after_requests",
    "seed": "seed",
}

#: the embedded server when nothing is said: a database with 8 cores, 1 ms a query (drawn from an
#: exponential distribution), 5 ms to connect, 100 connections at most
SIM_DEFAULTS: dict[str, str] = {
    "service_time": "exp:1ms",
    "handshake": "5ms",
    "concurrency": "8",
    "max_connections": "100",
}


#: what each setting takes, by SimSettings' field name (an error names the key and its rule)
_SIM_RULES: dict[str, str] = {
    "service_time": "a duration (2ms, 1.5), exp:MEAN or uniform:LO:HI with LO <= HI",
    "handshake_latency": "a duration (5ms, 0.01)",
    "concurrency": "an integer >= 1, or none (no limit)",
    "max_connections": "an integer >= 1, or none (no limit)",
    "max_streams": "an integer >= 1",
    "drop_request_fraction": "a fraction from 0 to 1",
    "drop_connection_fraction": "a fraction from 0 to 1",
    "goaway_after_requests": "an integer >= 1, or none (never)",
    "seed": "an integer, or none (unseeded)",
}
#: the documented key of each SimSettings field
_SIM_DOCUMENTED = {_SIM_KEYS[name]: name for name in SIM_NAMES}


def _service_time(text: str) -> ServiceTime:
    head, _, rest = text.partition(":")
    if head == "exp":
        return ("exp", parse_duration(rest, ""))
    if head == "uniform":
        lo_text, _, hi_text = rest.partition(":")
        lo, hi = parse_duration(lo_text, ""), parse_duration(hi_text, "")
        if lo > hi:
            raise ValueError("LO is above HI")
        return ("uniform", lo, hi)
    return parse_duration(text, "")


def _sim_value(name: str, text: str) -> object:
    """The value of the SimSettings field ``name`` that ``text`` says; ``ValueError`` if it is
    not what :data:`_SIM_RULES` says the field takes."""
    if name == "service_time":
        return _service_time(text)
    if name == "handshake_latency":
        return parse_duration(text, "")
    if name.endswith("_fraction"):
        fraction = float(text)
        if not 0.0 <= fraction <= 1.0:  # (and not nan)
            raise ValueError("out of range")
        return fraction
    if text.strip().lower() in {"", "none", "off"} and name != "max_streams":
        return None
    number = int(text)
    if number < 1 and name != "seed":
        raise ValueError("out of range")
    return number


def sim_settings(pairs: dict[str, str]) -> SimSettings:
    """The embedded server's settings from ``key=value`` pairs (the ``sim://`` query or
    ``--sim``), over :data:`SIM_DEFAULTS`. A bad key or value is a :class:`BenchUsageError`
    naming the key as documented (``streams``, not SimSettings' ``max_streams``) and its rule."""
    values: dict[str, object] = {}
    for key, text in {**SIM_DEFAULTS, **pairs}.items():
        name = _SIM_KEYS.get(key)
        if name is None:
            known = ", ".join(SIM_NAMES)
            raise BenchUsageError(f"sim setting {key!r} is unknown (known: {known})")
        try:
            values[name] = _sim_value(name, text)
        except ValueError:
            documented = _SIM_DOCUMENTED[name]
            alias = f" ({documented})" if key != documented else ""
            raise BenchUsageError(
                f"sim setting {key}{alias}: {text!r} is not {_SIM_RULES[name]}"
            ) from None
    return SimSettings(**values)  # type: ignore[arg-type]  # (values checked above)


#: what ``--sim-schedule`` may change as a run goes on (SimChange's fields), by documented key
_SCHEDULE_KEYS: dict[str, str] = {
    "concurrency": "concurrency",
    "cores": "concurrency",
    "service_time": "service_time",
    "service": "service_time",
    "drop_requests": "drop_request_fraction",
    "drop_connections": "drop_connection_fraction",
}


def parse_schedule(text: str) -> tuple[SimChange, ...]:
    """``--sim-schedule``: changes of the embedded server as a run goes on, as
    ``AT:KEY=VALUE[,KEY=VALUE...]`` entries separated by spaces or ``;`` (``10s:cores=4
    20s:cores=8``, ``5s:service=exp:5ms 10s:service=exp:1ms``). AT counts from the server's
    start (the warm-up included). Keys: concurrency (cores), service_time (service),
    drop_requests, drop_connections; values as ``--sim`` takes them."""
    changes: list[SimChange] = []
    for entry in text.replace(";", " ").split():
        at_text, sep, rest = entry.partition(":")
        if not sep or not rest:
            raise BenchUsageError(
                f"--sim-schedule: {entry!r} is not AT:KEY=VALUE[,KEY=VALUE] (e.g. 10s:cores=4)"
            )
        fields: dict[str, object] = {"at": parse_duration(at_text, "--sim-schedule")}
        for pair in rest.split(","):
            key, eq, value = pair.partition("=")
            name = _SCHEDULE_KEYS.get(key.strip())
            if not eq or name is None:
                known = ", ".join(sorted(_SCHEDULE_KEYS))
                raise BenchUsageError(
                    f"--sim-schedule: {pair!r} in {entry!r}: KEY=VALUE with KEY one of {known}"
                )
            try:
                fields[name] = _sim_value(name, value)
            except ValueError:
                raise BenchUsageError(
                    f"--sim-schedule: {key}: {value!r} is not {_SIM_RULES[name]}"
                ) from None
            if fields[name] is None:
                raise BenchUsageError(f"--sim-schedule: {key}: a schedule cannot lift the limit")
        changes.append(SimChange(**fields))  # type: ignore[arg-type]  # (values checked above)
    if not changes:
        raise BenchUsageError("--sim-schedule: no change given (e.g. 10s:cores=4 20s:cores=8)")
    return tuple(sorted(changes, key=lambda change: change.at))


def _mask(parts: urllib.parse.SplitResult) -> str:
    if parts.password is None:
        return parts.geturl()
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = urllib.parse.quote(parts.username or "", safe="")
    return parts._replace(netloc=f"{user}:***@{netloc}").geturl()


def _check_port(parts: urllib.parse.SplitResult) -> None:
    """A port that is not a number 0-65535 is the target's error, said now (on one line, the
    password masked), not the driver's ``ValueError`` later."""
    try:
        _ = parts.port
    except ValueError:
        port = parts.netloc.rsplit("@", 1)[-1].rsplit("]", 1)[-1].rpartition(":")[2]
        raise BenchUsageError(
            f"target {_mask(parts)!r}: the port {port!r} is not a number from 0 to 65535"
        ) from None


def parse_target(text: str, sim_pairs: dict[str, str] | None = None) -> Target:
    """``sim://[?key=value&...]``, ``postgresql://...`` (or ``postgres://``), ``redis://...``
    (or ``rediss://``), ``tcp://host:port``."""
    parts = urllib.parse.urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme != "sim":
        _check_port(parts)
    if scheme == "sim":
        if parts.netloc:
            raise BenchUsageError(
                f"target {text!r}: the embedded server takes no address (sim://?key=value...)"
            )
        pairs = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        settings = sim_settings({**pairs, **(sim_pairs or {})})
        return Target("sim", text, text, sim=settings)
    if sim_pairs:
        raise BenchUsageError("--sim: only for the embedded server (target sim://)")
    if scheme in {"postgresql", "postgres"}:
        return Target("postgresql", text, _mask(parts), host=parts.hostname or "", port=0)
    if scheme in {"redis", "rediss", "unix"}:
        return Target("redis", text, _mask(parts))
    if scheme in {"mongodb", "mongodb+srv"}:
        from ..mongodb.uri import parse_uri
        from ..mongodb.uri_options import InvalidURIError

        try:
            parsed = parse_uri(text)
        except InvalidURIError as exc:
            raise BenchUsageError(f"target: {exc}") from None
        if not parsed.hosts:
            raise BenchUsageError("target: mongodb+srv:// needs a DNS lookup; give mongodb://")
        return Target("mongodb", text, _mask(parts))
    if scheme in {"http", "https"}:
        if not parts.hostname:
            raise BenchUsageError(f"target {_mask(parts)!r}: an http(s)://HOST[:PORT]/PATH URL")
        return Target("http", text, _mask(parts), host=parts.hostname, port=parts.port or 0)
    if scheme == "tcp":
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            raise BenchUsageError(f"target {_mask(parts)!r}: tcp targets are tcp://HOST:PORT")
        return Target("tcp", text, _mask(parts), host=parts.hostname, port=port)
    raise BenchUsageError(
        f"target {text!r}: unknown scheme (use sim://, postgresql://, redis://, mongodb://, "
        "tcp:// or https:// with --http2)"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Sweep:
    """Run once per value of ``param``."""

    param: str
    values: tuple[int, ...]


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BenchUsageError(f"{what}: {text!r} is not an integer") from None


def parse_sweep(text: str) -> Sweep:
    """``max_size=1,2,4,8`` | ``max_size=1..8`` (every integer) | ``max_size=1..64:x2``
    (doubling) | ``max_size=2..32:2`` (step 2)."""
    param, sep, spec = text.partition("=")
    param = param.strip().replace("-", "_")
    if not sep or param not in SWEEPABLE:
        raise BenchUsageError(
            f"--sweep {text!r}: expected NAME=VALUES with NAME one of {', '.join(SWEEPABLE)}"
        )
    what = f"--sweep {param}"
    too_many = f"{what}: more than {MAX_SWEEP_RUNS} values (at most {MAX_SWEEP_RUNS} runs)"
    if ".." in spec:
        lo_text, _, rest = spec.partition("..")
        hi_text, _, step_text = rest.partition(":")
        lo, hi = _int(lo_text, what), _int(hi_text, what)
        if lo > hi:
            raise BenchUsageError(f"{what}: {lo}..{hi} is empty")
        values: list[int] = []
        if step_text.startswith("x"):
            factor = _int(step_text[1:], what)
            if factor < 2 or lo < 1:
                raise BenchUsageError(f"{what}: a geometric range needs LO >= 1 and xF with F >= 2")
            n = lo
            while n <= hi:
                if len(values) == MAX_SWEEP_RUNS:
                    raise BenchUsageError(too_many)
                values.append(n)
                n *= factor
        else:
            step = _int(step_text, what) if step_text else 1
            if step < 1:
                raise BenchUsageError(f"{what}: the step must be >= 1")
            span = range(lo, hi + 1, step)  # (counted before it is made: 1..10**12 is a range)
            if len(span) > MAX_SWEEP_RUNS:
                raise BenchUsageError(too_many)
            values = list(span)
    else:
        values = [_int(v.strip(), what) for v in spec.split(",") if v.strip()]
    if not values:
        raise BenchUsageError(f"{what}: no values")
    if len(values) > MAX_SWEEP_RUNS:
        raise BenchUsageError(too_many)
    floor = 0 if param == "min_size" else 1
    if any(v < floor for v in values):
        raise BenchUsageError(f"{what}: every value must be >= {floor}")
    return Sweep(param, tuple(values))


def check_sweep(base: RunConfig, sweep: Sweep) -> None:
    """Raise :class:`BenchUsageError` unless every run of ``sweep`` over ``base`` is one
    ``base.check()`` accepts (each value within its option's bounds), naming the first value
    at fault."""
    if sweep.param == "min_size" and max(sweep.values) > base.max_size:
        raise BenchUsageError("--sweep min_size: every value must be <= --max-size")
    for value in sweep.values:
        try:
            base.with_value(sweep.param, value).check()
        except BenchUsageError as exc:
            raise BenchUsageError(f"--sweep {sweep.param}={value}: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class RunConfig:
    """One measured run (a sweep makes one per value)."""

    target: Target
    concurrency: int = 32
    threads: bool = False
    #: poolkit.AsyncPool under trio (``--trio``; ``poolkit[trio]``): the embedded server only
    trio: bool = False
    duration: float | None = 10.0
    ops: int | None = None
    warmup: float = 1.0
    think: float = 0.0
    processes: int = 1
    max_size: int = 10
    min_size: int = 0
    max_connecting: int = 2
    wait_queue_timeout: float | None = 10.0
    connect_timeout: float = 10.0
    hooks: bool = True
    driver: str | None = None
    query: str = "SELECT 1"
    payload: int = 16
    pgbouncer: bool = False
    #: an http(s):// target spoken in HTTP/2 (``--http2``)
    http2: bool = False
    op_timeout: float = 10.0
    #: the pools find their limit on connections in use (``PoolOptions.adaptive``; ``--adaptive``)
    adaptive: bool = False
    #: the name the run's connections carry on the server (the runner makes it per run)
    app_name: str = "poolkit-bench"

    def with_value(self, param: str, value: int) -> RunConfig:
        if param not in SWEEPABLE:
            raise BenchUsageError(f"--sweep: {param!r} cannot be swept")
        changes: dict[str, int] = {param: value}
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]  # (an int field)

    def check(self) -> None:
        """Raise :class:`BenchUsageError` for values no run can use."""
        rules: list[tuple[bool, str]] = [
            (self.concurrency >= 1, "--concurrency must be >= 1"),
            (
                self.concurrency <= MAX_TASKS,
                f"--concurrency must be <= {MAX_TASKS} (tasks per process; more: --processes)",
            ),
            (
                not self.threads or self.concurrency <= MAX_THREADS,
                f"--concurrency must be <= {MAX_THREADS} with --threads (threads per process; "
                "more: --processes)",
            ),
            (self.processes >= 1, "--processes must be >= 1"),
            (self.processes <= 64, "--processes must be <= 64"),
            (self.max_size >= 1, "--max-size must be >= 1"),
            (
                self.max_size <= MAX_POOL_SIZE,
                f"--max-size must be <= {MAX_POOL_SIZE} (a pool serves at most {MAX_TASKS} "
                "tasks: it could not use more connections)",
            ),
            (self.min_size >= 0, "--min-size must be >= 0"),
            (self.min_size <= self.max_size, "--min-size must be <= --max-size"),
            (self.max_connecting >= 1, "--max-connecting must be >= 1"),
            (
                self.max_connecting <= MAX_POOL_SIZE,
                f"--max-connecting must be <= {MAX_POOL_SIZE}",
            ),
            (self.warmup >= 0, "--warmup must be >= 0"),
            (self.think >= 0, "--think must be >= 0"),
            (self.payload >= 1, "--payload must be >= 1"),
            (
                self.wait_queue_timeout is None or self.wait_queue_timeout > 0,
                "--wait-timeout must be > 0, or 'none' to wait without limit (with 0 no checkout "
                "could wait: only idle connections would be served)",
            ),
            (
                self.payload <= MAX_PAYLOAD,
                f"--payload must be <= {MAX_PAYLOAD} (16 MiB, the embedded server's largest "
                "request)",
            ),
            (self.connect_timeout > 0, "--connect-timeout must be > 0"),
            (self.op_timeout > 0, "--op-timeout must be > 0"),
            (self.duration is None or self.duration > 0, "--duration must be > 0"),
            (self.ops is None or self.ops >= 1, "--ops must be >= 1"),
            (
                self.ops is None or self.ops >= self.processes,
                "--ops must be >= --processes (each process does its share)",
            ),
            (
                self.driver is None or self.target.kind == "postgresql",
                "--driver is for postgresql:// targets",
            ),
            (
                self.driver in {None, "asyncpg", "psycopg"},
                "--driver must be asyncpg or psycopg",
            ),
            (
                not (self.threads and self.driver == "asyncpg"),
                "--threads needs --driver psycopg (asyncpg is asyncio only)",
            ),
            (
                self.target.kind != "http" or self.http2,
                "an http(s):// target needs --http2 (poolkit pools HTTP/2 connections: one "
                "stream per checkout)",
            ),
            (not self.http2 or self.target.kind == "http", "--http2 is for http(s):// targets"),
            (
                not (self.threads and self.target.kind == "http"),
                "--http2 runs on asyncio only (no --threads)",
            ),
            (not (self.trio and self.threads), "--trio and --threads: one or the other"),
            (
                not self.trio or self.target.kind == "sim",
                "--trio runs against the embedded server (sim://) only: the other targets' "
                "drivers run on asyncio only",
            ),
        ]
        for ok, message in rules:
            if not ok:
                raise BenchUsageError(message)
