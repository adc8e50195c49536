"""Run workloads: every available contender once per round, the order alternating each round,
in this one process; the server's count of each run's connections taken alongside.

A contender whose modules are missing is skipped (the report says which module); one whose run
raises has that round recorded as an error and the next run goes on.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import os
import time
from collections.abc import Callable

from .core import Contender, Env, Figures, Workload, round_order
from .logs import LogTally
from .servers import ServerCount

Log = Callable[[str], None]


@dataclasses.dataclass
class Outcome:
    """What a workload's rounds gave: per contender label, its figures of each round (``None``:
    that round failed), its errors; contenders skipped and why; the workload skipped and why."""

    workload: Workload
    runs: dict[str, list[Figures | None]] = dataclasses.field(default_factory=dict)
    errors: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    logs: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    skipped_workload: str = ""
    seconds: float = 0.0


def missing_module(needs: tuple[str, ...]) -> str | None:
    for module in needs:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def app_name(workload: Workload, index: int) -> str:
    """The name a run's connections carry on the server (unique to this process and run)."""
    return f"peers-{os.getpid()}-{workload.key}-{index}"[:63]


def run_workload(
    workload: Workload,
    base: Env,
    rounds: int,
    log: Log,
    logs: LogTally,
    unavailable: str | None = None,
) -> Outcome:
    """``rounds`` interleaved rounds of ``workload`` (``unavailable``: why its server cannot be
    used, and nothing is run); the pools' log records counted in ``logs``."""
    outcome = Outcome(workload)
    if unavailable:
        outcome.skipped_workload = unavailable
        log(f"{workload.key}: skipped ({unavailable})")
        return outcome
    present: list[Contender] = []
    for contender in workload.contenders:
        module = missing_module(contender.needs)
        if module is None:
            present.append(contender)
        else:
            outcome.skipped[contender.label] = f"{module} is not installed"
    index = {c.label: i for i, c in enumerate(workload.contenders)}
    target = base.dsn if workload.server == "pg" else base.redis_url
    started = time.perf_counter()
    for r in range(rounds):
        for contender in round_order(present, r):
            env = dataclasses.replace(base, app=app_name(workload, index[contender.label]))
            gc.collect()
            logs.current = f"{workload.key} {contender.label}"
            with ServerCount(workload.server, target, env.app, workload.sample_every) as count:
                try:
                    figures: Figures | None = contender.run(env)
                except Exception as exc:
                    figures = None
                    error = f"round {r + 1}: {type(exc).__name__}: {exc}"
                    outcome.errors.setdefault(contender.label, []).append(error)
                    log(f"{workload.key} {contender.label}: {error}")
            if figures is not None and workload.server is not None:
                figures["server_conns_peak"] = float(count.peak)
                if count.error:
                    outcome.errors.setdefault(contender.label, []).append(
                        f"round {r + 1}: server count failed: {count.error}"
                    )
            outcome.runs.setdefault(contender.label, []).append(figures)
            if figures is not None:
                shown = figures.get(workload.metric, float("nan"))
                log(f"{workload.key} round {r + 1}/{rounds} {contender.label}: "
                    f"{workload.metric} {shown:,.1f}")  # fmt: skip
    logs.current = ""
    for contender in present:
        outcome.logs[contender.label] = logs.of(f"{workload.key} {contender.label}")
    outcome.seconds = time.perf_counter() - started
    return outcome
