"""``python -m poolkit bench [TARGET] [options]``: see ``poolkit.bench``."""

import sys

from .bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
