"""``poolkit bench``: size a pool against an embedded server or a real one.

Run ``poolkit bench --help``. The parts: :mod:`.config` (what a run is), :mod:`.targets` (the
operation per target), :mod:`.worker` (a worker process: one pool and its tasks),
:mod:`.runner` (the parent: processes, Ctrl-C, results), :mod:`.observe` (the server's side),
:mod:`.report` (results, recommendation, JSON), :mod:`.display` and :mod:`.plot` (output).
"""

from .cli import main

__all__ = ["main"]
