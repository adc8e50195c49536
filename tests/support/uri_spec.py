"""The uri-options spec test files (``shared/spec-tests/uri-options``) and how a case is judged.

The files are found as every spec runner finds its own (``spec_dirs``): ``POOLKIT_SPEC_TESTS``
names the spec-tests folder (or the ``uri-options`` folder itself), else
``../shared/spec-tests`` beside the clone. The format (the upstream
``uri-options/tests/README``): each case has ``description``, ``uri``, ``valid``, ``warning``,
``hosts``, ``auth`` and ``options``; a null ``hosts``, ``auth`` or ``options`` asserts nothing,
and option names compare case-insensitively.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from poolkit.mongodb.uri import MongoURI
from spec_dirs import find_spec_dir, where_looked

#: the files of the folder and how many cases they hold in all
FILES = ("connection-options.json", "connection-pool-options.json", "srv-options.json")
SPEC_CASES = 45  # 27 + 7 + 11


def missing_reason(uri_dir: Path) -> str:
    """One line: how many spec cases did not run, why, and what to set."""
    return (
        f"{SPEC_CASES} uri-options spec cases ({', '.join(FILES)}) did not run: the files are "
        f"not in {where_looked('uri-options', uri_dir)}"
    )


URI_DIR = find_spec_dir("uri-options", os.environ.get("POOLKIT_SPEC_TESTS"))


@dataclasses.dataclass(frozen=True)
class Case:
    file: str
    description: str
    uri: str
    valid: bool
    warning: bool
    hosts: list[dict[str, Any]] | None
    auth: dict[str, Any] | None
    options: dict[str, Any] | None

    @property
    def id(self) -> str:
        return f"{self.file.removesuffix('.json')}: {self.description}"


def load_cases(uri_dir: Path) -> list[Case]:
    """Every case of the files present, in file order."""
    cases = []
    for name in FILES:
        path = uri_dir / name
        if not path.is_file():
            continue
        for test in json.loads(path.read_text(encoding="utf-8"))["tests"]:
            cases.append(
                Case(
                    file=name,
                    description=test["description"],
                    uri=test["uri"],
                    valid=test["valid"],
                    warning=test.get("warning", False),
                    hosts=test.get("hosts"),
                    auth=test.get("auth"),
                    options=test.get("options"),
                )
            )
    return cases


def uri_option_names(uri: str) -> set[str]:
    """The lower-cased option names written in ``uri``'s query."""
    query = uri.partition("?")[2]
    return {unquote(item.partition("=")[0]).lower() for item in query.split("&") if item}


def needs_dns(case: Case) -> str | None:
    """Why ``case`` cannot be judged without resolving DNS, or ``None``: a ``mongodb+srv://``
    case whose expected hosts are the SRV lookup's answer, or whose expected options hold one
    the URI does not write (it can only come from the TXT record)."""
    if not case.uri.startswith("mongodb+srv://"):
        return None
    if case.hosts is not None:
        return "needs DNS: the expected hosts are the SRV lookup's answer"
    written = uri_option_names(case.uri)
    from_txt = sorted(name for name in case.options or {} if name.lower() not in written)
    if from_txt:
        return f"needs DNS: the expected options {from_txt} come from the TXT record"
    return None


def lowered(options: Mapping[str, Any]) -> dict[str, Any]:
    return {name.lower(): value for name, value in options.items()}


def check_parsed(case: Case, uri: MongoURI) -> None:
    """Assert what ``case`` expects of a URI that parsed (null fields assert nothing)."""
    if case.options is not None:
        assert lowered(uri.options) == lowered(case.options)
    if case.hosts is not None:
        actual = [{"host": host, "port": port} for host, port in uri.hosts]
        for want, got in zip(case.hosts, actual, strict=True):
            for key in ("host", "port"):
                if want.get(key) is not None:
                    assert got[key] == want[key], (key, want, got)
    if case.auth is not None:
        got_auth = {"username": uri.username, "password": uri.password, "db": uri.database}
        for key, want_value in case.auth.items():
            if want_value is not None:
                assert got_auth[key] == want_value, key
