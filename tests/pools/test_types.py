"""The option classes' constructors as type checkers see them are the dataclasses' own. (What a
user's mypy sees of the pools is checked by mypy itself, in the lint step: tests/typing.)"""

from __future__ import annotations

from pathlib import Path

import pytest


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
