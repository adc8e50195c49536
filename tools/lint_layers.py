"""Check the layer contracts (docs/architecture.md): ``python tools/lint_layers.py``.

* Every contract in ``pyproject.toml`` must hold (``lint-imports``).
* Every contract in ``tools/pending-contracts.toml`` must still be broken: it names work left to
  do. One that holds fails this check, so that it is moved to ``pyproject.toml`` and enforced
  from then on, never left where a regression would go unnoticed.

Exit status 0 when both are true, 1 otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PENDING = ROOT / "tools" / "pending-contracts.toml"


def lint(*args: str, quiet: bool = False) -> bool:
    """Whether ``lint-imports`` with ``args`` finds every contract kept."""
    exe = shutil.which("lint-imports")
    if exe is None:
        sys.exit("lint-imports not found: pip install -e '.[dev]' (import-linter)")
    done = subprocess.run([exe, "--no-cache", *args], cwd=ROOT, capture_output=quiet)
    return done.returncode == 0


def main() -> int:
    status = 0
    if not lint():
        print("layer contracts broken (above): see docs/architecture.md", file=sys.stderr)
        status = 1
    contracts = tomllib.loads(PENDING.read_text())["tool"]["importlinter"].get("contracts", [])
    for contract in contracts:
        if lint(str(PENDING), "--contract", contract["id"], quiet=True):
            print(
                f"pending contract {contract['id']!r} ({contract['name']}) now holds: move it "
                "from tools/pending-contracts.toml to pyproject.toml",
                file=sys.stderr,
            )
            status = 1
        else:
            print(f"pending (still broken, as listed): {contract['name']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
