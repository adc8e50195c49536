"""Check the layer contracts (docs/architecture.md): ``python tools/lint_layers.py``.

Every contract in ``pyproject.toml`` must hold (``lint-imports``). A contract today's code
breaks is not written down to be waived: the code is fixed, or the contract is not added.

Exit status 0 when they all hold, 1 otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    exe = shutil.which("lint-imports")
    if exe is None:
        sys.exit("lint-imports not found: pip install -e '.[dev]' (import-linter)")
    if subprocess.run([exe, "--no-cache"], cwd=ROOT).returncode != 0:
        print("layer contracts broken (above): see docs/architecture.md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
