"""What the scripts that measure the peers benchmark's contenders one by one share
(``peer_bytecodes.py``, ``peer_instructions.py``, ``peer_cpu.py``, ``peer_ab.py``): their
common arguments and how ``--only`` picks contenders."""

from __future__ import annotations

import argparse

from . import servers

__all__ = ["add_common", "picked"]


def add_common(ap: argparse.ArgumentParser, only: str) -> None:
    """``--only`` (whose help names what it picks: ``only``), ``--dsn`` and ``--redis-url``."""
    ap.add_argument(
        "--only",
        metavar="TEXT",
        help=f"{only} whose label contains TEXT (or one of the texts of 'TEXT|TEXT...')",
    )
    ap.add_argument("--dsn", default=servers.DSN, help="PostgreSQL (default: peers.py's)")
    ap.add_argument("--redis-url", default=servers.REDIS_URL, help="Redis (default: peers.py's)")


def picked(label: str, only: str | None) -> bool:
    """Whether ``--only only`` picks the contender ``label``: its label contains ``only``, or one
    of the texts ``only`` separates with ``|`` (case aside; no ``--only``: all)."""
    if not only:
        return True
    label = label.lower()
    return any(text in label for text in only.lower().split("|") if text)
