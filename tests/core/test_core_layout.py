"""The core's layout (issue 15, point 2; issue 26, point 4): collaborators, not a bag of
functions, nor a chain of classes.

* No method is bound into a class by assignment (``name = module.func``, ``property(module.f)``).
* ``PoolCore`` and the collaborators that decide inherit nothing: ``PoolCore`` holds them, and
  none has ``TYPE_CHECKING`` stubs for calls up. Which module may import which is the
  ``core-layers`` import-linter contract (``pyproject.toml``, run by ``tools/lint_layers.py``),
  not a test here.
* Every module opens with its rules.
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


#: the modules of PoolCore and the collaborators that decide (``state`` says who calls whom)
DECIDING = ("state.py", "connection_life.py", "handout.py", "health.py", "lifecycle.py", "pool.py")


@pytest.mark.parametrize("name", DECIDING)
def test_the_deciding_classes_inherit_nothing(name: str) -> None:
    classes = [n for n in ast.walk(_tree(CORE / name)) if isinstance(n, ast.ClassDef)]
    assert classes, name
    for cls in classes:
        bases = [ast.unparse(b) for b in cls.bases]
        if bases == ["Protocol"]:  # (an interface it declares: ``PoolCore.fast``'s port)
            continue
        assert not bases, f"{name}: {cls.name} inherits {bases}"


def test_no_type_checking_stubs_in_the_core() -> None:
    for path in MODULES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                raise AssertionError(f"{path.name}:{node.lineno}: an `if TYPE_CHECKING:` block")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_each_module_opens_with_its_rules(path: Path) -> None:
    doc = ast.get_docstring(_tree(path))
    assert doc is not None and "Rules of this module" in doc, path.name


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
