"""A peer's source distribution, fetched as a file: what the peer-suite runners
(``tools/*_suite/run.py``) unpack to get the peer's own tests.

``pip download --no-binary :all:`` fetches an sdist, but then prepares its metadata, which for a
package with C or Cython extensions (asyncpg, SQLAlchemy) means installing its build
requirements into an isolated environment first: minutes on a fresh machine, for a file that is
only unpacked. So :func:`fetch` asks the package index for the file itself (the index pip is
configured with, its JSON API, PEP 691), checks the SHA-256 the index gives, and falls back to
``pip download`` only when no index answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

#: the index asked when pip is configured with none (PIP_INDEX_URL, pip.conf's index-url)
DEFAULT_INDEX = "https://pypi.org/simple"
_JSON = "application/vnd.pypi.simple.v1+json"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _indexes() -> list[str]:
    """The http(s) indexes pip would ask, its main one first."""
    found: list[str] = []
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        found.append(env)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".index-url"):
            found.append(value.strip().strip("'\""))
    found.append(DEFAULT_INDEX)
    return [u.rstrip("/") for u in dict.fromkeys(found) if u.startswith(("http://", "https://"))]


def _from_index(index: str, name: str, version: str, into: Path) -> Path | None:
    """The sdist of ``name`` ``version`` from ``index``'s JSON API, or ``None``."""
    request = urllib.request.Request(f"{index}/{_normalized(name)}/", headers={"Accept": _JSON})
    with urllib.request.urlopen(request, timeout=60) as response:
        listing = json.load(response)
    wanted = {f"{n}-{version}.tar.gz" for n in (name, _normalized(name), name.replace("-", "_"))}
    wanted |= {w.lower() for w in wanted}
    for entry in listing.get("files", []):
        filename = entry.get("filename", "")
        if filename not in wanted:
            continue
        url = urllib.parse.urljoin(f"{index}/{_normalized(name)}/", entry["url"])
        digest = entry.get("hashes", {}).get("sha256")
        with urllib.request.urlopen(url, timeout=300) as response:
            data = response.read()
        if digest is not None and hashlib.sha256(data).hexdigest() != digest:
            raise OSError(f"{filename} from {index}: its SHA-256 is not the index's")
        with tempfile.NamedTemporaryFile(dir=into, delete=False) as tmp:
            tmp.write(data)
        target = into / filename
        Path(tmp.name).replace(target)
        return target
    return None


def fetch(name: str, version: str, into: Path, say: object = print) -> Path:
    """The path of ``name`` ``version``'s source distribution (a ``.tar.gz``) in ``into``,
    fetched there unless it already is. ``say`` reports what is being done."""
    into.mkdir(parents=True, exist_ok=True)
    patterns = {f"{n}-{version}.tar.gz" for n in (name, _normalized(name), name.replace("-", "_"))}
    for pattern in sorted(patterns | {p.lower() for p in patterns}):
        if (into / pattern).is_file():
            return into / pattern
    report = say if callable(say) else print
    report(f"fetching {name} {version}'s source distribution from the package index")
    for index in _indexes():
        try:
            found = _from_index(index, name, version, into)
        except (OSError, ValueError, KeyError) as exc:
            report(f"  {index}: {exc!r}")
            continue
        if found is not None:
            return found
    report("  no index gave the file: pip download (prepares its metadata: slower)")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(into), f"{name}=={version}"],
        check=True,
    )  # fmt: skip
    for pattern in sorted(patterns | {p.lower() for p in patterns}):
        if (into / pattern).is_file():
            return into / pattern
    sys.exit(f"no source distribution of {name} {version} in {into} after pip download")
