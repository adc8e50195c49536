"""``benchmarks/peer_instructions.py --by-function``: each C function's own instructions per
operation, read from ``callgrind_annotate``, and the functions where contenders differ most."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from peer_instructions import differing, functions_of, per_op

ANNOTATED = """\
--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
57,154,281 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
4,917,578 ( 8.60%)  /b/Objects/obmalloc.c:_PyObject_Free [/lib/libpython3.11.so]
2,400,028 ( 4.20%)  /b/Python/bltinmodule.c:builtin_sum
1,484,676 ( 2.60%)  /b/Python/ceval.c:_PyEval_EvalFrameDefault'2 [/lib/libpython3.11.so]
  966,752 ( 1.69%)  /b/Python/ceval.c:_PyEval_EvalFrameDefault [/lib/libpython3.11.so]
       12 ( 0.00%)  ???:0x0000000000012345 [/lib/ld-linux.so.2]
"""


def test_functions_are_keyed_by_file_and_name_with_recursion_levels_merged() -> None:
    assert functions_of(ANNOTATED) == {
        "obmalloc.c:_PyObject_Free": 4_917_578,
        "bltinmodule.c:builtin_sum": 2_400_028,
        "ceval.c:_PyEval_EvalFrameDefault": 1_484_676 + 966_752,
        "???:0x0000000000012345": 12,
    }


def test_per_operation_is_the_second_runs_excess_over_its_extra_operations() -> None:
    low = {"a": 1_000, "b": 500}
    high = {"a": 5_000, "c": 800}  # (b not seen in the second run: it ran less)
    assert per_op(low, high, 100) == {"a": 40.0, "b": -5.0, "c": 8.0}


def test_the_functions_that_differ_most_come_first() -> None:
    a = {"same": 1_000.0, "more_in_a": 300.0, "small": 1.0}
    b = {"same": 1_000.0, "more_in_a": 100.0, "only_in_b": 250.0}
    assert differing([a, b], 2) == ["only_in_b", "more_in_a"]
    assert differing([a], 2) == ["same", "more_in_a"]  # (one contender: its largest)


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None,
    reason="valgrind's callgrind is not installed (Debian: apt-get install valgrind)",
)
def test_a_real_profile_is_read_whole(tmp_path: Path) -> None:
    """On callgrind's own output: every instruction counted falls to some function."""
    out = tmp_path / "callgrind.out"
    ran = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-S",
            "-c",
            "sum(range(20000))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    collected = re.search(r"Collected : (\d+)", ran.stderr)
    assert collected is not None, ran.stderr
    annotated = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    functions = functions_of(annotated)
    assert sum(functions.values()) == int(collected.group(1))
    assert functions["bltinmodule.c:builtin_sum"] > 0
