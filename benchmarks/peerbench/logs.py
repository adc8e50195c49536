"""The pools' own log records during the runs: counted per run, not printed (psycopg_pool,
asyncpg, SQLAlchemy and poolkit log warnings and errors while W8's server is away, and some at
close). The report lists the counts for each pool; ``--verbose`` prints the records as well."""

from __future__ import annotations

import collections
import logging


class LogTally(logging.Handler):
    """Counts the records of WARNING and above by (run, logger and level); ``current`` names
    the run under way."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.current = ""
        self.counts: dict[str, collections.Counter[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        counter = self.counts.setdefault(self.current, collections.Counter())
        counter[f"{record.name} {record.levelname}"] += 1

    def of(self, run: str) -> dict[str, int]:
        return dict(self.counts.get(run, {}))


def install(verbose: bool) -> LogTally:
    """A :class:`LogTally` on the root logger; without ``verbose`` it is the only handler, so
    nothing is printed (Python prints WARNING and above when no handler is set)."""
    tally = LogTally()
    root = logging.getLogger()
    root.addHandler(tally)
    if verbose:
        printer = logging.StreamHandler()
        printer.setLevel(logging.WARNING)
        root.addHandler(printer)
    return tally
