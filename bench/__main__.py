"""``python -m bench``: the same as ``make bench`` and ``coordinator bench``."""

from __future__ import annotations

import sys

from bench import main

raise SystemExit(main(sys.argv[1:]))
