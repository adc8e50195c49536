"""Write the front ends' inlined fast paths from their one source: ``python tools/inline_copies.py``
rewrites the copies, ``--check`` fails (exit 1) if a copy differs from what its source gives.

Each front end writes its check-out and check-in fast paths once, between markers::

    # <fast-check-in>
    ...
    # </fast-check-in>

and ``connection()``'s block, whose entry and exit are the most common check-out and check-in,
holds a copy of each (a call saved there is measurable: ``docs/architecture.md``)::

    # <fast-check-in copy: return -> return _DONE>
    ...
    # </fast-check-in copy>

A copy is its source's lines re-indented to the copy's marker, after the copy's rules: ``a -> b``
(several separated by ``;``) replaces a line that is exactly ``a`` (leading spaces aside) by
``b``. Nothing else may differ: a change to a fast path is made in its source and copied here,
as ``tools/async_to_sync.py`` writes the blocking twins (``.ci/run`` runs both with ``--check``).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the modules whose fast paths are copied (under ``src/poolkit``; the core's check-in hands back
#: in ``Handout.release_idle`` inlined and in ``_hand_back``)
MODULES = ("asyncio.py", "threaded.py", "_core/handout.py")

_OPEN = re.compile(r"^( *)# <([a-z-]+)( copy(?:: (.*))?)?>\n$")
_CLOSE = re.compile(r"^ *# </([a-z-]+)( copy)?>\n$")


@dataclass
class _Span:
    name: str
    copy: bool
    indent: int
    rules: dict[str, str]
    start: int  #: index of the first line after the opening marker
    end: int  #: index of the closing marker


def _rules(text: str | None, where: str) -> dict[str, str]:
    rules: dict[str, str] = {}
    for rule in (text or "").split(";"):
        if not rule.strip():
            continue
        old, arrow, new = rule.partition("->")
        if not arrow:
            raise SystemExit(f"{where}: a rule is 'old -> new', got {rule!r}")
        rules[old.strip()] = new.strip()
    return rules


def spans(lines: list[str], path: str) -> list[_Span]:
    """The marked spans of ``lines``, in order; a marker left open or closed twice stops."""
    found: list[_Span] = []
    current: _Span | None = None
    for i, line in enumerate(lines):
        opening = _OPEN.match(line)
        closing = _CLOSE.match(line)
        if opening:
            if current is not None:
                raise SystemExit(f"{path}:{i + 1}: <{opening[2]}> inside <{current.name}>")
            where = f"{path}:{i + 1}"
            current = _Span(
                opening[2], bool(opening[3]), len(opening[1]), _rules(opening[4], where), i + 1, -1
            )
        elif closing:
            if current is None or closing[1] != current.name or bool(closing[2]) != current.copy:
                raise SystemExit(f"{path}:{i + 1}: a closing marker with no opening one")
            current.end = i
            found.append(current)
            current = None
    if current is not None:
        raise SystemExit(f"{path}: <{current.name}> is never closed")
    return found


def _copied(source: list[str], source_indent: int, copy: _Span) -> list[str]:
    out = []
    for line in source:
        if not line.strip():
            out.append(line)
            continue
        body = line[source_indent:]
        if line[:source_indent].strip():
            raise SystemExit(f"a line of <{copy.name}> is indented less than its marker: {line!r}")
        stripped = body.rstrip("\n")
        lead = len(stripped) - len(stripped.lstrip(" "))
        key = stripped.strip()
        if key in copy.rules:
            stripped = " " * lead + copy.rules[key]
        out.append(" " * copy.indent + stripped + "\n")
    return out


def rewrite(text: str, path: str) -> str:
    """``text`` with every copy written anew from its source (one source per name)."""
    lines = text.splitlines(keepends=True)
    found = spans(lines, path)
    names = [s.name for s in found if not s.copy]
    if len(names) != len(set(names)):
        raise SystemExit(f"{path}: a fast path has more than one source")
    sources = {s.name: s for s in found if not s.copy}
    copies = [s for s in found if s.copy]
    for copy in copies:
        if copy.name not in sources:
            raise SystemExit(f"{path}: <{copy.name} copy> has no source")
    for name in sources:
        if not any(c.name == name for c in copies):
            raise SystemExit(f"{path}: <{name}> is copied nowhere: remove its markers")
    texts = {name: lines[s.start : s.end] for name, s in sources.items()}  # (before any change)
    for copy in reversed(copies):  # (from the end: earlier indexes stay valid)
        new = _copied(texts[copy.name], sources[copy.name].indent, copy)
        lines[copy.start : copy.end] = new
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a copy is out of date")
    args = parser.parse_args(argv)
    stale = 0
    for module in MODULES:
        path = ROOT / "src/poolkit" / module
        text = path.read_text()
        new = rewrite(text, str(path.relative_to(ROOT)))
        if new == text:
            continue
        if args.check:
            stale += 1
            diff = difflib.unified_diff(
                text.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"{module} (as it is)",
                f"{module} (copied from its sources)",
            )
            sys.stdout.writelines(diff)
        else:
            path.write_text(new)
            print(f"rewrote the copies in src/poolkit/{module}")
    if stale:
        print(f"{stale} module(s) with a stale copy: run python tools/inline_copies.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
