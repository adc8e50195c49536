"""Each front end is read in one module (issue 38 point 2): ``AsyncPool`` and ``Pool`` have one
base class, ``PoolBase``, and neither redefines a name it defines; what the base needs of them is
declared for the type checker only (``PoolBase``'s ``if TYPE_CHECKING:`` block)."""

from __future__ import annotations

import inspect
from typing import Any, Generic

import pytest

from poolkit import AsyncPool, Pool
from poolkit._base import PoolBase

#: what every class body defines for itself (Python's and typing's bookkeeping)
_BOOKKEEPING = {
    "__module__",
    "__doc__",
    "__dict__",
    "__weakref__",
    "__orig_bases__",
    "__parameters__",
    "__annotations__",
    "__qualname__",
    "__firstlineno__",
    "__static_attributes__",
    "__annotate__",
    "__final__",
    "__slots__",
}


def _defined(cls: type[Any]) -> set[str]:
    return set(vars(cls)) - _BOOKKEEPING


@pytest.mark.parametrize("front", [AsyncPool, Pool])
def test_a_front_end_has_one_base_and_overrides_none_of_it(front: type[Any]) -> None:
    assert front.__mro__ == (front, PoolBase, Generic, object)
    overridden = _defined(front) & _defined(PoolBase)
    assert not overridden, f"{front.__name__} redefines PoolBase's {sorted(overridden)}"


def test_the_base_defines_nothing_a_front_end_must_replace() -> None:
    # (no stub raising NotImplementedError: a front end provides what the base declares)
    for name, member in vars(PoolBase).items():
        if inspect.isfunction(member):
            source = inspect.getsource(member)
            assert "NotImplementedError" not in source, name


@pytest.mark.parametrize("front", [AsyncPool, Pool])
def test_a_front_end_provides_what_the_base_declares(front: type[Any]) -> None:
    # the names of PoolBase's ``if TYPE_CHECKING:`` block, read from its source
    source = inspect.getsource(PoolBase)
    block = source.split("if TYPE_CHECKING:", 1)[1].split("    def _setup(", 1)[0]
    declared = {
        line.split("def ", 1)[1].split("(", 1)[0]
        for line in block.splitlines()
        if line.strip().startswith("def ")
    }
    assert declared >= {"_step", "_release", "_bind", "_wake", "_rearm_locked"}
    for name in declared:
        assert name in vars(front), f"{front.__name__} does not define {name}"
        assert name not in vars(PoolBase), f"PoolBase defines {name} at run time"
