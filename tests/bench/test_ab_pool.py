"""``python benchmarks/ab_pool.py``'s launcher: each revision's ``bench_pool.py`` runs as
``python bench_pool.py ARGS`` would run it, after the run's ballast is made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import ab_pool  # noqa: E402
from layouts import LAYOUTS  # noqa: E402

PROBE = """
import sys
import sibling  # (next to the script: its folder first on the path, as for python SCRIPT)
print(__name__, sibling.VALUE, *sys.argv[1:])
"""


def test_the_launcher_runs_a_script_as_python_would() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", ab_pool.LAUNCH, "123", str(BENCHMARKS / "no-such.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0 and "no-such.py" in ran.stderr  # (the script's own path is run)


def test_the_launcher_gives_the_script_its_arguments_and_its_folder(tmp_path: Path) -> None:
    (tmp_path / "sibling.py").write_text("VALUE = 7\n")
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    ran = subprocess.run(
        [sys.executable, "-c", ab_pool.LAUNCH, str(LAYOUTS - 1), str(script), "--a", "b"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=BENCHMARKS,  # (not the script's folder: the launcher puts that first)
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["__main__", "7", "--a", "b"]
