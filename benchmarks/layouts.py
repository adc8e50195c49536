"""Memory layouts drawn anew for each process a benchmark starts (``peer_ab.py``'s "Layout").

A process started the same way lands its objects in memory the same way, and that layout moved a
drop-in's speed by up to 1.5x. A process that makes a random number of objects before it imports
anything else draws a layout of its own. Standard library only, and nothing made at import: a
child imports this first.
"""

from __future__ import annotations

import random

#: a process's ballast is drawn from range(LAYOUTS)
LAYOUTS = 4096


def draw(layouts: bool) -> int:
    """A ballast for the next process: random, or 0 (``--same-layout``)."""
    return random.randrange(LAYOUTS) if layouts else 0


def ballast(count: int) -> list[bytes]:
    """``count`` objects of assorted sizes, made now (to be kept for the process's life)."""
    return [bytes(i % 251) for i in range(count)]
