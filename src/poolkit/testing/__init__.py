"""Test support for poolkit and for code built on it: fake time and scripted connections."""

from .clock import FakeClock, SettleTimeout
from .loop import VirtualTimeLoop, run

__all__ = ["FakeClock", "SettleTimeout", "VirtualTimeLoop", "run"]
