"""Write the blocking twins of the asyncio modules: ``python tools/async_to_sync.py`` writes each
``*_sync.py`` of ``PAIRS`` from its ``*_async.py``; ``--check`` only says whether they are up to
date (``.ci/run`` runs it in its lint step). A twin is the same code without ``async``/``await``,
with the blocking names (``AsyncMongoPool`` -> ``MongoPool``, ``AsyncPool`` -> ``Pool``...), its
own module docstring and a "generated, do not edit" line; then ``ruff`` sorts its imports,
drops those it no longer uses, and formats it.

Where the blocking code is not the asyncio code without ``await`` (a socket for a stream, a
thread lock for an asyncio one), the source says both, as psycopg's sources do::

    if True:  # ASYNC
        self._lock = asyncio.Lock()
    else:
        self._lock = threading.Lock()

The twin keeps the ``else`` branch, dedented (no ``else``: nothing). A rule that changes
nothing in any source fails the run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MONGODB = ROOT / "src/poolkit/mongodb"
BACKENDS = ROOT / "src/poolkit/backends"
PAIRS = [
    (
        BACKENDS / "_psycopg_dropin_async.py",
        BACKENDS / "_psycopg_dropin_sync.py",
        '''"""The psycopg_pool drop-ins for threads: ``ConnectionPool`` and ``NullConnectionPool``,
psycopg_pool's classes of those names served by a poolkit :class:`~poolkit.Pool`
(``poolkit.backends.psycopg`` exports them).

Generated from ``_psycopg_dropin_async`` by tools/async_to_sync.py: edit that one, then run the
tool. Its rules are ``_psycopg_dropin``'s and ``_psycopg_dropin_async``'s; here the hooks and
callbacks are plain functions, run in the calling thread (or the poolkit pool's).
"""''',
    ),
    (
        BACKENDS / "_redis_dropin_async.py",
        BACKENDS / "_redis_dropin_sync.py",
        '''"""The drop-in pools for redis-py's blocking clients: ``ConnectionPool`` and
``BlockingConnectionPool``, each redis-py's class of that name served by a poolkit
:class:`~poolkit.Pool` (``poolkit.backends.redis`` exports them).

Generated from ``_redis_dropin_async`` by tools/async_to_sync.py: edit that one, then run the
tool. Its rules are ``_redis_dropin``'s; here besides, for threads: ``_state_lock`` guards the
poolkit pool's opening and closing, ``_book_lock`` the books; a drop-in pool garbage-collected
unclosed has its poolkit pool closed on a thread of its own.
"""''',
    ),
    (
        MONGODB / "connection_async.py",
        MONGODB / "connection_sync.py",
        '''"""A MongoDB connection on a blocking socket (:class:`MongoConnection`), its SCRAM
authentication (:func:`authenticate`), and the connect function that gives it to
:class:`poolkit.Pool` (:func:`connect`).

Generated from :mod:`.connection_async` by tools/async_to_sync.py: edit that one, then run the
tool. Its rules are that module's.
"""''',
    ),
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
    (
        r"\bAsync(MongoPool|Cursor|Session|Transaction|MongoConnection|Pool|Iterator|Exchange)\b",
        r"\1",
    ),
    # psycopg's and psycopg_pool's names (the psycopg_pool drop-ins)
    (
        r"\bAsync(ConnectionPool|NullConnectionPool|Connection|ConninfoParam|KwargsParam"
        r"|ConnectionCB)\b",
        r"\1",
    ),
    (r"\bACT\b", "CT"),
    (r"from \.\.asyncio import Pool\b", "from ..threaded import Pool"),
    (r"\basync (def|with|for)\b", r"\1"),
    (r"\bawait ", ""),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\b__a(iter|next|enter|exit)__\b", r"__\1__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    # Awaitable[T] -> T (T with brackets two deep at most: Awaitable[Established[Conn[X]]])
    (r"\bAwaitable\[((?:[^\[\]]|\[(?:[^\[\]]|\[[^\[\]]*\])*\])*)\]", r"\1"),
    (r"\basync_connect\b", "connect"),
    (r"\bon asyncio streams\b", "on a blocking socket"),
    (r"\bredis\.asyncio\.", "redis."),
    (r"\basync_authenticate\b", "authenticate"),
    (r"\baclose\b", "close"),
    # a command interrupted mid-way: the task cancelled, or the thread's KeyboardInterrupt
    (r"\basyncio\.CancelledError\b", "KeyboardInterrupt"),
]

#: ``if True:  # ASYNC`` (what follows the marker is a comment)
_ASYNC_BLOCK = re.compile(r"^(?P<indent> *)if True: +# ASYNC\b")

_DOCSTRING = re.compile(r'\A"""(.*?)"""', re.DOTALL)


def twin(source: str, docstring: str, fired: set[str] | None = None, origin: str = "") -> str:
    """``source`` (an asyncio module, from the file ``origin``) made blocking, formatted; the
    patterns of the rules that changed something are added to ``fired``."""
    text = _DOCSTRING.sub(lambda _: docstring, source, count=1)
    text = f"# Generated from {origin} by tools/async_to_sync.py: do not edit.\n" + text
    text = blocking_branches(text)
    for pattern, replacement in RULES:
        text, count = re.subn(pattern, replacement, text)
        if count and fired is not None:
            fired.add(pattern)
    return formatted(text)


def blocking_branches(text: str) -> str:
    """``text`` with each ``if True:  # ASYNC`` block replaced by its ``else`` branch (dedented),
    or by nothing if it has none."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0

    def inside(line: str, indent: int) -> bool:
        return not line.strip() or len(line) - len(line.lstrip(" ")) > indent

    while i < len(lines):
        found = _ASYNC_BLOCK.match(lines[i])
        if found is None:
            out.append(lines[i])
            i += 1
            continue
        indent = len(found["indent"])
        i += 1
        while i < len(lines) and inside(lines[i], indent):
            i += 1  # the asyncio branch
        if i < len(lines) and lines[i].startswith(" " * indent + "else:"):
            i += 1
            while i < len(lines) and inside(lines[i], indent):
                line = lines[i]
                out.append(line[4:] if line.startswith(" " * (indent + 4)) else line)
                i += 1
    return "".join(out)


def formatted(text: str) -> str:
    """``text`` with its imports sorted and formatted, as ``ruff`` writes them."""
    for command in (["check", "--select", "I,F401", "--fix-only", "--quiet"], ["format"]):
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
        origin = str(source.relative_to(ROOT))
        text = twin(source.read_text(), docstring, fired, origin)
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
