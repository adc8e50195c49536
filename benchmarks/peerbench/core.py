"""What a workload, a contender and a run's figures are, and the arithmetic over rounds.

A *workload* is run by each of its *contenders* (a pool used one way, or a floor) once per
round; the rounds interleave them (the order alternates). A run returns its *figures* (a flat
``dict[str, float]``). Over the rounds each figure gets a median and a min-max, and each
contender ratios computed **in the same round**: its headline figure over its floor's (the
minimal FIFO pool's) and over its reference's (the driver's own pool as shipped), then the
median and min-max of those per-round ratios.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Literal

Figures = dict[str, float]
Role = Literal["poolkit", "peer", "floor", "dedicated"]
NAN = float("nan")

AS_SHIPPED = "as shipped"
LIKE_FOR_LIKE = "like for like"


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes and times of a run: full (the default) or ``--quick`` (a smoke run)."""

    quick: bool
    duration: float  # seconds measured per contention run
    warmup: float  # seconds run before measuring (connections made, caches warm)
    w1_cycles: int
    w5_cycles: int
    w2_tasks: int
    w2_threads: int
    w5_idle: tuple[int, int]
    w5_waiting: tuple[int, int]
    w7_tasks: int
    w7_threads: int
    w7_connect: float
    w8_phases: tuple[float, float, float]  # before the outage, the outage, after it

    @classmethod
    def full(cls) -> Sizes:
        return cls(
            quick=False,
            duration=2.0,
            warmup=0.3,
            w1_cycles=200_000,
            w5_cycles=50_000,
            w2_tasks=1000,
            w2_threads=32,
            w5_idle=(10, 10_000),
            w5_waiting=(1000, 100_000),
            w7_tasks=1000,
            w7_threads=200,
            w7_connect=0.05,
            w8_phases=(0.5, 0.5, 1.5),
        )

    @classmethod
    def tiny(cls) -> Sizes:
        return cls(
            quick=True,
            duration=0.25,
            warmup=0.05,
            w1_cycles=5000,
            w5_cycles=2000,
            w2_tasks=100,
            w2_threads=8,
            w5_idle=(10, 1000),
            w5_waiting=(100, 2000),
            w7_tasks=100,
            w7_threads=40,
            w7_connect=0.05,
            w8_phases=(0.15, 0.15, 0.4),
        )


@dataclasses.dataclass(frozen=True)
class Env:
    """What a run is given: the servers, the name its connections carry there (PostgreSQL's
    ``application_name``, Redis' client name: how the server's count finds them) and sizes."""

    dsn: str
    redis_url: str
    app: str
    sizes: Sizes


@dataclasses.dataclass(frozen=True)
class Contender:
    """One pool used one way (or a floor), on one workload: ``run(env)`` makes it, runs the
    workload, closes it and returns the figures. ``needs``: modules it imports (missing: the
    contender is skipped, and the report says so). ``floor`` / ``versus``: the contenders its
    ratios are taken against (labels), when not the workload's."""

    name: str
    role: Role
    variant: str
    run: Callable[[Env], Figures]
    needs: tuple[str, ...] = ()
    floor: str | None = None
    versus: str | None = None
    note: str = ""

    @property
    def label(self) -> str:
        """How tables, ratios and ``floor`` / ``versus`` / ``Workload.reference`` name it."""
        return f"{self.name} ({self.variant})" if self.variant else self.name


@dataclasses.dataclass(frozen=True)
class Column:
    """A figure shown in the tables: its key, heading, and how many decimals."""

    key: str
    label: str
    digits: int = 0


@dataclasses.dataclass(frozen=True)
class Workload:
    """A workload and its contenders. ``metric``: the figure ratios compare (``higher``: whether
    more is better; a ratio is always contender / floor, so > 1 is better for ops/s and worse for
    ns); ``floor`` / ``reference``: contender names; ``server``: where ``Env.app``'s connections
    are counted at their peak (None: no server)."""

    key: str
    group: str
    title: str
    metric: str
    higher: bool
    contenders: tuple[Contender, ...]
    columns: tuple[Column, ...]
    floor: str | None = None
    reference: str | None = None
    server: Literal["pg", "redis"] | None = None
    headline: bool = False
    note: str = ""
    sample_every: float = 0.1  # seconds between the server's counts of a run's connections

    def floor_of(self, contender: Contender) -> str | None:
        return contender.floor or self.floor

    def versus_of(self, contender: Contender) -> str | None:
        return contender.versus or self.reference


@dataclasses.dataclass(frozen=True)
class Spread:
    """A median and the min-max around it (of a figure over rounds, or of per-round ratios)."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        kept = [v for v in values if v == v]  # (NaN: a round without the figure)
        if not kept:
            return cls(NAN, NAN, NAN, 0)
        return cls(statistics.median(kept), min(kept), max(kept), len(kept))

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n}


def ratios(
    rounds: Sequence[Figures | None], against: Sequence[Figures | None], key: str
) -> list[float]:
    """Per round: ``rounds[i][key] / against[i][key]`` (NaN where a round lacks either)."""
    out = []
    for mine, theirs in zip(rounds, against, strict=True):
        a = NAN if mine is None else mine.get(key, NAN)
        b = NAN if theirs is None else theirs.get(key, NAN)
        out.append(a / b if b and b == b and a == a else NAN)
    return out


def round_order(items: Sequence[Contender], round_index: int) -> list[Contender]:
    """The order of a round: as listed in even rounds, reversed in odd ones."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))
