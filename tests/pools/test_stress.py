"""The randomized stress runs of ``stress.py`` in the suite: a few seeds, a couple of seconds
each, on both front ends (``python tests/support/stress.py --seeds 50 --seconds 5`` runs longer)."""

from __future__ import annotations

import logging

import pytest

import stress

SEEDS = range(3)
SECONDS = 2.0


@pytest.mark.parametrize("seed", SEEDS)
def test_stress(front_kind: str, seed: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="poolkit")  # (connects fail on purpose: warned)
    book = stress.run(front_kind, seed, SECONDS)
    replay = f"replay: python tests/support/stress.py --front {front_kind} --seed {seed}"
    assert book.problems == [], f"{book.report()}\n{replay}"
    assert book.outcomes["ok"] > 50, book.report()  # (the run did work)
    assert book.made, book.report()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors  # nothing the pool logged as its own failure
