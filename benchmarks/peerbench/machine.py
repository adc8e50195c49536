"""What the run ran on: the machine (``lscpu``'s main facts, memory, load), Python, poolkit and
the drivers' versions, and the servers'."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

DISTRIBUTIONS = (
    "poolkit",
    "asyncpg",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "redis",
    "SQLAlchemy",
    "greenlet",
)
LSCPU_FIELDS = (
    "Architecture",
    "Model name",
    "CPU(s)",
    "Thread(s) per core",
    "Core(s) per socket",
    "CPU max MHz",
    "Hypervisor vendor",
    "L2 cache",
    "L3 cache",
)


def lscpu() -> dict[str, str]:
    """``lscpu``'s fields of :data:`LSCPU_FIELDS` (or ``/proc/cpuinfo``'s model name)."""
    facts: dict[str, str] = {}
    if shutil.which("lscpu"):
        try:
            out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            name, _, value = line.partition(":")
            if name.strip() in LSCPU_FIELDS:
                facts[name.strip()] = " ".join(value.split())
    if "Model name" not in facts:
        try:
            with open("/proc/cpuinfo") as fh:
                for line in fh:
                    if line.startswith("model name"):
                        facts["Model name"] = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    facts.setdefault("CPU(s)", str(os.cpu_count()))
    return facts


def memory() -> str:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "?"


def load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "?"
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def versions() -> dict[str, str]:
    out = {}
    for name in DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def describe() -> dict[str, str]:
    """The machine and software, as ``key: value`` lines of the report."""
    facts = {f"cpu {k}": v for k, v in lscpu().items()}
    facts["memory"] = memory()
    facts["os"] = platform.platform()
    facts["python"] = f"{platform.python_implementation()} {sys.version.split()[0]}"
    facts["load average (1, 5, 15 min) at start"] = load()
    facts.update({f"version {k}": v for k, v in versions().items()})
    return facts
