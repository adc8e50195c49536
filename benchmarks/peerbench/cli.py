"""What the scripts that measure the peers benchmark's contenders one by one share
(``peer_bytecodes.py``, ``peer_instructions.py``, ``peer_cpu.py``, ``peer_ab.py``): their
common arguments and how ``--only`` picks contenders."""

from __future__ import annotations

import argparse

from . import servers

__all__ = ["add_common", "picked"]


def add_common(ap: argparse.ArgumentParser, only: str) -> None:
    """``--only`` (whose help names what it picks: ``only``), ``--dsn`` and ``--redis-url``."""
    ap.add_argument("--only", metavar="TEXT", help=f"{only} whose label contains TEXT")
    ap.add_argument("--dsn", default=servers.DSN, help="PostgreSQL (default: peers.py's)")
    ap.add_argument("--redis-url", default=servers.REDIS_URL, help="Redis (default: peers.py's)")


def picked(label: str, only: str | None) -> bool:
    """Whether ``--only only`` picks the contender ``label`` (case aside; no ``--only``: all)."""
    return not only or only.lower() in label.lower()
