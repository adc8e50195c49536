"""The pools' types as a user's type checker sees them (issue 15, point 6): ``AsyncPool(connect)``
and ``Pool(connect)`` take the connection type from ``connect``'s return type (through
``Established`` too), a wrong hand annotation is refused, and ``Lease[C]`` carries it to
``lease.connection``. Runs mypy (``--strict``) on a snippet and compares its errors, line by
line, with the ones marked ``# E: code`` in it."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mypy import api

SNIPPET = '''
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import timedelta
from typing import assert_type
import poolkit
from poolkit import AsyncPool, ConnectContext, Established, Lease, Pool


class Conn:
    def close(self) -> None: ...


async def connect(ctx: ConnectContext) -> Conn:
    return Conn()


async def connect_streams(ctx: ConnectContext) -> Established[Conn]:
    return Established(Conn(), max_streams=4)


def connect_sync(ctx: ConnectContext) -> Conn:
    return Conn()


async def use() -> None:
    apool = AsyncPool(connect, address="db:1")
    assert_type(apool, AsyncPool[Conn])
    assert_type(AsyncPool(connect_streams), AsyncPool[Conn])
    lease = await apool.checkout()
    assert_type(lease, Lease[Conn])
    assert_type(lease.connection, Conn)
    async with apool.connection() as conn:
        assert_type(conn, Conn)
    block: AbstractAsyncContextManager[Conn] = apool.connection()
    wrong: AsyncPool[int] = AsyncPool(connect)  # E: arg-type
    AsyncPool(connect, adress="db:1")  # E: call-overload


def options() -> None:
    opts = poolkit.PoolOptions(max_idle_time=timedelta(seconds=5), wait_queue_timeout=1)
    assert_type(opts.max_idle_time, float | None)
    poolkit.KeepAlive(timedelta(seconds=1), lambda c: None, timeout=0.5)
    poolkit.Backoff(base=timedelta(milliseconds=50), circuit_breaker_after=None)
    poolkit.PoolOptions(max_size="10")  # E: arg-type
    poolkit.PoolOptions(max_idel_time=1)  # E: call-arg


def use_sync() -> None:
    pool = Pool(connect_sync, options=poolkit.PoolOptions(max_size=2))
    assert_type(pool, Pool[Conn])
    with pool.connection() as conn:
        assert_type(conn, Conn)
    block: AbstractContextManager[Conn] = pool.connection()
    assert_type(pool.checkout(), Lease[Conn])
    wrong: Pool[str] = Pool(connect_sync)  # E: arg-type
'''


def test_the_connection_type_follows_from_connect(tmp_path: Path) -> None:
    source = textwrap.dedent(SNIPPET)
    path = tmp_path / "snippet.py"
    path.write_text(source)
    expected = {
        (number, match.group(1))
        for number, line in enumerate(source.splitlines(), 1)
        if (match := re.search(r"# E: ([\w-]+)", line))
    }
    out, err, _ = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(path)]
    )
    found = {
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"snippet\.py:(\d+): error: .*\[([\w-]+)\]$", out, re.M)
    }
    assert found == expected, out + err


@pytest.mark.parametrize("name", ["PoolOptions", "KeepAlive", "Backoff", "Hooks"])
def test_the_typed_constructors_are_the_dataclasses(name: str) -> None:
    # The option classes declare, for type checkers only, a constructor that takes durations as
    # timedelta too (the dataclass fields are read as float). It must name the same parameters,
    # in the same order, with the same defaults and keyword-only-ness, as the dataclass.
    import ast
    import dataclasses
    import inspect

    import poolkit.options

    tree = ast.parse(Path(poolkit.options.__file__).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    init = next(
        f
        for node in cls.body
        if isinstance(node, ast.If)
        for f in node.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    args = init.args
    declared = [a.arg for a in args.args[1:] + args.kwonlyargs]
    defaults = [ast.literal_eval(d) for d in args.defaults] + [
        ast.literal_eval(d) for d in args.kw_defaults if d is not None
    ]
    real = inspect.signature(getattr(poolkit.options, name))
    assert declared == list(real.parameters)
    assert defaults == [
        p.default for p in real.parameters.values() if p.default is not inspect.Parameter.empty
    ]
    assert [a.arg for a in args.kwonlyargs] == [
        p.name for p in real.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert len(dataclasses.fields(getattr(poolkit.options, name))) == len(declared)
