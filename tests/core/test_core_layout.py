"""The core's layout (issue 15, point 2): collaborators, not a bag of functions.

* No method is bound into a class by assignment (``name = module.func``, ``property(module.f)``).
* Only the package's ``__init__`` imports ``pool``: no collaborator knows ``PoolCore``.
* Every module opens with its rules, and stays small.
* The enum aliases the core compares with are declared once, in ``records``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import poolkit._core

CORE = Path(poolkit._core.__file__).parent
MODULES = sorted(p for p in CORE.glob("*.py") if p.name != "__init__.py")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_method_bound_by_assignment(path: Path) -> None:
    for cls in (n for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if not isinstance(stmt, ast.Assign | ast.AnnAssign) or stmt.value is None:
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                assert value.func.id != "property" or not any(
                    isinstance(a, ast.Attribute) for a in value.args
                ), f"{path.name}: {cls.name} binds a property by assignment"
            assert not isinstance(value, ast.Attribute), (
                f"{path.name}:{stmt.lineno}: {cls.name} binds {ast.unparse(value)} by assignment"
            )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_only_the_package_imports_pool(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.module != "pool", f"{path.name} imports pool"
            if node.module is None:
                assert all(a.name != "pool" for a in node.names), f"{path.name} imports pool"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_each_module_opens_with_its_rules_and_is_small(path: Path) -> None:
    tree = _tree(path)
    doc = ast.get_docstring(tree)
    assert doc is not None and "Rules of this module" in doc, path.name
    assert len(path.read_text().splitlines()) <= 600, path.name


def test_enum_aliases_are_declared_once() -> None:
    declared: dict[str, list[str]] = {}
    for path in MODULES:
        for stmt in _tree(path).body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(stmt.value, ast.Attribute)
                and isinstance(stmt.value.value, ast.Name)
                and stmt.value.value.id
                in {"ConnState", "ConnInput", "PoolState", "RequestState", "Role"}
            ):
                declared.setdefault(stmt.target.id, []).append(path.name)
    assert declared, "no aliases found: the test no longer sees them"
    assert {name: where for name, where in declared.items() if where != ["records.py"]} == {}
