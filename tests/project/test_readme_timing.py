"""What the README says of the tests marked ``timing`` holds: its plain ``python -m pytest``
leaves them out (pyproject.toml's addopts), ``-m timing`` selects them, and there are as many as
it says (issue 37, point 9: the README's command must pass on a busy machine).

The census of the run (``tests/support/census.py``: every test collected, those marked
``timing``, those deselected) is this run's own when it is the README's plain command over the
whole suite (CI's), so that the check costs no second collection; otherwise (this file alone,
``-k``, another ``-m``...) one ``--collect-only`` run of the whole suite in a subprocess gives it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from census import CENSUS, ENV, Census

ROOT = Path(__file__).resolve().parents[2]


def plain_run_of_the_suite(config: pytest.Config) -> bool:
    """Whether this run is the README's ``python -m pytest``: the whole of tests/, addopts' ``-m``
    only, nothing else that collects or deselects less."""
    where = config.invocation_params.dir
    args = {(where / arg.split("::", 1)[0]).resolve() for arg in config.args}
    option = config.option
    return (
        args == {ROOT / "tests"}
        and config.getoption("markexpr") == "not timing"
        and not config.getoption("keyword")
        and not config.getoption("deselect")
        and not config.getoption("ignore")
        and not config.getoption("ignore_glob")
        and not getattr(option, "lf", False)
        and not getattr(option, "stepwise", False)
        and CENSUS in config.stash
    )


def census_by_collection(*args: str) -> Census:
    """The census of ``pytest --collect-only`` with ``args`` (the whole suite, addopts' ``-m``, if
    none), run in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "census.json"
        ran = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
             *args],
            cwd=ROOT,
            env={**os.environ, ENV: str(path)},
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert path.is_file(), ran.stdout[-2000:]
        return Census.read(path)


def test_the_readme_command_leaves_out_the_timing_tests_it_counts(
    request: pytest.FixtureRequest,
) -> None:
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"It leaves out the (\d+) tests marked `timing`", readme)
    assert said is not None, "README: 'It leaves out the N tests marked `timing`'"
    assert "python -m pytest -m timing" in readme
    config = request.config
    census = config.stash[CENSUS] if plain_run_of_the_suite(config) else census_by_collection()
    timing = len(census.timing)
    assert timing == int(said[1]), f"README says {said[1]} tests marked timing: there are {timing}"
    # the plain command leaves out exactly those (-m timing, the last -m, selects them)
    assert census.deselected == census.timing, (
        sorted(census.deselected - census.timing)[:10],
        sorted(census.timing - census.deselected)[:10],
    )
    assert census.collected > timing


def test_a_census_counts_the_timing_tests_and_what_is_deselected() -> None:
    # (the census in a subprocess, on one file: 2 tests marked timing out of 6, and -m's choice)
    sample = "tests/backends/test_sqlalchemy_complaints.py"
    plain = census_by_collection(sample)
    assert len(plain.timing) == 2 and plain.collected == 6, plain
    assert plain.deselected == plain.timing
    timing = census_by_collection("-m", "timing", sample)
    assert timing.timing == plain.timing
    assert len(timing.deselected) == 4 and not timing.deselected & timing.timing
