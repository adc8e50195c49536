"""What a worker measures and sends to the parent: counts, histograms, the pool's gauges.

Rules of this module
--------------------
* Everything here is picklable and mergeable: the parent adds the workers' reports together.
* Counts are cumulative over the measured phase (warm-up excluded); gauges are the latest.
"""

from __future__ import annotations

import dataclasses

from .histogram import Histogram

__all__ = ["Gauges", "Tally", "WorkerReport"]


@dataclasses.dataclass(slots=True)
class Tally:
    """Operations done, errors by kind, checkout waits, operation times and the time a caller
    spent, the two added up (seconds)."""

    ops: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    wait: Histogram = dataclasses.field(default_factory=Histogram)
    latency: Histogram = dataclasses.field(default_factory=Histogram)
    total: Histogram = dataclasses.field(default_factory=Histogram)

    def error(self, exc: BaseException) -> None:
        kind = type(exc).__name__
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def merge(self, other: Tally) -> None:
        self.ops += other.ops
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.wait.merge(other.wait)
        self.latency.merge(other.latency)
        self.total.merge(other.total)

    def copy(self) -> Tally:
        out = Tally()
        out.merge(self)
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Gauges:
    """A pool's connections now (``PoolStats``' names), and the peaks seen so far."""

    total: int = 0
    in_use: int = 0
    pending: int = 0
    waiting: int = 0
    peak_total: int = 0
    created: int = 0
    #: the adaptive limit (``--adaptive``; 0 without)
    limit: int = 0

    def __add__(self, other: Gauges) -> Gauges:
        return Gauges(*(a + b for a, b in zip(self.fields(), other.fields(), strict=True)))

    def fields(self) -> tuple[int, ...]:
        return dataclasses.astuple(self)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerReport:
    """One worker's state, sent every tick and once more at the end (``final``).

    ``measured``: seconds of the measured phase so far (0 during warm-up).
    ``left_open``: at the end, connections the pool still counted after ``close()`` (0 unless
    something leaked)."""

    index: int
    measured: float
    warming: bool
    tally: Tally
    gauges: Gauges
    final: bool = False
    left_open: int = 0
