"""tools/async_to_sync.py, which writes the blocking twins from their asyncio sources: the
``if True:  # ASYNC`` blocks give their ``else`` branch to the twin, the rules rename, and the
twin says it is generated. (That every twin is up to date is ``--check``, in CI's lint step.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", ROOT / "tools/async_to_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["async_to_sync"] = module
    spec.loader.exec_module(module)
    return module


def test_an_async_block_gives_the_twin_its_else_branch(tool: ModuleType) -> None:
    source = """\
class C:
    def __init__(self) -> None:
        if True:  # ASYNC: the loop's lock
            self._lock = asyncio.Lock()
            self._n = 1

        else:
            self._lock = threading.Lock()
            if self._lock:
                self._n = 2
        self.done = True
"""
    assert tool.blocking_branches(source) == """\
class C:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        if self._lock:
            self._n = 2
        self.done = True
"""


def test_an_async_block_without_else_leaves_nothing(tool: ModuleType) -> None:
    source = """\
async def aclose(self) -> None:
    self._break()
    if True:  # ASYNC
        await self._writer.wait_closed()
    return None
"""
    assert tool.blocking_branches(source) == """\
async def aclose(self) -> None:
    self._break()
    return None
"""


def test_code_that_only_looks_like_a_block_is_kept(tool: ModuleType) -> None:
    source = "if True:  # ASYNCHRONOUS, not the marker\n    x = 1\nif True:\n    y = 2\n"
    assert tool.blocking_branches(source) == source


def test_a_twin_is_blocking_renamed_and_marked_generated(tool: ModuleType) -> None:
    source = '''"""The asyncio source."""

import asyncio


class AsyncMongoConnection:
    async def command(self) -> None:
        try:
            if True:  # ASYNC
                await asyncio.sleep(0)
            else:
                pass
        except asyncio.CancelledError:
            raise
'''
    fired: set[str] = set()
    text = tool.twin(source, '"""The twin."""', fired, "src/x_async.py")
    assert text.startswith(
        "# Generated from src/x_async.py by tools/async_to_sync.py: do not edit.\n"
        '"""The twin."""\n'
    )
    assert "class MongoConnection:" in text and "    def command(self) -> None:" in text
    assert "except KeyboardInterrupt:" in text
    assert "asyncio" not in text  # (its import, unused now, dropped)
    assert r"\basyncio\.CancelledError\b" in fired


def test_each_twin_opens_with_the_generated_line(tool: ModuleType) -> None:
    names = []
    for source, target, _ in tool.PAIRS:
        first = target.read_text().splitlines()[0]
        assert first == (
            f"# Generated from {source.relative_to(ROOT)} by tools/async_to_sync.py: do not edit."
        )
        names.append(target.name)
    assert sorted(names) == [
        "_psycopg_dropin_sync.py",
        "_redis_dropin_sync.py",
        "connection_sync.py",
        "pool_sync.py",
    ]
