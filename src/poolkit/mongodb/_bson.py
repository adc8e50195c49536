"""pymongo's ``bson``, or an ``ImportError`` naming the extra that installs it: the modules of
:mod:`poolkit.mongodb` that need it import it from here, so that whichever is imported first,
a missing pymongo is said the same way."""

from __future__ import annotations

from ..driver import pip_install

try:
    import bson
    import bson.errors
    import bson.int64
except ImportError as exc:
    raise ImportError(
        f"poolkit.mongodb's connections need pymongo's bson: {pip_install('mongodb')}"
    ) from exc

__all__ = ["bson"]
