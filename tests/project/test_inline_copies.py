"""tools/inline_copies.py, which writes connection()'s inlined fast paths from their one source
in each front end (issue 38 point 1): the copies are up to date, and a copy edited by hand, a
source without a copy or a copy without a source is refused."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inline_copies", ROOT / "tools/inline_copies.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["inline_copies"] = module
    spec.loader.exec_module(module)
    return module


tool = _tool()

SOURCE = """\
def release(self):
    if quick:
        # <fast>
        taken = give(self)
        if taken:
            return
        # </fast>
    slow(self)


def exit(self):
    if quick:
        # <fast copy: return -> return DONE>
        # </fast copy>
    return DONE
"""


def test_the_front_ends_copies_are_up_to_date() -> None:
    assert tool.main(["--check"]) == 0


#: what each module writes once and copies once
_SPANS = {
    "asyncio.py": ("fast-check-in", "fast-check-out"),
    "threaded.py": ("fast-check-in", "fast-check-out"),
    "_core/handout.py": ("hand-back",),  # (``_hand_back``, inlined in ``release_idle``)
}


@pytest.mark.parametrize("module", tool.MODULES)
def test_each_front_end_writes_both_fast_paths_once_and_copies_each_once(module: str) -> None:
    lines = (ROOT / "src/poolkit" / module).read_text().splitlines(keepends=True)
    found = tool.spans(lines, module)
    assert sorted((s.name, s.copy) for s in found) == sorted(
        (name, copy) for name in _SPANS[module] for copy in (False, True)
    )


def test_a_copy_is_its_source_reindented_after_its_rules() -> None:
    written = tool.rewrite(SOURCE, "x.py")
    assert (
        "        # <fast copy: return -> return DONE>\n"
        "        taken = give(self)\n"
        "        if taken:\n"
        "            return DONE\n"
        "        # </fast copy>\n"
    ) in written
    assert tool.rewrite(written, "x.py") == written  # (written once, nothing left to change)


def test_a_copy_edited_by_hand_is_written_anew() -> None:
    written = tool.rewrite(SOURCE, "x.py")
    edited = written.replace("            return DONE\n", "            pass\n")
    assert tool.rewrite(edited, "x.py") == written


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            SOURCE.replace("# <fast copy: return -> return DONE>", "# <other copy>").replace(
                "# </fast copy>", "# </other copy>"
            ),
            "has no source",
        ),
        (
            SOURCE.replace("# <fast>", "# <lonely>").replace("# </fast>", "# </lonely>"),
            "has no source",
        ),
        (SOURCE.replace("        # </fast>\n", ""), "inside"),
    ],
)
def test_a_marker_without_its_other_half_is_refused(text: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        tool.rewrite(text, "x.py")
