"""The README's MongoDB example runs as written (against the simulated load balancer it
starts itself)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).parents[2] / "README.md"


def test_the_readme_example_runs() -> None:
    text = README.read_text()
    start = text.index("\n## MongoDB")
    section = text[start : text.index("\n## ", start + 1)]
    (example,) = re.findall(r"```python\n(.*?)```", section, re.S)
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]",
        "{'cursor': 0, 'transaction': 0, 'other': 0}",
    ]
