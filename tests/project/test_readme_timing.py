"""What the README says of the tests marked ``timing`` holds: its plain ``python -m pytest``
leaves them out (pyproject.toml's addopts), ``-m timing`` selects them, and there are as many as
it says (issue 37, point 9: the README's command must pass on a busy machine)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collect(*args: str) -> tuple[int, int]:
    """``pytest --collect-only`` of the whole suite: (selected, deselected)."""
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    found = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", ran.stdout)
    assert found is not None, ran.stdout[-2000:]
    selected, total, deselected = (int(g) for g in found.groups())
    assert selected + deselected == total
    return selected, deselected


def test_the_readme_command_leaves_out_the_timing_tests_it_counts() -> None:
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"It leaves out the (\d+) tests marked `timing`", readme)
    assert said is not None, "README: 'It leaves out the N tests marked `timing`'"
    assert "python -m pytest -m timing" in readme
    timing, rest = collect("-m", "timing")  # (the command line's -m wins over addopts')
    assert timing == int(said[1]), f"README says {said[1]} tests marked timing: there are {timing}"
    plain, left_out = collect()
    assert (plain, left_out) == (rest, timing)
