"""Connection doubles for the pool's own tests."""

from __future__ import annotations


class Conn:
    """A connection double that counts its closes."""

    def __init__(self, cid: int) -> None:
        self.id = cid
        self.closed = 0

    def close(self) -> None:
        self.closed += 1
