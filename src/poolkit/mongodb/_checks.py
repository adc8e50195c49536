"""The checks of the MongoDB pools' arguments: each names the call and the argument at
fault, and runs before anything is checked out or sent (the pool's state is unchanged)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

Purpose = Literal["cursor", "transaction", "other"]
PURPOSES: tuple[Purpose, ...] = ("cursor", "transaction", "other")


def check_purpose(purpose: object) -> None:
    if purpose not in PURPOSES:
        raise ValueError(f"connection(purpose=...): one of {PURPOSES}, not {purpose!r}")


def check_batch_size(batch_size: object, call: str) -> None:
    if type(batch_size) is not int or batch_size < 0:
        raise ValueError(f"{call}(batch_size=...): an int >= 0, not {batch_size!r}")


#: characters a database name may not hold (MongoDB's rules)
_NOT_IN_DB_NAMES = frozenset('/\\. "$\x00')


def check_db(db: object, call: str) -> None:
    if not isinstance(db, str) or not db or _NOT_IN_DB_NAMES.intersection(db):
        raise ValueError(
            f"{call}(db=...): a database name (a non-empty str without any of "
            f"'/\\. \"$' or NUL), not {db!r}"
        )


def check_collection(collection: object, call: str) -> None:
    if not isinstance(collection, str) or not collection or "\x00" in collection:
        raise ValueError(f"{call}(collection=...): a non-empty str, not {collection!r}")


def check_command(command: object, call: str) -> None:
    if not isinstance(command, Mapping) or not command:
        raise TypeError(
            f"{call}(command=...): a non-empty mapping whose first key names the command, "
            f"not {command!r}"
        )


def check_filter(filter: object, call: str) -> None:
    if filter is not None and not isinstance(filter, Mapping):
        raise TypeError(f"{call}(filter=...): a mapping or None, not {type(filter).__name__}")


def check_documents(documents: object, call: str) -> None:
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Sequence):
        raise TypeError(
            f"{call}(documents=...): a sequence of mappings, not {type(documents).__name__}"
        )
    for index, document in enumerate(documents):
        if not isinstance(document, Mapping):
            raise TypeError(
                f"{call}(documents=...): documents[{index}] is a "
                f"{type(document).__name__}, not a mapping"
            )


def check_pipeline(pipeline: object, call: str) -> None:
    if isinstance(pipeline, (str, bytes, Mapping)) or not isinstance(pipeline, Sequence):
        raise TypeError(f"{call}(pipeline=...): a sequence of stages, not {pipeline!r}")
    for index, stage in enumerate(pipeline):
        if not isinstance(stage, Mapping):
            raise TypeError(f"{call}(pipeline=...): pipeline[{index}] is not a mapping: {stage!r}")


def check_cursor(
    db: object, collection: object, filter: object, batch_size: object, call: str
) -> None:
    """The arguments of a ``find``."""
    check_db(db, call)
    check_collection(collection, call)
    check_filter(filter, call)
    check_batch_size(batch_size, call)


READ_MODES = ("primary", "primaryPreferred", "secondary", "secondaryPreferred", "nearest")


def check_read_preference(preference: object, call: str) -> dict[str, object] | None:
    """A read preference document (``{"mode": ..., "tags": ..., "maxStalenessSeconds": ...}``)
    as ``$readPreference`` carries it; None for primary (nothing sent)."""
    if preference is None:
        return None
    if not isinstance(preference, Mapping) or preference.get("mode") not in READ_MODES:
        raise ValueError(
            f"{call}(read_preference=...): a mapping whose 'mode' is one of {READ_MODES}, "
            f"not {preference!r}"
        )
    if preference["mode"] == "primary":
        if len(preference) > 1:
            raise ValueError(f"{call}(read_preference=...): primary takes no other option")
        return None
    return dict(preference)
