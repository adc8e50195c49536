"""Where the CMAP spec files are found, and what a run says when they are not (``cmap_runner``).

The runs of pytest here are subprocesses: ``POOLKIT_SPEC_TESTS`` is read when the runner is
imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cmap_runner import find_cmap_dir
from spec_dirs import find_spec_dir

ROOT = Path(__file__).resolve().parents[2]


def _pytest(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Run pytest on the spec tests in a subprocess, with ``env`` changed (None: unset)."""
    environ = dict(os.environ)
    for name, value in env.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _spec_tests(tmp_path: Path) -> Path:
    """A spec-tests folder holding 33 stand-ins for the CMAP files (collection reads only their
    ``style``), so that collecting does not depend on where the real ones are."""
    cmap = tmp_path / "spec-tests" / "cmap-format"
    cmap.mkdir(parents=True)
    for i in range(33):
        style = "unit" if i < 26 else "integration"
        (cmap / f"case-{i:02}.json").write_text(json.dumps({"style": style}))
    return cmap.parent


def test_either_folder_level_finds_the_cmap_files(tmp_path: Path) -> None:
    spec_tests = _spec_tests(tmp_path)
    assert find_cmap_dir(str(spec_tests)) == spec_tests / "cmap-format"
    assert find_cmap_dir(str(spec_tests / "cmap-format")) == spec_tests / "cmap-format"


def test_a_folder_named_for_one_suite_leads_to_its_siblings(tmp_path: Path) -> None:
    spec_tests = _spec_tests(tmp_path)
    (spec_tests / "sdam-load-balanced").mkdir()
    cmap = spec_tests / "cmap-format"
    assert find_spec_dir("sdam-load-balanced", str(cmap)) == spec_tests / "sdam-load-balanced"
    assert find_spec_dir("cmap-format", str(spec_tests / "sdam-load-balanced")) == cmap
    # a sibling that is missing is said missing, never read from the folder named
    assert find_spec_dir("uri-options", str(cmap)) == spec_tests / "uri-options"
    assert find_spec_dir("cmap-format", str(tmp_path / "my-copy")) == tmp_path / "my-copy"


def test_the_sdam_runner_given_the_cmap_folder_reads_no_cmap_file(tmp_path: Path) -> None:
    """The issue's run: ``POOLKIT_SPEC_TESTS`` set to the ``cmap-format`` folder, as the README
    allows, and the SDAM files beside it."""
    spec_tests = _spec_tests(tmp_path)
    sdam = spec_tests / "sdam-load-balanced"
    sdam.mkdir()
    (sdam / "discover_load_balancer.json").write_text("{}")
    run = _pytest(
        "-q",
        "tests/mongodb/test_topology.py::test_sdam_load_balanced_spec_files_present",
        POOLKIT_SPEC_TESTS=str(spec_tests / "cmap-format"),
        POOLKIT_REQUIRE_SERVICES="1",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


@pytest.mark.parametrize("level", ["spec-tests", "cmap-format"])
def test_the_99_spec_cases_are_collected_from_either_folder_level(
    level: str, tmp_path: Path
) -> None:
    spec_tests = _spec_tests(tmp_path)
    folder = spec_tests if level == "spec-tests" else spec_tests / "cmap-format"
    run = _pytest(
        "--collect-only", "-q", "tests/pools/test_cmap_spec.py", POOLKIT_SPEC_TESTS=str(folder)
    )
    assert run.returncode == 0, run.stdout + run.stderr
    cases = [line for line in run.stdout.splitlines() if "::test_cmap[" in line]
    assert len(cases) == 99  # 33 files x 3 front ends (asyncio, threads, trio)


def test_missing_spec_files_are_one_skip_saying_how_many_cases_did_not_run(
    tmp_path: Path,
) -> None:
    run = _pytest(
        "-q",
        "tests/pools/test_cmap_spec.py",
        POOLKIT_SPEC_TESTS=str(tmp_path),
        POOLKIT_REQUIRE_SERVICES=None,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (skipped,) = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert "99 CMAP spec cases (33 files x 3 front ends) did not run" in skipped
    assert f"no *.json spec files in {tmp_path / 'cmap-format'} or in {tmp_path} " in skipped
    assert f"(POOLKIT_SPEC_TESTS={tmp_path}); set POOLKIT_SPEC_TESTS to the spec-tests" in skipped
    assert "1 skipped" in run.stdout and "empty parameter set" not in run.stdout


def test_missing_spec_files_fail_when_services_are_required(tmp_path: Path) -> None:
    run = _pytest(
        "-q",
        "tests/pools/test_cmap_spec.py",
        POOLKIT_SPEC_TESTS=str(tmp_path),
        POOLKIT_REQUIRE_SERVICES="1",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "99 CMAP spec cases" in run.stdout and "1 failed" in run.stdout
