"""Write the blocking twin of an asyncio module: ``python tools/async_to_sync.py`` writes
src/poolkit/mongodb/pool_sync.py from pool_async.py; ``--check`` only says whether it is up to
date (the tests run it so). The twin is the same code without ``async``/``await``, with the
blocking names (``AsyncMongoPool`` -> ``MongoPool``, ``AsyncPool`` -> ``Pool``...) and its own
module docstring; then ``ruff format``. A rule that changes nothing in any source fails the
run (``.ci/run`` runs ``--check`` in its lint step).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [
    (
        ROOT / "src/poolkit/mongodb/pool_async.py",
        ROOT / "src/poolkit/mongodb/pool_sync.py",
        '''"""Operations over a pool of blocking MongoDB connections, for threads: commands,
cursors, sessions and transactions, with the Load Balancer spec's pinning and error handling
(:class:`MongoPool`; thread-safe, as :class:`~poolkit.Pool`). The rules are :mod:`.pinning`'s;
this module runs their commands.

Generated from :mod:`.pool_async` by tools/async_to_sync.py: edit that one, then run the tool.
Its rules are that module's.
"""''',
    ),
]

#: (pattern, replacement), applied in order
RULES: list[tuple[str, str]] = [
    (r"\bAsync(MongoPool|Cursor|Session|Transaction|MongoConnection|Pool|Iterator)\b", r"\1"),
    (r"from \.\.asyncio import Pool\b", "from ..threaded import Pool"),
    (r"\basync (def|with|for)\b", r"\1"),
    (r"\bawait ", ""),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\b__a(iter|next|enter|exit)__\b", r"__\1__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\.connection\.connect`", ".connection.connect_sync`"),
]

_DOCSTRING = re.compile(r'\A"""(.*?)"""', re.DOTALL)


def twin(source: str, docstring: str, fired: set[str] | None = None) -> str:
    """``source`` (an asyncio module) made blocking, formatted; the patterns of the rules that
    changed something are added to ``fired``."""
    text = _DOCSTRING.sub(lambda _: docstring, source, count=1)
    for pattern, replacement in RULES:
        text, count = re.subn(pattern, replacement, text)
        if count and fired is not None:
            fired.add(pattern)
    return formatted(text)


def formatted(text: str) -> str:
    """``text`` with its imports sorted and formatted, as ``ruff`` writes them."""
    for command in (["check", "--select", "I", "--fix-only", "--quiet"], ["format"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", "twin.py", "-"],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode != 0:
            raise SystemExit(f"ruff {command[0]} failed (pip install ruff?): {done.stderr}")
        text = done.stdout
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say what is out of date")
    args = parser.parse_args(argv)
    stale = []
    fired: set[str] = set()
    for source, target, docstring in PAIRS:
        text = twin(source.read_text(), docstring, fired)
        # (both formatted by the ruff at hand: another ruff's style is no difference)
        if target.exists() and formatted(target.read_text()) == text:
            continue
        stale.append(target)
        if not args.check:
            target.write_text(text)
    for target in stale:
        verb = "is out of date" if args.check else "written"
        print(f"{target.relative_to(ROOT)} {verb}", file=sys.stderr)
    # a rule that changes nothing in any source is dead: the sources no longer need it, or it no
    # longer matches what they say (a renamed class), and the twin is then silently wrong
    dead = [pattern for pattern, _ in RULES if pattern not in fired]
    for pattern in dead:
        print(f"rule {pattern!r} changes nothing: remove it or mend it", file=sys.stderr)
    return 1 if (args.check and stale) or dead else 0


if __name__ == "__main__":
    sys.exit(main())
